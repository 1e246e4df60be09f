"""The benchmark's implementations compute the engine's numbers, and its command writes its report.

The per-head SDPA loop and the naive batched pass are independent implementations of eqs. (5)-(10)
differentiated by autograd; in float64 they must give the engine's hand-written gradient to round-off.
Timings are not asserted (benchmarks are not tests).
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from mfattn.companion import bench, roofline
from mfattn.models import fused

from conftest import make_problem


@pytest.mark.parametrize("impl", ["naive", "loop", "engine", "fused"])
def test_baselines_equal_the_engine_in_float64(impl):
    if impl == "fused" and not fused.available():
        pytest.skip("numba not installed")
    model, data, heads, w, _ = make_problem(n=5, L=7, N=6)
    got = bench.GRADS[impl](model, data.X, data.Y, heads, w)
    torch.testing.assert_close(got, model.grad_first_variation(data, heads, heads, w), rtol=1e-10, atol=1e-12)


def test_flop_count_matches_the_products_of_one_head():
    # count the multiply-adds of the forward pass by hand for L = 3, d_x = 2, d_k = 1
    L, d_x, d_k = 3, 2, 1
    fwd = 3 * (L * d_x * d_k) + L * L * d_k + L * L * d_k + L * d_k * d_x  # multiply-adds
    assert bench.flop_count(L, d_x, d_k) == 3 * 2 * fwd


def test_bench_command_writes_json_table_and_plot(tmp_path):
    cmd = [sys.executable, "-m", "mfattn", "bench", "--Ns", "4,8", "--repeats", "1", "--n-data", "3",
           "--no-compile-time", "--out", str(tmp_path), "--name", "t"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "TQDM_DISABLE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "t.json").read_text())
    assert [r["N"] for r in res["rows"]] == [4, 8]
    best = res["best"]
    assert best == ("fused" if fused.available() else "engine")
    for r in res["rows"]:
        assert r[f"{best}_agree"] == 0.0 and r["loop_agree"] < 1e-5 and r["naive_agree"] < 1e-5
        assert r["engine_agree"] < 1e-5
        assert r["speedup_grad_vs_loop"] == pytest.approx(r["loop_grad_s"] / r[f"{best}_grad_s"])
    assert "| 8 |" in (tmp_path / "t.md").read_text()
    assert (tmp_path / "t.png").stat().st_size > 1000
    # the run fixed glibc's thresholds (where there is a glibc) and its table says so
    assert res["allocator"] in (roofline.ALLOCATOR, None)
    assert roofline.allocator_words(res) in (tmp_path / "t.md").read_text()
    # and how its threads waited (the setting chosen at import decides small calls' times)
    assert res["machine"]["wait"] and f"(waiting: {res['machine']['wait']})" in (tmp_path / "t.md").read_text()
    # --report rebuilds the same table from the saved JSON without measuring
    again = subprocess.run([sys.executable, "-m", "mfattn", "bench", "--report", str(tmp_path / "t.json")],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and (tmp_path / "t.md").read_text() in again.stdout


def test_bench_tokens_times_both_paths_of_the_token_sums(tmp_path):
    """bench --tokens checks the fused token sums against the stored kernel before timing them, at
    chapter 06's shapes, and --report rebuilds its table from the JSON."""
    cmd = [sys.executable, "-m", "mfattn", "bench", "--tokens", "--repeats", "1", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "tokens.json").read_text())
    assert [(r["B"], r["n"], r["d"]) for r in res["rows"]] == list(bench.TOKEN_SHAPES)
    md = (tmp_path / "tokens.md").read_text()
    for r in res["rows"]:
        assert f"| {r['torch_s'] / r['fused_s']:.1f}x |" in md
        assert r["pair_rate"] == pytest.approx(r["B"] * r["n"] ** 2 / r["fused_s"])
    again = subprocess.run([sys.executable, "-m", "mfattn", "bench", "--report", str(tmp_path / "tokens.json")],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and md in again.stdout


def test_bench_flags_figures_whose_calls_spread(tmp_path):
    # a saved result with one unsteady figure: the table and the warning name it; a steady one has no warning
    res = json.loads(json.dumps(_SAVED))
    assert bench.warning(res) is None and "Warning" not in bench.table(res)
    res["rows"][1]["fused_sgd_spread"] = 0.5
    warn = bench.warning(res)
    assert warn and "fused_sgd at N = 8" in warn and "1.5 before the run" in warn
    assert warn in bench.table(res) and "ms ±25%" in bench.table(res)


def test_bench_says_whether_other_processes_were_busy(tmp_path):
    # with the cores other processes kept busy recorded, the warning says which case it is, from
    # mfattn.BUSY_FROM on, instead of guessing from the load average (which counts the run's own threads)
    import mfattn

    res = json.loads(json.dumps(_SAVED))
    res["rows"][0]["fused_grad_spread"] = 0.5
    res["busy"] = [0.0, 0.03]
    quiet = bench.warning(res)
    assert "no other process was busy (0.00 and 0.03 cores" in quiet and "load average" not in quiet
    res["busy"] = [0.0, mfattn.BUSY_FROM]
    assert "other processes kept 0.00 and 0.50 cores busy" in bench.warning(res)


def test_time_call_batches_calls_shorter_than_least():
    # a call of about a millisecond, with samples of at least 50 ms: one warm-up call, then three samples
    # of the same number of calls (dozens, unless the warm-up sleep overran by tens of milliseconds), and
    # the median is one call's time, at least the millisecond each sleeps
    import time as _t

    n = [0]

    def call():
        n[0] += 1
        _t.sleep(0.001)

    med = bench.time_call(call, torch.device("cpu"), 3, warmup=1, least=0.05)
    assert 0.001 <= med < 0.05
    assert (n[0] - 1) % 3 == 0 and n[0] - 1 >= 3 * 2
    with pytest.raises(ValueError, match="least"):
        bench.time_call(call, torch.device("cpu"), 3, least=-1.0)


def test_time_records_the_spread_of_its_calls():
    calls = iter([0.0, 0.01, 0.02, 0.03, 0.05])
    sp = []
    import time as _t
    med = bench.time_call(lambda: _t.sleep(next(calls)), torch.device("cpu"), 4, warmup=1, spread=sp)
    assert 0.015 < med < 0.04 and len(sp) == 1 and sp[0] > 0.3


_SAVED = {"machine": {"cpu": "test CPU (2 logical cores)", "torch": "x", "threads": 2}, "device": "cpu",
          "dtype": "float32", "task": "teacher", "n_data": 3, "L": 8, "d_x": 4, "d_k": 2, "d_v": 5, "repeats": 5,
          "peaks": {"matmul_flops": 1e11, "matmul_size": 1024, "copy_bytes_per_s": 1e10}, "best": "fused",
          "load": [1.5, 1.7], "budgets": [],
          "rows": [{"N": N, "fused_grad_s": 1e-3, "fused_sgd_s": 1e-4, "fused_grad_spread": 0.05,
                    "fused_sgd_spread": 0.1, "fused_flops": 1e10, "heads_bytes": 4096, "fused_agree": 0.0}
                   for N in (4, 8)]}


@pytest.mark.parametrize("kw, name", [(dict(repeats=0), "repeats"), (dict(repeats=2, warmup=-1), "warmup")])
def test_time_call_names_a_bad_count(kw, name):
    with pytest.raises(ValueError, match=name):
        bench.time_call(lambda: None, torch.device("cpu"), **kw)


def test_wait_table_holds_the_settings_to_their_ratios():
    # figures built by hand: the ratios are the quotients of the named cells
    rows = [{"setting": k, "busy": c, "grad_s": g, "autograd_s": a, "policy": p, "throttled": t, "processes": []}
            for k, c, g, a, p, t in (("auto", "none", 0.10, 0.20, "GOMP_SPINCOUNT=300000", [False] * 3),
                                     ("auto", "later", 0.25, 0.40, "GOMP_SPINCOUNT=300000", [True] * 3),
                                     ("auto", "start", 0.23, 0.44, "GOMP_SPINCOUNT=300000", [True, False, True]),
                                     ("auto", "ended", 0.11, 0.17, "GOMP_SPINCOUNT=300000", [False] * 3),
                                     ("passive", "none", 0.19, 0.30, "OMP_WAIT_POLICY=PASSIVE", [False] * 3),
                                     ("passive", "later", 0.16, 0.24, "OMP_WAIT_POLICY=PASSIVE", [False] * 3),
                                     ("default", "none", 0.09, 0.19, "OMP_WAIT_POLICY=", [False] * 3),
                                     ("default", "later", 0.34, 0.38, "OMP_WAIT_POLICY=", [False] * 3),
                                     ("spin 300", "none", 0.17, 0.29, "GOMP_SPINCOUNT=300", [False] * 3),
                                     ("spin 300", "later", 0.18, 0.27, "GOMP_SPINCOUNT=300", [False] * 3))]
    res = {"kind": "wait", "spin": 300000, "threads": 2, "rounds": 3, "rows": rows, "busy": [0.0, None]}
    text = bench.wait_table(res)
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    row = lambda start: next(v for k, v in lines.items() if k.startswith(start))  # noqa: E731
    assert f"| {0.10 / 0.09:.2f} | {0.20 / 0.19:.2f} |" in row("idle: the package")
    assert f"| {0.25 / 0.10:.2f} | {0.40 / 0.20:.2f} |" in row("busy later")
    assert f"| {0.23 / 0.10:.2f} | {0.44 / 0.20:.2f} |" in row("busy at start:")
    assert f"| {0.11 / 0.09:.2f} | {0.17 / 0.19:.2f} |" in row("busy at start, then idle")
    assert f"| {0.19 / 0.09:.2f} | {0.30 / 0.19:.2f} |" in row("the same for PASSIVE")
    assert f"| {0.17 / 0.09:.2f} | {0.29 / 0.19:.2f} | {0.18 / 0.17:.2f} | {0.27 / 0.29:.2f} |" in lines["300"]
    assert ("| the package's choice (GOMP_SPINCOUNT=300000, watched) | busy core from before the import | 230 ms | "
            "440 ms | 2 of 3 |") in text
    assert "median over 3 processes" in text and "before and after the run: 0.00 and unknown" in text
    res["rows"] = [r for r in rows if not r["setting"].startswith("spin")]  # no spin counts asked: no such table
    assert "unwatched | idle" not in bench.wait_table(res)


def test_run_wait_takes_the_median_over_processes_run_in_turn(monkeypatch):
    # scripted processes: each returns its call number, so the medians and the order are known
    calls = []

    def process(name, env, case, repeats):
        calls.append((name, case, env.get("OMP_WAIT_POLICY"), env.get("GOMP_SPINCOUNT")))
        n = len(calls)
        return [0.001 * n, 0.002 * n, f"P{name}", case != "none"]

    monkeypatch.setattr(bench, "_wait_process", process)
    res = bench.run_wait(repeats=2, spins=[700], rounds=3, progress=False)
    cases = [("auto", c) for c in bench.WAIT_CASES] + [(k, c) for k in ("passive", "default", "spin 700")
                                                       for c in ("none", "later")]
    per_round = len(cases)
    assert [c[:2] for c in calls] == cases * 3  # round by round, every case in turn
    assert calls[0][2:] == (None, None) and calls[per_round + 4][2:] == ("PASSIVE", None) and calls[6][2:] == ("", None) and calls[8][2:] == (None, "700")
    for i, r in enumerate(res["rows"]):
        assert (r["setting"], r["busy"]) == cases[i]
        ns = [i + 1, i + 1 + per_round, i + 1 + 2 * per_round]
        assert r["processes"] == [[0.001 * n, 0.002 * n] for n in ns]
        assert r["grad_s"] == 0.001 * ns[1] and r["autograd_s"] == 0.002 * ns[1]
        assert r["throttled"] == [r["busy"] != "none"] * 3 and r["policy"] == f"P{r['setting']}"
    assert res["rounds"] == 3 and res["kind"] == "wait"


# a stand-in for the --wait workload: says whether a sibling burns a core (a child of the benchmark's
# process running "while True: pass") when it imports and when it times, then prints the fields
_WAIT_PROBE = """
import os, sys
def burning():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():  # this script's own text names the loop too
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline").read()
            ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if ppid == os.getppid() and "while True: pass" in cmd:
            return 1
    return 0
at_import = burning()
print("ready", flush=True)
sys.stdin.readline()
print(at_import, burning(), "POLICY", "False")
"""


@pytest.mark.parametrize("case, want", [("none", [0, 0]), ("later", [0, 1]), ("start", [1, 1]), ("ended", [1, 0])])
def test_each_wait_case_puts_the_busy_core_where_it_says(monkeypatch, case, want):
    monkeypatch.setattr(bench, "_WAIT_WORK", _WAIT_PROBE)
    got = bench._wait_process("auto", dict(os.environ), case, 1)
    assert got == [*want, "POLICY", False]
    # and no child is left behind
    assert "while True: pass" not in subprocess.run(["ps", "-o", "args=", "--ppid", str(os.getpid())],
                                                    capture_output=True, text=True).stdout


def test_a_failed_wait_process_says_why(monkeypatch):
    monkeypatch.setattr(bench, "_WAIT_WORK", "import sys; sys.exit('boom')")
    for case in ("none", "ended"):
        with pytest.raises(RuntimeError, match="the auto process failed: boom"):
            bench._wait_process("auto", dict(os.environ), case, 1)


# many temporaries of a few megabytes alive at once, then freed, call after call (the torch path's pattern);
# prints the page faults per call after three calls of warm-up
_TEMPORARIES = """
import resource, sys
import numpy as np
from mfattn.companion import roofline
if sys.argv[1] == "steady":
    assert roofline.steady_allocator() == roofline.ALLOCATOR
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    a = [np.ones(600_000) for _ in range(5)]; del a
f0 = faults()
for _ in range(20):
    a = [np.ones(600_000) for _ in range(5)]; del a
print((faults() - f0) / 20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_steady_allocator_reuses_temporaries_instead_of_mapping_them_afresh():
    """Five temporaries of 4.8 MB each, freed and made again, in fresh processes: under glibc's defaults
    each round maps them afresh (about 2,000 page faults a round on the machine this was written on, the
    counterfactual measured here), under roofline.steady_allocator they come back from the heap (0)."""
    def per_call(mode):
        out = subprocess.run([sys.executable, "-c", _TEMPORARIES, mode], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return float(out.stdout)

    default = per_call("default")
    if default < 5 * 600_000 * 8 / 4096 / 4:  # under a quarter of the pages: this allocator keeps them anyway
        pytest.skip(f"the allocator's defaults already reuse the temporaries ({default:g} faults a call)")
    assert per_call("steady") < 50


def test_allocator_words_say_what_a_run_recorded():
    assert "32 MiB from the heap" in roofline.allocator_words({"allocator": dict(roofline.ALLOCATOR)})
    assert "system's defaults" in roofline.allocator_words({"allocator": None})
    assert "not recorded" in roofline.allocator_words({})
