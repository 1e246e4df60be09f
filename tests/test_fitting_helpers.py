"""Small helpers of the fitting module, each against an independent oracle."""

import math
import statistics

import numpy as np
import pytest
import torch

from mfattn.analysis.fitting import max_relative_deviation, z_scores


def test_z_scores_match_a_plain_loop_with_the_sample_standard_deviation():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(5, 9))
    expected = np.linspace(-0.5, 0.5, 5)
    oracle = [(statistics.fmean(row) - e) / (statistics.stdev(row) / math.sqrt(len(row)))  # ddof = 1
              for row, e in zip(s.tolist(), expected)]
    assert z_scores(s, expected) == pytest.approx(oracle, rel=1e-12)
    oracle0 = [(statistics.fmean(row) - 0.2) / (statistics.pstdev(row) / math.sqrt(len(row))) for row in s.tolist()]
    assert z_scores(s, 0.2, ddof=0) == pytest.approx(oracle0, rel=1e-12)
    with pytest.raises(ValueError, match="^samples"):
        z_scores(s[0], 0.0)
    with pytest.raises(ValueError, match="^samples"):
        z_scores([[1.0, 1.0]], 0.0)  # no spread
    with pytest.raises(ValueError, match="^expected"):
        z_scores(s, [0.0, 1.0])
    with pytest.raises(ValueError, match="^ddof"):
        z_scores(s, 0.0, ddof=-1)


def test_max_relative_deviation_of_arrays_and_tensors_against_a_plain_loop():
    rng = np.random.default_rng(2)
    b = rng.normal(size=(3, 4))
    a = b + 1e-3 * rng.normal(size=(3, 4))
    fa, fb = a.ravel().tolist(), b.ravel().tolist()
    oracle = max(abs(x - y) for x, y in zip(fa, fb)) / max(abs(y) for y in fb)
    assert max_relative_deviation(a, b) == pytest.approx(oracle, rel=1e-15)
    assert max_relative_deviation(torch.from_numpy(a), torch.from_numpy(b)) == pytest.approx(oracle, rel=1e-15)
    assert max_relative_deviation(b, b) == 0.0  # identity
    with pytest.raises(ValueError, match="^b"):
        max_relative_deviation(a, b[:2])
    with pytest.raises(ValueError, match="^b"):
        max_relative_deviation(a, np.zeros_like(b))

