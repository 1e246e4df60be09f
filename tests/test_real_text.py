"""Chapter 09's engine pieces against oracles they share no code with.

* :class:`PractitionerAttention`: its logits equal a reimplementation of multi-head attention from its
  weights through ``torch.nn.functional.scaled_dot_product_attention`` (causal), a later token never
  changes an earlier logit, and the parameter count is :func:`parameter_count`'s closed form;
* :func:`train_practitioner`: its loss is the mean of ``-log softmax`` at the targets, and Adam's first
  step moves every parameter by ``lr * g / (|g| + eps)`` (bias correction cancels at step one);
* :func:`parametrised` and :func:`coordinate_check`: the standard model's logits are
  ``N^{-1/2} sum_i psi(omega_i)`` from the per-head features, the gradients it reports are autograd's
  of each parametrisation's risk (times ``N`` for the mean-field one), and at ``N = 1`` the two agree;
* :meth:`HeadModel.mean_attention`: rows on the simplex, causal, the weighted average of the per-head
  attention matrices through the smallest head chunks;
* :func:`reference_gap_fit`: recovers a known power from noisy gaps measured against a finite
  reference, where a plain log-log fit is biased;
* :func:`text_corpus`: the two parts cut the corpus at the boundary and tile it, their vocabulary is
  the alphabet and one catch-all token, and every window of :func:`text_task` is a slice of its part.
"""

import math

import numpy as np
import pytest
import torch

from mfattn.models.baseline import PractitionerAttention, parameter_count, train_practitioner
from mfattn.flows.dynamics import initial_measure
from mfattn.analysis.fitting import loglog_fit, reference_gap_fit
from mfattn.models.model import HeadModel
from mfattn.analysis.scaling import coordinate_check, parametrised
from mfattn.models.tasks import _corpus, text_corpus, text_task

F64 = torch.float64


def g(seed):
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- the practitioner's layer
def sdpa_logits(net, tokens):
    """Multi-head causal attention written out from the module's weights."""
    E, H = net.embed.weight.shape[1], net.n_heads
    x = net.embed.weight[tokens]  # (B, L, E)
    Wq, Wk, Wv = net.attn.in_proj_weight.chunk(3)
    B, L, _ = x.shape

    def heads(W):
        return (x @ W.T).reshape(B, L, H, E // H).transpose(1, 2)

    y = torch.nn.functional.scaled_dot_product_attention(heads(Wq), heads(Wk), heads(Wv), is_causal=True)
    return (y.transpose(1, 2).reshape(B, L, E) @ net.attn.out_proj.weight.T) @ net.readout.weight.T


@pytest.mark.parametrize("n_heads,head_dim", [(1, 3), (3, 2), (8, 2)])
def test_practitioner_logits_are_causal_multi_head_attention(n_heads, head_dim):
    net = PractitionerAttention(7, n_heads, head_dim, generator=g(1))
    x = torch.randint(7, (4, 9), generator=g(2))
    z = net(x)
    torch.testing.assert_close(z, sdpa_logits(net, x), rtol=1e-10, atol=1e-12)
    y = x.clone()
    y[:, 5:] = (y[:, 5:] + 1) % 7  # change the later tokens only
    torch.testing.assert_close(net(y)[:, :5], z[:, :5], rtol=0, atol=1e-13)
    assert not torch.allclose(net(y)[:, 5:], z[:, 5:])
    assert sum(p.numel() for p in net.parameters()) == parameter_count("practitioner", n_heads=n_heads,
                                                                         head_dim=head_dim, vocab_size=7)


def test_parameter_counts_are_the_trained_numbers_of_each_model():
    for N in (1, 5, 16):
        model = HeadModel(torch.randn(8, 29, generator=g(N), dtype=F64), d_k=2)
        assert parameter_count("mean-field", n_heads=N, head_dim=2, d_x=8) == N * model.d_omega
        net = PractitionerAttention(29, N, 2, generator=g(0))
        assert parameter_count("practitioner", n_heads=N, head_dim=2) == sum(p.numel() for p in net.parameters())
    with pytest.raises(ValueError, match="^kind"):
        parameter_count("wide", n_heads=2, head_dim=2)
    with pytest.raises(ValueError, match="^n_heads"):
        parameter_count("mean-field", n_heads=0, head_dim=2)


def test_practitioner_draws_come_from_the_generator():
    a, b, c = (PractitionerAttention(5, 2, 2, generator=g(s)) for s in (3, 3, 4))
    for p, q, r in zip(a.parameters(), b.parameters(), c.parameters()):
        assert torch.equal(p, q) and not torch.equal(p, r)


def test_training_loss_is_the_cross_entropy_and_adam_first_step_is_a_sign_step():
    net = PractitionerAttention(6, 2, 2, generator=g(5))
    x = torch.randint(6, (5, 7), generator=g(6))
    y = torch.randint(6, (5, 7), generator=g(7))
    logp = torch.log_softmax(net(x).detach(), -1)
    ce = float(-logp.gather(-1, y.unsqueeze(-1)).mean())
    before = [p.detach().clone() for p in net.parameters()]
    net.zero_grad()
    torch.nn.functional.cross_entropy(net(x).reshape(-1, 6), y.reshape(-1)).backward()
    grads = [p.grad.clone() for p in net.parameters()]
    lr = 0.01
    out = train_practitioner(net, x, y, lr=lr, steps=1, eval_sets={"other": (y, x)})
    assert out["steps"] == [0, 1] and set(out) == {"steps", "train", "other"}
    assert out["train"][0] == pytest.approx(ce, rel=1e-12)
    for p0, p1, gr in zip(before, net.parameters(), grads):
        torch.testing.assert_close(p1.detach() - p0, -lr * gr / (gr.abs() + 1e-8), rtol=1e-9, atol=1e-15)


def test_practitioner_inputs_are_checked():
    net = PractitionerAttention(4, 2, 2, generator=g(0))
    x = torch.zeros(2, 3, dtype=torch.int64)
    with pytest.raises(ValueError, match="^tokens"):
        net(x.float())
    with pytest.raises(ValueError, match="^tokens"):
        net(x + 4)
    with pytest.raises(ValueError, match="^generator"):
        PractitionerAttention(4, 2, 2, generator=0)
    with pytest.raises(ValueError, match="^n_heads"):
        PractitionerAttention(4, 0, 2, generator=g(0))
    with pytest.raises(ValueError, match="^lr"):
        train_practitioner(net, x, x, lr=0.0, steps=1)
    with pytest.raises(ValueError, match="^targets"):
        train_practitioner(net, x, x[:, :2], lr=0.1, steps=1)
    with pytest.raises(ValueError, match="^net"):
        train_practitioner(torch.nn.Linear(2, 2), x, x, lr=0.1, steps=1)


# ----------------------------------------------------------------------------- the coordinate check
@pytest.fixture(scope="module")
def small_text():
    T = text_task(n=6, L=5, d_x=4, d_k=2, seed=3)
    return T.model, T.data


def test_standard_parametrisation_is_the_sqrt_n_head_sum(small_text):
    model, data = small_text
    N = 9
    heads = initial_measure(model, N, scale=1.0, generator=g(8))
    sp, h = parametrised(model, N, "standard", 0.3)
    assert h == pytest.approx(0.3 / N)
    torch.testing.assert_close(sp.logits(data.X, heads), model.features(data.X, heads).sum(0) / math.sqrt(N))
    mf, h_mf = parametrised(model, N, "mean-field", 0.3)
    assert mf is model and h_mf == 0.3
    with pytest.raises(ValueError, match="^parametrisation"):
        parametrised(model, N, "mup", 0.3)
    with pytest.raises(ValueError, match="^step"):
        parametrised(model, N, "standard", 0.0)


@pytest.mark.parametrize("param", ["mean-field", "standard"])
def test_coordinate_check_reports_autograd_gradients_and_moves(small_text, param):
    model, data = small_text
    N, h = 7, 0.2
    heads = initial_measure(model, N, scale=1.0, generator=g(9))
    c = coordinate_check(model, data, heads, step=h, steps=2, parametrisation=param)
    # the risk of each parametrisation, written out from the per-head features
    w = heads.clone().requires_grad_(True)
    Z = HeadModel(model.W_out, model.d_k, fused=False).features(data.X, w).sum(0)
    z = Z / N if param == "mean-field" else Z / math.sqrt(N)
    risk = -(torch.log_softmax(z, -1) * data.Y).sum(-1).mean()
    (grad,) = torch.autograd.grad(risk, w)
    per_head = grad * N if param == "mean-field" else grad  # what moves a head, per unit of the base step
    assert c["gradient"][0] == pytest.approx(float(per_head.norm(dim=1).pow(2).mean().sqrt()), rel=1e-9)
    assert c["logits"][0] == pytest.approx(float(z.detach().pow(2).mean().sqrt()), rel=1e-12)
    moved = heads - h * per_head
    assert c["displacement"][1] == pytest.approx(float((moved - heads).norm(dim=1).pow(2).mean().sqrt()), rel=1e-9)
    assert c["displacement"][0] == 0 and c["logit_change"][0] == 0
    assert c["logits"].shape == (3,) and c["gradient"].shape == (2,)


def test_the_parametrisations_agree_for_one_head(small_text):
    model, data = small_text
    heads = initial_measure(model, 1, scale=1.0, generator=g(10))
    a = coordinate_check(model, data, heads, step=0.3, steps=3, parametrisation="mean-field")
    b = coordinate_check(model, data, heads, step=0.3, steps=3, parametrisation="standard")
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-15)
    heads = initial_measure(model, 4, scale=1.0, generator=g(10))
    a = coordinate_check(model, data, heads, step=0.3, steps=1, parametrisation="mean-field")
    b = coordinate_check(model, data, heads, step=0.3, steps=1, parametrisation="standard")
    assert not np.allclose(a["gradient"], b["gradient"])


# ----------------------------------------------------------------------------- the attention of a measure
def test_mean_attention_is_the_weighted_average_of_the_heads_patterns(small_text):
    model, data = small_text
    heads = initial_measure(model, 11, scale=1.5, generator=g(11))
    w = torch.rand(11, generator=g(12), dtype=F64)
    w = w / w.sum()
    chunked = HeadModel(model.W_out, model.d_k, chunk_size=2, sample_chunk=1, fused=False)
    A = chunked.mean_attention(data.X, heads, w)
    Wq, Wk = model.unpack(heads)[:2]
    scores = torch.einsum("bqd,idk,bpe,iek->ibqp", data.X, Wq, data.X, Wk) / math.sqrt(model.d_k)
    L = data.X.shape[1]
    scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(A, torch.einsum("i,ibqp->bqp", w, torch.softmax(scores, -1)))
    torch.testing.assert_close(A.sum(-1), torch.ones(A.shape[:2], dtype=F64))
    assert float(A.triu(1).abs().max()) == 0


# ----------------------------------------------------------------------------- the reference-gap fit
def test_reference_gap_fit_recovers_the_power_a_plain_fit_misses():
    N = np.array([16, 32, 64, 128, 256, 512, 1024], dtype=float)
    n_ref, p, a = 4096, -0.7, 3.0
    rng = np.random.default_rng(0)
    mean = a * (N**p - n_ref**p)
    gaps = mean[:, None] * (1 + 0.03 * rng.standard_normal((N.size, 8)))
    fit = reference_gap_fit(N, gaps, n_ref)
    assert fit.contains(p) and abs(fit.slope - p) < 0.02 and fit.n == N.size
    assert math.exp(fit.intercept) == pytest.approx(a, rel=0.1)
    plain = loglog_fit(N, gaps.mean(1))
    assert not plain.contains(p) and plain.slope < p  # the reference's own gap steepens a plain fit


def test_reference_gap_fit_checks_its_inputs():
    N = np.array([16, 64, 256])
    gaps = np.ones((3, 4))
    with pytest.raises(ValueError, match="^gaps"):
        reference_gap_fit(N, gaps[:, :1], 1024)
    with pytest.raises(ValueError, match="^n_ref"):
        reference_gap_fit(N, gaps, 256)
    with pytest.raises(ValueError, match="^N"):
        reference_gap_fit(np.array([16, 16, 64]), gaps, 1024)
    with pytest.raises(ValueError, match="^gaps"):
        reference_gap_fit(N, gaps * np.nan, 1024)


# ----------------------------------------------------------------------------- the shipped corpus
def test_text_corpus_parts_tile_the_corpus_at_the_boundary():
    text = _corpus()
    ids, vocab = text_corpus()
    train, v1 = text_corpus("train")
    held, v2 = text_corpus("heldout")
    assert vocab == v1 == v2 and len(vocab) == 29 and vocab[:26] == tuple("abcdefghijklmnopqrstuvwxyz")
    assert vocab[26:28] == (" ", ".") and vocab[28] not in "abcdefghijklmnopqrstuvwxyz ."
    assert ids.numel() == len(text) and train.numel() == round(len(text) * 0.9)
    assert torch.equal(torch.cat([train, held]), ids)
    code = {c: i for i, c in enumerate(vocab[:-1])}
    for k in range(0, len(text), 9973):  # every id is its character's, or the catch-all token
        assert int(ids[k]) == code.get(text[k], 28)
    counts = torch.bincount(train, minlength=29)
    assert (counts > 0).all() and int(counts.argmax()) == vocab.index(" ")  # English: the space is most common
    # every window of either split is a slice of its own part: no character crosses the boundary
    for split, part, offset in (("train", train, 0), ("heldout", held, train.numel())):
        T = text_task(n=64, L=16, d_x=4, seed=1, split=split)
        for k in range(64):
            s = int(T.starts[k]) - offset
            assert 0 <= s and s + 17 <= part.numel()
            assert torch.equal(T.tokens[k], part[s:s + 16])
    with pytest.raises(ValueError, match="^split"):
        text_corpus("test")
    with pytest.raises(ValueError, match="^heldout"):
        text_corpus("train", heldout=0.0)


def test_tail_share_is_the_top_heads_share_of_the_feature_energy(small_text):
    from mfattn.analysis.scaling import tail_share

    model, data = small_text
    base = initial_measure(model, 1, scale=1.0, generator=g(13))
    W_Q, W_K, W_V, W_O = model.unpack(base)
    a = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64)  # psi is linear in W_O: energies 1 : 4 : 9 : 16
    heads = model.pack(W_Q.repeat(4, 1, 1), W_K.repeat(4, 1, 1), W_V.repeat(4, 1, 1), a[:, None, None] * W_O)
    assert tail_share(model, data.X, heads, fraction=0.25) == pytest.approx(16 / 30, rel=1e-12)
    assert tail_share(model, data.X, heads, fraction=0.5) == pytest.approx(25 / 30, rel=1e-12)
    assert tail_share(model, data.X, heads, fraction=1.0) == pytest.approx(1.0, rel=1e-12)
    with pytest.raises(ValueError, match="^fraction"):
        tail_share(model, data.X, heads, fraction=0.0)


def test_the_corpus_is_the_shipped_one_and_a_damaged_copy_is_named(tmp_path, monkeypatch):
    import gzip
    import hashlib
    import json

    from mfattn.models import tasks

    # the hash was taken from CPython 3.11.7's own pydoc_data.topics, the text the book was executed on
    text = tasks._corpus()
    pages = json.loads(gzip.decompress(tasks.CORPUS_FILE.read_bytes()))
    assert len(text) == 433254 and hashlib.sha256(text.encode()).hexdigest() == tasks.CORPUS_SHA256
    pages[sorted(pages)[0]] += " one more sentence."
    bad = tmp_path / "pydoc_topics.json.gz"
    bad.write_bytes(gzip.compress(json.dumps(pages).encode()))
    monkeypatch.setattr(tasks, "CORPUS_FILE", bad)
    with pytest.raises(RuntimeError, match="pydoc_topics.json.gz is damaged"):
        tasks._corpus()
