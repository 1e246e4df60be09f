"""Tasks, rate fits, profiles/verdicts and the Proposition 3.4 estimator."""

import math
import re

import numpy as np
import pytest
import torch

from mfattn import entropy
from mfattn.companion.book import (Verdict, all_passed, check_at_most, check_close, check_fit, check_fit_at_most, check_within,
                         report, resolve_profile, show_config, verdict_table_html)
from mfattn.analysis.fitting import loglog_fit
from mfattn.analysis.smoothness import feature_derivative_sup
from mfattn.models.tasks import _OTHER, _corpus, markov_task, teacher_task, text_task


def test_teacher_optimal_risk_is_attained_and_is_a_lower_bound():
    T = teacher_task(n=64, seed=3)
    at_teacher = float(T.model.risk(T.data, T.teacher_heads, T.teacher_weights))
    assert math.isclose(at_teacher, T.optimal_risk, rel_tol=1e-12)
    g = torch.Generator().manual_seed(0)
    for scale in (1e-3, 1e-1, 1.0):
        other = T.teacher_heads + scale * torch.randn(T.teacher_heads.shape, generator=g, dtype=torch.float64)
        assert float(T.model.risk(T.data, other)) > T.optimal_risk
    # the optimum is a stationary point: grad Phi(.; teacher) vanishes at the teacher's heads
    grad = T.model.grad_first_variation(T.data, T.teacher_heads, T.teacher_heads, T.teacher_weights)
    assert float(grad.abs().max()) < 1e-12


def test_tasks_are_seeded_and_device_independent():
    for make in (teacher_task, markov_task, text_task):
        a, b, c = make(n=16, seed=5), make(n=16, seed=5), make(n=16, seed=6)
        assert torch.equal(a.data.X, b.data.X) and torch.equal(a.data.Y, b.data.Y)
        assert torch.equal(a.model.W_out, b.model.W_out)
        assert not torch.equal(a.data.X, c.data.X)
        f = make(n=16, seed=5, dtype=torch.float32)
        assert f.data.X.dtype == torch.float32 and f.model.dtype == torch.float32
        torch.testing.assert_close(f.data.X.double(), a.data.X, rtol=1e-6, atol=1e-7)


def test_markov_task_labels_are_the_next_tokens():
    T = markov_task(n=32, L=6, vocab_size=5, seed=1)
    labels = T.data.Y.argmax(-1)
    assert torch.equal(T.data.Y.sum(-1), torch.ones(32, 6, dtype=torch.float64))
    assert torch.equal(labels[:, :-1], T.tokens[:, 1:])  # Y_l is the token at position l + 1
    torch.testing.assert_close(T.data.X, T.embedding[T.tokens])
    assert 0 < T.bayes_risk < math.log(5)


def test_text_task_windows_are_corpus_substrings():
    T = text_task(n=8, L=12, seed=2)
    text = _corpus()
    alphabet = "".join(T.vocab[:-1])
    other = "[^" + re.escape(alphabet) + "]"
    ids = torch.cat([T.tokens, T.data.Y[:, -1:].argmax(-1)], 1)
    for row in ids:
        pattern = "".join(other if T.vocab[i] == _OTHER else re.escape(T.vocab[i]) for i in row)
        assert re.search(pattern, text), pattern
    assert T.model.d_v == len(T.vocab) == 29


@pytest.mark.parametrize("heldout", [0.1, 0.25])
def test_text_splits_are_corpus_windows_on_either_side_of_the_boundary(heldout):
    """Train and held-out windows, read back from the corpus string itself: each window is the text at
    its offset, the training windows end before the boundary and the held-out ones start after it (no
    character shared), and the two splits are the same model."""
    text = _corpus()
    L, n = 10, 400
    tr = text_task(n=n, L=L, d_x=4, seed=5, split="train", heldout=heldout)
    te = text_task(n=n, L=L, d_x=4, seed=5, split="heldout", heldout=heldout)
    boundary = round(len(text) * (1 - heldout))
    assert int(tr.starts.max()) + L + 1 <= boundary <= int(te.starts.min())
    alphabet = "".join(tr.vocab[:-1])
    code = {c: i for i, c in enumerate(alphabet)}
    for T in (tr, te):
        assert T.data.X.shape == (n, L, 4) and T.data.Y.shape == (n, L, 29) and len(T.vocab) == 29
        for k in range(0, n, 37):
            window = text[int(T.starts[k]):int(T.starts[k]) + L + 1]
            ids = [code.get(c, 28) for c in window]
            assert T.tokens[k].tolist() == ids[:L] and T.data.Y[k].argmax(-1).tolist() == ids[1:]
        torch.testing.assert_close(T.data.X, T.embedding[T.tokens])
    assert torch.equal(tr.embedding, te.embedding) and torch.equal(tr.model.W_out, te.model.W_out)
    # the two splits' offsets are drawn independently, and each covers its own part of the corpus
    assert int(tr.starts.max()) > boundary / 2 and int(te.starts.max()) > boundary + (len(text) - boundary) / 2
    with pytest.raises(ValueError, match="^split"):
        text_task(n=2, split="test")
    with pytest.raises(ValueError, match="^heldout"):
        text_task(n=2, split="train", heldout=1.0)


def test_make_task_selects_by_name_and_rejects_unknown_names():
    from mfattn.models.tasks import make_task

    a, b = make_task("markov", n=8, seed=3), markov_task(n=8, seed=3)
    assert a.name == "markov" and torch.equal(a.data.X, b.data.X) and torch.equal(a.data.Y, b.data.Y)
    with pytest.raises(ValueError, match="^task"):
        make_task("poetry")


@pytest.mark.parametrize("make", [teacher_task, markov_task, text_task])
def test_task_arguments_are_checked(make):
    with pytest.raises(ValueError, match="^n"):
        make(n=0)
    with pytest.raises(ValueError, match="^seed"):
        make(seed=-1)


def test_loglog_fit_recovers_exact_and_noisy_power_laws():
    x = np.logspace(0, 3, 12)
    fit = loglog_fit(x, 3.0 * x**-0.5)
    assert math.isclose(fit.slope, -0.5, abs_tol=1e-12) and math.isclose(math.exp(fit.intercept), 3.0, rel_tol=1e-12)
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(400):  # 95% intervals cover the true slope about 95% of the time
        y = 2.0 * x**1.5 * np.exp(0.1 * rng.standard_normal(x.size))
        covered += loglog_fit(x, y).contains(1.5)
    assert 0.92 <= covered / 400 <= 0.98
    with pytest.raises(ValueError, match="^y"):
        loglog_fit(x, -x)
    with pytest.raises(ValueError, match="^x"):
        loglog_fit([1, 2], [1, 2])
    # the printed form: the slope and both ends, parsed back, within half a unit of the last digit
    text = fit.text(digits=4)
    slope, lo, hi = (float(v) for v in text.replace("[", "").replace("]", "").replace(",", "").split())
    for shown, exact in ((slope, fit.slope), (lo, fit.slope_lo), (hi, fit.slope_hi)):
        assert abs(shown - exact) <= 0.5e-4
    with pytest.raises(ValueError, match="^digits"):
        fit.text(digits=-1)


def test_rms_fit_covers_the_rate_of_a_signed_quantity_with_a_narrower_interval():
    from mfattn.analysis.fitting import rms_fit

    N = np.repeat([16.0, 32.0, 64.0, 128.0, 256.0], 10)
    # exact: the same five values at every N, scaled by N^-1/2; the RMS at N is sqrt(mean(v^2) / N)
    v = np.tile([0.2, 1.0, 0.5, 2.0, 1.5, 0.1, 0.7, 1.2, 0.9, 0.4], 5)
    fit = rms_fit(N, v * N**-0.5)
    assert math.isclose(fit.slope, -0.5, abs_tol=1e-12) and fit.n == 50
    assert math.isclose(float(fit.predict(16.0)), math.sqrt(np.mean(v[:10] ** 2) / 16), rel_tol=1e-12)
    # |Z| N^-1/2 with Z a centred normal: 95% intervals cover -1/2 about 95% of the time, and
    # are about sqrt(0.5 / 1.23) = 0.64 times as wide as a fit of every draw's log
    rng = np.random.default_rng(0)
    covered, ratio = 0, []
    for _ in range(400):
        y = np.abs(rng.standard_normal(N.size)) * N**-0.5
        f, g = rms_fit(N, y), loglog_fit(N, y)
        covered += f.contains(-0.5)
        ratio.append((f.slope_hi - f.slope_lo) / (g.slope_hi - g.slope_lo))
    assert 0.92 <= covered / 400 <= 0.98
    assert 0.55 <= np.median(ratio) <= 0.8
    # a law that bends (not a power law over the range): the interval widens with the misfit
    z = np.abs(rng.standard_normal(N.size))
    straight, bent = rms_fit(N, z * N**-0.5), rms_fit(N, z * np.where(N < 100, N**-0.5, N / 512))
    assert bent.slope_hi - bent.slope_lo > 2 * (straight.slope_hi - straight.slope_lo)
    with pytest.raises(ValueError, match="^x"):
        rms_fit([1.0, 2.0, 4.0], [1.0, 1.0, 1.0])  # one draw per x
    with pytest.raises(ValueError, match="^y"):
        rms_fit(N, -np.ones(N.size))
    with pytest.raises(ValueError, match="^level"):
        rms_fit(N, np.ones(N.size), level=1.0)


def test_profiles_and_verdicts(capsys):
    P = {"ci": {"n": 4, "m": 2}, "paper": {"n": 400, "m": 20}}
    cfg = resolve_profile(P, "paper", n=None, m=7)
    assert (cfg.n, cfg.m, cfg.profile) == (400, 7, "paper")
    with pytest.raises(ValueError, match="^profile"):
        resolve_profile(P, "huge")
    with pytest.raises(ValueError, match="^k"):
        resolve_profile(P, "ci", k=1)
    k = dict(kind="claim")
    assert check_close("a", 1.05, 1.0, 0.1, **k).passed and not check_close("a", 1.2, 1.0, 0.1, **k).passed
    assert not check_close("a", float("nan"), 1.0, 0.1, **k).passed
    assert check_at_most("b", 0.5, 0.5, **k).passed and not check_at_most("b", 0.51, 0.5, 0.005, **k).passed
    fit = loglog_fit([1, 2, 4, 8], [1, 0.5, 0.25, 0.125])
    assert check_fit("c", fit, -1.0, **k).passed and not check_fit("c", fit, -0.5, **k).passed
    assert check_within("d", 0.7, 0.5, 1.0, interval=(0.6, 0.8), **k).passed
    assert not check_within("d", 0.7, 0.5, 1.0, interval=(0.4, 0.8), **k).passed
    assert not check_within("d", 1.0, 0.5, 1.0, hi_open=True, **k).passed and check_within("d", 1.0, 0.5, 1.0, **k).passed
    assert not check_within("d", 0.5, 0.5, 1.0, lo_open=True, **k).passed
    # a one-sided rate test fails only when the whole interval lies above the bound
    noisy = loglog_fit([1, 2, 4, 8, 16], [1, 0.8, 0.45, 0.3, 0.2])
    assert check_fit_at_most("e", noisy, -0.5, **k).passed
    assert not check_fit_at_most("e", noisy, noisy.slope_lo - 0.01, **k).passed
    v = check_fit_at_most("e", noisy, -0.5, **k)
    assert v.measured == noisy.slope  # the fitted slope is what is printed, the interval is the tolerance
    # every verdict has a kind, and the count separates evidence from checks
    with pytest.raises(ValueError, match="^kind"):
        check_close("a", 1.0, 1.0, 0.1)
    with pytest.raises(ValueError, match="^kind"):
        check_close("a", 1.0, 1.0, 0.1, kind="proof")
    with pytest.raises(ValueError, match="^ref"):
        check_close("a", 1.0, 1.0, 0.1, kind="claim", ref=("",))
    # a: a wrong prediction 3 tolerances away, rejected; b: a FAIL whose measurement lands on the wrong
    # theory (10 tolerances away, but it happened)
    vs = [check_close("a", 1.0, 1.0, 0.1, kind="claim", ref="Thm 4.1", counterfactual=(1.3, "30% more")),
          check_close("b", 2.0, 1.0, 0.1, kind="derived", counterfactual=(2.0, "twice")),
          check_close("c", 2.0, 1.0, 0.1, kind="hypothesis"), check_close("d", 1.0, 1.0, 0.1, kind="check")]
    assert vs[0].ref == ("Thm 4.1",) and vs[0].record()["status"] == "PASS"
    assert report(vs) is None and not all_passed(vs) and all_passed(vs[:1])
    out = capsys.readouterr().out
    assert "[PASS] (claim; Thm 4.1) a" in out and "[FAIL] (derived) b" in out
    assert ("Evidence (claims and derived results with a counterfactual that could have happened and is rejected): "
            "1 PASS, 1 FAIL. Hypotheses (PASS: it holds): 0 PASS, 1 FAIL. Checks (by construction, or no "
            "counterfactual that could have happened and is rejected): 1 PASS, 0 FAIL.") in out
    # a wrong prediction far beyond the margin that the measurement rejects is shown, and counted as a check
    far = check_close("f", 1.0, 1.0, 0.1, kind="claim", counterfactual=(3.0, "thrice"))
    assert not far.evidence and "could not have happened" in far.line()
    # without a counterfactual a claim is counted as a check, and says why
    lone = check_close("e", 1.0, 1.0, 0.1, kind="claim")
    assert "counted as a check: no counterfactual named" in lone.line() and lone.counted_as == "check"


def test_verdict_table_and_config_table():
    """The book's verdict table has one row per verdict with its status, kind, references and escaped
    claim; PASS and FAIL rows are styled apart; the summary follows. The config table lists every
    effective setting."""
    from html.parser import HTMLParser

    k = dict(kind="claim")
    vs = [check_close("x < y & z", 1.0, 1.0, 0.1, ref="Thm 4.1", counterfactual=(1.3, "30% more"), **k),
          check_close("b", 2.0, 1.0, 0.1, counterfactual=(2.0, "twice"), **k)]
    page = verdict_table_html(vs)

    class Rows(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.text = [], []

        def handle_starttag(self, tag, attrs):
            if tag == "tr" and dict(attrs).get("class"):
                self.rows.append(dict(attrs)["class"])

        def handle_data(self, data):
            self.text.append(data)

    parser = Rows()
    parser.feed(page)
    assert parser.rows == ["mfattn-pass mfattn-kind-claim", "mfattn-fail mfattn-kind-claim"]
    text = "".join(parser.text)
    # the claim escaped, the result it bears on, the tolerance written for a reader (+- as ±, 0.1)
    assert "x < y & z" in text and "bears on Thm 4.1" in text and "±0.1" in text
    assert "x < y & z" not in page  # escaped in the markup
    assert page.count("#e3f2e6") == 1 and page.count("#fde2e1") == 1  # PASS and FAIL look different
    assert "1 PASS, 1 FAIL" in text
    # a failed hypothesis is a finding about the model: styled apart from a failed claim
    hyp = verdict_table_html([check_close("h", 2.0, 1.0, 0.1, kind="hypothesis")])
    assert "#fff3cd" in hyp and "#fde2e1" not in hyp
    cfg = resolve_profile({"ci": dict(n=4, eps=1e-3)}, "ci", eps=2e-3)
    import io
    import contextlib

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        show_config(cfg)
    assert buf.getvalue().strip() == "effective parameters: profile='ci', n=4, eps=0.002"


def test_verdict_tables_write_a_sign_as_the_minus_sign():
    """A negative value, prediction or counterfactual, and a sign in a claim's text, read as the math's
    minus sign (U+2212) in the table; the printed form the nbval sanitiser compares keeps its hyphen."""
    import re
    from html.parser import HTMLParser

    page = verdict_table_html([check_close("slope in N of e is -1/2 (N^-1/2), 540-560 heads", -0.52, -0.5, 0.05,
                                           kind="claim", counterfactual=(-0.25, "rate -1/4"))])

    class Text(HTMLParser):
        def __init__(self):
            super().__init__()
            self.parts = []

        def handle_data(self, data):
            self.parts.append(data)

    parser = Text()
    parser.feed(page)
    text = "".join(parser.parts)
    assert not re.search(r"(?<![\w.\-\u2212])-\.?\d", text), text
    assert "\u22121/2 (N^\u22121/2), 540-560" in text and "\u22120.520" in text and "rate \u22121/4" in text
    assert 'data-v="-5.20e-01"' in page


def test_the_parameter_table_writes_values_for_a_reader(monkeypatch):
    """Chapter 08's table: its learning rate 0.00390625 reads 1/256, its eps 1e-8 a power of ten, the
    profile's name and the cache folder without Python's quotes and None; the plain text keeps the
    literals a reader can type after -p."""
    import pathlib
    import re

    from mfattn.companion import render
    from mfattn.companion.chapters import profiles

    shown = {}
    monkeypatch.setattr(render, "_display",
                        lambda text, html_text, metadata=None: shown.update(text=text, html=html_text))
    chapter = pathlib.Path(__file__).resolve().parents[1] / "notebooks" / "08-optimizers.md"
    render.show_config(resolve_profile(profiles(chapter), "ci"), chapter, values={"device": "cpu"})
    rows = {re.search(r"<code>(\w+)</code>", r).group(1): r for r in shown["html"].split("<tr><td")[1:]}
    assert ">1/256<" in rows["adam_lr"] and "0.00390625" not in rows["adam_lr"]
    assert "10<sup>−8</sup>" in rows["eps_small"]
    values = lambda row: row.rsplit("<small>", 1)[0]  # noqa: E731  the value cells, not the help text
    assert "<code>ci</code>" in rows["profile"] and not any("&#x27;" in values(r) for r in rows.values())
    assert ">none<" in rows["cache_dir"]
    assert "adam_lr = 0.00390625" in shown["text"] and "profile = 'ci'" in shown["text"]


def test_directional_derivatives_match_finite_differences():
    T = teacher_task(n=4, L=5, seed=0)
    g = torch.Generator().manual_seed(0)
    ds = feature_derivative_sup(T.model, T.data.X, [0.7], n_points=1, n_directions=1, max_order=3, generator=g)
    # redraw the same point and direction, then differentiate t -> psi(M p + t u) by finite differences
    g = torch.Generator().manual_seed(0)
    p = torch.randn(1, T.model.d_omega, generator=g, dtype=torch.float64)
    p = p / p.norm()
    u = torch.randn(1, T.model.d_omega, generator=g, dtype=torch.float64)
    u = u / u.norm()
    f = lambda t: T.model.features(T.data.X, 0.7 * p + t * u)[0]
    h = 1e-2
    fd = [
        f(0.0),
        (f(h) - f(-h)) / (2 * h),
        (f(h) - 2 * f(0.0) + f(-h)) / h**2,
        (f(2 * h) - 2 * f(h) + 2 * f(-h) - f(-2 * h)) / (2 * h**3),
    ]
    for m in range(4):
        expect = float(fd[m].norm(dim=-1).max())
        assert math.isclose(float(ds.sup[0, m]), expect, rel_tol=1e-3), (m, float(ds.sup[0, m]), expect)


def test_feature_derivative_sup_scaling_near_zero():
    """Near omega = 0, psi = quadratic + O(|omega|^4): sup norms scale like M^2, M, 1, M."""
    T = teacher_task(n=8, seed=1)
    ds = feature_derivative_sup(T.model, T.data.X, [1e-3, 1e-2], n_points=3, n_directions=2,
                                generator=torch.Generator().manual_seed(1))
    slopes = (ds.sup[1].log() - ds.sup[0].log()) / math.log(10)
    torch.testing.assert_close(slopes, torch.tensor([2.0, 1.0, 0.0, 1.0], dtype=torch.float64), atol=1e-3, rtol=0)
    with pytest.raises(ValueError, match="^radii"):
        feature_derivative_sup(T.model, T.data.X, [-1.0], generator=torch.Generator())
    with pytest.raises(ValueError, match="^generator"):
        feature_derivative_sup(T.model, T.data.X, [1.0], generator=None)


def test_entropy_handles_zero_probabilities():
    p = torch.tensor([[1.0, 0.0], [0.5, 0.5]], dtype=torch.float64)
    torch.testing.assert_close(entropy(p), torch.tensor([0.0, math.log(2)], dtype=torch.float64))


def test_asymptotic_order_sees_through_higher_order_terms():
    from mfattn.analysis.fitting import asymptotic_order

    h = 2.0 ** -np.arange(3, 9)
    rng = np.random.default_rng(1)
    errs = np.array([c * h + 3 * c * h**2 + c * h**3 for c in rng.uniform(0.5, 2, 5)])
    fit = asymptotic_order(h, errs)
    assert fit.contains(1.0) and abs(fit.order - 1.0) < 0.02
    assert not loglog_fit(h, errs[0]).contains(1.0)  # a plain log-log fit of one run is biased
    noisy = h**4 * (1 + 0.5 * h) * np.exp(1e-3 * rng.standard_normal((4, h.size)))
    assert asymptotic_order(h, noisy).contains(4.0)
    assert not asymptotic_order(h, noisy).contains(3.0)
    with pytest.raises(ValueError, match="^err"):
        asymptotic_order(h, errs[:, :-1])



def test_order_fit_text_is_the_signed_order_and_interval():
    from mfattn.analysis.fitting import OrderFit

    fit = OrderFit(order=0.99951, order_lo=-0.25049, order_hi=2.5, level=0.95, n=3)
    assert fit.text() == "+1.000  [-0.250, +2.500]"  # written out by hand: signed, two spaces, the interval
    assert fit.text(0) == "+1  [-0, +2]"
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="^digits"):
            fit.text(bad)

def test_fmt_prints_what_the_run_determines():
    from mfattn.companion.book import fmt

    assert fmt(1.2345e-3) == "1.23e-03" and fmt(-2.5, sig=2) == "-2.5e+00"
    # rounding-level values print alike whatever their digits, and keep their sign
    assert fmt(1.1e-16, floor=1e-8) == fmt(0.0, floor=1e-8) == fmt(4.3e-10, floor=1e-8) == "<1e-08"
    assert fmt(-3e-12, floor=1e-10) == ">-1e-10"
    assert fmt(2e-8, floor=1e-8) == "2.00e-08"  # at or above the floor: the digits
    # sig=0: the nearest power of ten
    assert fmt(1.09e-6, sig=0) == fmt(1.31e-6, sig=0) == "~1e-06"
    assert fmt(-4e-3, sig=0) == "-~1e-02" and fmt(0.0, sig=0) == "0"
    assert fmt(float("nan")) == "nan"
    with pytest.raises(ValueError, match="sig"):
        fmt(1.0, sig=-1)
    with pytest.raises(ValueError, match="floor"):
        fmt(1.0, floor=-1.0)
    v = check_at_most("x", -2.4e-6, 0.0, floor=1e-5, kind="check")
    assert v.passed and "measured >-1e-05 |" in v.line()


def test_loglog_slopes_recover_power_laws_and_name_bad_arguments():
    import numpy as np
    import pytest
    from mfattn.analysis.fitting import loglog_slopes

    x = np.array([0.5, 1.0, 3.0, 10.0])
    y = np.stack([2 * x**1.5, x**-0.5 + 0 * x], axis=1)  # oracle: exact power laws, exponents 1.5 and -0.5
    np.testing.assert_allclose(loglog_slopes(x, y), [[1.5, -0.5]] * 3, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="^x"):
        loglog_slopes([1.0], [1.0])
    with pytest.raises(ValueError, match="^y"):
        loglog_slopes(x, -y)
