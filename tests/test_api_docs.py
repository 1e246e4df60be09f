"""Every public function and method of the engine documents its parameters and what it returns (with
shapes where there are tensors) and carries an example that runs as a doctest (`make test` runs the
doctests with `--doctest-modules src/mfattn`). Public means: the names in a module's `__all__` (or,
without one, the functions and classes it defines without a leading underscore), and the public
methods those classes define."""

import importlib
import inspect

import pytest

MODULES = ["models.model", "models.data", "models.softmax", "models.activations", "models.particles",
           "flows.integrate", "models.linear", "flows.seeds", "flows.dynamics", "flows.optimizers", "models.baseline",
           "analysis.scaling", "analysis.longtime", "analysis.smoothness", "analysis.fitting", "analysis.transport",
           "analysis.chaos", "companion.sweep", "analysis.static", "analysis.stability", "models.tasks",
           "models.tokens", "models.twolayer", "models.distributed", "companion.shard", "companion.book",
           "companion.evidence", "companion.chapters", "companion.plotting", "models.fused", "models.fused_cuda",
           "companion.replicate", "companion.verdicts", "companion.render"]


def public_callables():
    out = []
    for m in MODULES:
        mod = importlib.import_module(f"mfattn.{m}")
        names = getattr(mod, "__all__", None) or [
            n for n, o in vars(mod).items()
            if not n.startswith("_") and (inspect.isfunction(o) or inspect.isclass(o))
            and getattr(o, "__module__", "") == mod.__name__]
        for n in names:
            o = getattr(mod, n)
            if inspect.isclass(o):
                out.append((f"{m}.{n}", o, "class"))
                for k, v in vars(o).items():
                    if not k.startswith("_") and inspect.isfunction(v):
                        out.append((f"{m}.{n}.{k}", v, "method"))
            elif inspect.isfunction(o):
                out.append((f"{m}.{n}", o, "function"))
    return out


CALLABLES = public_callables()


def _params(f):
    sig = inspect.signature(f)
    return [p for p in sig.parameters.values() if p.name not in ("self", "cls")]


@pytest.mark.parametrize("name,obj,kind", CALLABLES, ids=[c[0] for c in CALLABLES])
def test_documented_with_parameters_returns_and_an_example(name, obj, kind):
    doc = inspect.getdoc(obj) or ""
    assert doc, f"{name}: no docstring"
    if kind == "class":
        assert "Examples" in doc and ">>>" in doc, f"{name}: the class docstring needs an Examples section"
        return
    if _params(obj):
        assert "Parameters\n----------" in doc, f"{name}: no Parameters section"
    returns = inspect.signature(obj).return_annotation
    if returns not in (None, "None"):
        assert ("Returns\n-------" in doc or "Yields\n------" in doc), f"{name}: no Returns section"
    assert "Examples\n--------" in doc and ">>>" in doc, f"{name}: no Examples section with a doctest"
