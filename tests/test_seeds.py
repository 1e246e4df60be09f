"""Named streams: distinct (seed, name) pairs give distinct seeds, the same pair the same draws, and the
derivation is the documented one (numpy's SeedSequence with the name's bytes as spawn key)."""

import numpy as np
import pytest
import torch

from mfattn.flows.seeds import stream, stream_seed, streams


def test_streams_do_not_collide_where_offsets_do():
    names = ["init", "batches", "starts", "reference", "tags"] + [("replicate", k) for k in range(200)]
    seen = {}
    for seed in range(50):
        for name in names:
            s = stream_seed(seed, name)
            assert s not in seen, (seed, name, seen.get(s))
            seen[s] = (seed, name)


def test_names_are_encoded_injectively():
    assert stream_seed(0, ("a", 1)) != stream_seed(0, ("a", 1, 0))
    assert stream_seed(0, "ab") != stream_seed(0, ("a", "b"))
    assert stream_seed(0, ("x", 12)) != stream_seed(0, ("x", 1, 2))


def test_same_pair_same_draws_and_the_documented_derivation():
    a = torch.randn(5, generator=stream(3, "init"))
    b = streams(3, "init", "other")["init"]
    assert torch.equal(a, torch.randn(5, generator=b))
    expect = np.random.SeedSequence(3, spawn_key=tuple(b"init") + (256,)).generate_state(1, np.uint64)[0]
    assert stream_seed(3, "init") == int(expect)


@pytest.mark.parametrize("seed, name, match", [(-1, "a", "seed"), (1.5, "a", "seed"), (True, "a", "seed"),
                                               (0, "", "name"), (0, ("a", -1), "name"), (0, 3, "name")])
def test_bad_seed_or_name_is_named(seed, name, match):
    with pytest.raises(ValueError, match=match):
        stream_seed(seed, name)
