"""stream_dedup.lsh: optimal (b, r) by brute force, and the S-curve against real MinHash signatures."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from stream_dedup.lsh import Banding, candidate_probability, explicit_params, optimal_params
from stream_dedup.minhash import MinHasher


def _cost(threshold: float, b: int, r: int, fp_w: float, fn_w: float, steps: int = 4000) -> float:
    """Weighted areas by the midpoint rule (independent of the module's trapezoid integration)."""
    def p(s: float) -> float:
        return 1.0 - (1.0 - s ** r) ** b
    h_lo = threshold / steps
    fp = sum(p((i + 0.5) * h_lo) for i in range(steps)) * h_lo
    h_hi = (1.0 - threshold) / steps
    fn = sum(1.0 - p(threshold + (i + 0.5) * h_hi) for i in range(steps)) * h_hi
    return fp_w * fp + fn_w * fn


@pytest.mark.parametrize(("threshold", "num_perm", "fp_w", "fn_w"), [
    (0.4, 64, 0.5, 0.5),
    (0.7, 64, 0.5, 0.5),
    (0.5, 32, 0.2, 0.8),
])
def test_optimal_params_minimise_weighted_area(threshold: float, num_perm: int, fp_w: float, fn_w: float) -> None:
    params = optimal_params(threshold, num_perm, fp_w, fn_w)
    assert params.bands * params.rows <= num_perm
    assert params.threshold == threshold
    costs = {(b, r): _cost(threshold, b, r, fp_w, fn_w, steps=400)
             for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)}
    best = min(costs.values())
    chosen = _cost(threshold, params.bands, params.rows, fp_w, fn_w, steps=400)
    assert chosen <= best + 1e-4, (params, min(costs, key=costs.get))
    # the reported areas are the integrals of the chosen S-curve
    assert fp_w * params.false_positive_area + fn_w * params.false_negative_area == pytest.approx(chosen, abs=1e-4)


def test_optimal_params_default_config() -> None:
    params = optimal_params(0.4, 128)
    assert params.bands * params.rows <= 128
    # its steepest point sits close to the threshold
    assert abs(params.inflection - 0.4) < 0.1
    assert params.inflection == pytest.approx((1 / params.bands) ** (1 / params.rows))


def test_higher_threshold_means_more_rows() -> None:
    lo, hi = optimal_params(0.3, 128), optimal_params(0.8, 128)
    assert hi.rows > lo.rows
    assert hi.inflection > lo.inflection


def test_weights_shift_the_tradeoff() -> None:
    fewer_misses = optimal_params(0.5, 128, fp_weight=0.1, fn_weight=0.9)
    fewer_false = optimal_params(0.5, 128, fp_weight=0.9, fn_weight=0.1)
    assert fewer_misses.false_negative_area < fewer_false.false_negative_area
    assert fewer_misses.false_positive_area > fewer_false.false_positive_area


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5])
def test_optimal_params_rejects_degenerate_threshold(bad: float) -> None:
    with pytest.raises(ValueError):
        optimal_params(bad, 128)


def test_candidate_probability() -> None:
    assert candidate_probability(0.0, 20, 5) == 0.0
    assert candidate_probability(1.0, 20, 5) == 1.0
    assert candidate_probability(0.5, 20, 5) == pytest.approx(1 - (1 - 0.5 ** 5) ** 20)
    s = np.linspace(0, 1, 101)
    p = candidate_probability(s, 32, 4)
    assert np.all(np.diff(p) >= 0)


def test_explicit_params() -> None:
    params = explicit_params(20, 5, 0.5)
    assert (params.bands, params.rows, params.threshold) == (20, 5, 0.5)
    assert params.false_positive_area == pytest.approx(_cost(0.5, 20, 5, 1.0, 0.0), abs=1e-4)
    assert params.false_negative_area == pytest.approx(_cost(0.5, 20, 5, 0.0, 1.0), abs=1e-4)


def test_banding_keys_layout() -> None:
    banding = Banding(explicit_params(3, 2, 0.5))
    sig = np.array([1, 2, 3, 4, 5, 6, 7, 8], dtype=np.uint32)  # the last two rows are beyond b*r
    keys = banding.keys(sig)
    assert keys == [struct.pack(">HII", 0, 1, 2), struct.pack(">HII", 1, 3, 4), struct.pack(">HII", 2, 5, 6)]
    other = sig.copy()
    other[7] = 99
    assert banding.keys(other) == keys
    other[3] = 99
    assert banding.keys(other)[1] != keys[1] and banding.keys(other)[0] == keys[0]
    # rows keep the signature's width: 16-bit rows (as the index stores them) make 2-byte rows
    assert banding.keys(sig.astype(">u2"), b"B") == [b"B" + struct.pack(">HHH", 0, 1, 2),
                                                     b"B" + struct.pack(">HHH", 1, 3, 4),
                                                     b"B" + struct.pack(">HHH", 2, 5, 6)]
    assert banding.keys(sig.astype("<u2")) == banding.keys(sig.astype(">u2"))


# ------------------------------------------------------------------------------- the S-curve claim
def _shares_a_bucket(banding: Banding, a: np.ndarray, b: np.ndarray) -> bool:
    return bool(set(banding.keys(a)) & set(banding.keys(b)))


SIZES = {0.2: (20, 40), 0.4: (40, 30), 0.6: (60, 20), 0.8: (80, 10)}  # s: (|A∩B|, |A\B| = |B\A|)


@pytest.mark.parametrize(("bands", "rows"), [(32, 4), (16, 8), (64, 2)])
def test_s_curve_holds_empirically(bands: int, rows: int) -> None:
    minhasher = MinHasher(128, 1)
    banding = Banding(explicit_params(bands, rows, 0.5))
    rng = np.random.default_rng(bands * 1000 + rows)
    trials = 1000
    for s, (common, only) in SIZES.items():
        assert common / (common + 2 * only) == pytest.approx(s)
        hits = 0
        for _ in range(trials):
            values = rng.choice(2**32, size=common + 2 * only, replace=False).astype(np.uint64)
            a = values[: common + only]
            b = np.concatenate([values[:common], values[common + only:]])
            hits += _shares_a_bucket(banding, minhasher.signature32(a), minhasher.signature32(b))
        p = float(candidate_probability(s, bands, rows))
        sigma = math.sqrt(p * (1 - p) / trials)
        observed = hits / trials
        print(f"b={bands} r={rows} s={s}: observed {observed:.3f} expected {p:.3f} sigma {sigma:.4f}")
        assert abs(observed - p) <= 4 * sigma + 1.5 / trials, (s, observed, p, sigma)


def test_the_stored_search_results_are_what_the_search_finds() -> None:
    from stream_dedup import lsh
    for (threshold, num_perm, fp_w, fn_w), (bands, rows) in lsh.SEARCHED.items():
        searched = lsh._search(threshold, num_perm, fp_w, fn_w)
        assert (searched.bands, searched.rows) == (bands, rows)
        assert lsh.optimal_params(threshold, num_perm, fp_w, fn_w) == searched  # areas included
