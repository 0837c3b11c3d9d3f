"""CPU tests of the Krum references and dispatch."""

import pytest
import torch

from swarmshake.kernels import krum_distances, krum_scores, krum_select
from swarmshake.kernels.krum import reference_krum_distances, scores_from_distances


def test_distances_match_cdist():
    x = torch.randn(7, 300, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    d = krum_distances(x)
    assert d.dtype == torch.float64 and d.shape == (7, 7)
    assert torch.allclose(d, torch.cdist(x, x) ** 2, rtol=1e-10, atol=1e-9)
    assert torch.equal(d, d.T) and torch.all(d.diagonal() == 0)


def test_distances_no_cancellation_when_nearly_equal():
    g = torch.Generator().manual_seed(1)
    base = torch.randn(1, 10_000, generator=g) * 100
    x = base + torch.randn(5, 10_000, generator=g) * 1e-4  # honest peers, nearly equal
    x = x.to(torch.float32)
    d = reference_krum_distances(x)
    x64 = x.to(torch.float64)
    exact = ((x64[0] - x64[1]) ** 2).sum()
    assert abs(d[0, 1] - exact) / exact < 1e-12
    gram = (x64 @ x64.T).to(torch.float32)  # what the Gram form gives in fp32
    n = (x * x).sum(1)
    gram_d = n[0] + n[1] - 2 * gram[0, 1]
    assert abs(gram_d - exact) / exact > 1e-3  # the Gram form is useless here


def test_non_finite_peer_is_infinitely_far():
    x = torch.randn(5, 20, generator=torch.Generator().manual_seed(2))
    x[3, 7] = float("nan")
    x[4, 0] = float("inf")
    d = krum_distances(x)
    assert torch.isinf(d[3, [0, 1, 2, 4]]).all() and torch.isinf(d[:, 4][[0, 1, 2]]).all()
    assert d[3, 3] == 0 and d[4, 4] == 0 and torch.isfinite(d[:3, :3]).all()
    assert set(krum_select(x, 1, 3).tolist()) == {0, 1, 2}


def test_scores_brute_force():
    x = torch.randn(9, 40, generator=torch.Generator().manual_seed(3))
    f = 2
    d = krum_distances(x)
    s = krum_scores(x, f)
    for i in range(9):
        others = sorted(d[i, j].item() for j in range(9) if j != i)
        assert abs(s[i].item() - sum(others[: 9 - f - 2])) < 1e-9


def test_select_picks_honest_cluster_and_breaks_ties_by_index():
    g = torch.Generator().manual_seed(4)
    honest = torch.randn(1, 64, generator=g) + 0.01 * torch.randn(7, 64, generator=g)
    byz = 50 * torch.randn(2, 64, generator=g)
    x = torch.cat([byz, honest])
    sel = krum_select(x, 2, 5)
    assert set(sel.tolist()) <= set(range(2, 9)) and len(sel) == 5
    same = torch.zeros(5, 3)
    assert krum_select(same, 1, 3).tolist() == [0, 1, 2]


def test_validation():
    with pytest.raises(ValueError, match="2f \\+ 3"):
        krum_scores(torch.zeros(4, 3), 1)
    with pytest.raises(ValueError):
        krum_select(torch.zeros(5, 3), 1, 5)  # m > k - f
    with pytest.raises(ValueError):
        krum_select(torch.zeros(5, 3), 1, 0)
    with pytest.raises(ValueError):
        scores_from_distances(torch.zeros(3, 4), 0)
    with pytest.raises(ValueError):
        krum_distances(torch.zeros(5))


def test_bf16_input_and_shapes():
    x = torch.randn(5, 4, 6, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    d = krum_distances(x)
    x64 = x.reshape(5, -1).to(torch.float64)
    assert torch.allclose(d, torch.cdist(x64, x64) ** 2, rtol=1e-9, atol=1e-9)
