"""Banding LSH for MinHash signatures (Mining of Massive Datasets, ch. 3.4).

A signature of ``b * r`` values is cut into ``b`` bands of ``r`` rows. Two documents become
candidates when all rows of at least one band agree. With Jaccard similarity s, a band agrees
with probability s^r, so

    P(candidate | s) = 1 - (1 - s^r)^b          (the S-curve)

For a target threshold t, :func:`optimal_params` picks (b, r) with b*r <= num_perm minimising

    w_fp * ∫_0^t P(s) ds  +  w_fn * ∫_t^1 (1 - P(s)) ds

(the weighted areas of false positives below t and false negatives above t).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np


def candidate_probability(s: float | np.ndarray, bands: int, rows: int) -> float | np.ndarray:
    """The S-curve ``1 - (1 - s^r)^b``."""
    return 1.0 - (1.0 - np.power(s, rows)) ** bands


@dataclass(frozen=True)
class LSHParams:
    bands: int
    rows: int
    threshold: float
    false_positive_area: float
    false_negative_area: float

    @property
    def inflection(self) -> float:
        """(1/b)^(1/r): the similarity near which the S-curve is steepest."""
        return (1.0 / self.bands) ** (1.0 / self.rows)


def _areas(threshold: float, bands: np.ndarray, rows: np.ndarray, points: int = 1001) -> tuple[np.ndarray, np.ndarray]:
    lo = np.linspace(0.0, threshold, points)
    hi = np.linspace(threshold, 1.0, points)
    p_lo = candidate_probability(lo[None, :], bands[:, None], rows[:, None])
    p_hi = candidate_probability(hi[None, :], bands[:, None], rows[:, None])
    fp = np.trapezoid(p_lo, lo, axis=1)
    fn = np.trapezoid(1.0 - p_hi, hi, axis=1)
    return fp, fn


#: (threshold, num_perm, fp_weight, fn_weight) -> (b, r) that :func:`_search` returns: the default
#: configuration's answer, so a process does not integrate ~600 S-curves (~0.1 s) at every start.
#: ``tests/engine/test_lsh.py`` runs the search for every entry and compares.
SEARCHED = {(0.3, 128, 0.5, 0.5): (37, 3)}


def optimal_params(threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5) -> LSHParams:
    """(b, r) minimising the weighted false-positive and false-negative areas for ``threshold``."""
    if not 0.0 < threshold < 1.0:
        raise ValueError("threshold must be within (0, 1)")
    known = SEARCHED.get((threshold, num_perm, fp_weight, fn_weight))
    if known is not None:
        return explicit_params(*known, threshold)
    return _search(threshold, num_perm, fp_weight, fn_weight)


def _search(threshold: float, num_perm: int, fp_weight: float, fn_weight: float) -> LSHParams:
    pairs = [(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)]
    bands = np.array([p[0] for p in pairs], dtype=np.float64)
    rows = np.array([p[1] for p in pairs], dtype=np.float64)
    fp, fn = _areas(threshold, bands, rows)
    cost = fp_weight * fp + fn_weight * fn
    i = int(np.argmin(cost))
    return LSHParams(int(bands[i]), int(rows[i]), threshold, float(fp[i]), float(fn[i]))


def explicit_params(bands: int, rows: int, threshold: float) -> LSHParams:
    fp, fn = _areas(threshold, np.array([bands], float), np.array([rows], float))
    return LSHParams(bands, rows, threshold, float(fp[0]), float(fn[0]))


class Banding:
    """Turns a signature into ``bands`` bucket keys.

    A key is the band number (u16 BE) followed by the band's r rows themselves, big-endian in the
    signature's own width (the index passes its 16-bit rows: 6 bytes for r = 3): two signatures
    share a bucket iff the band really agrees on those bits (no hash collisions to reason about).
    """

    def __init__(self, params: LSHParams) -> None:
        self.params = params
        self.bands, self.rows = params.bands, params.rows
        self._templates: dict[tuple[bytes, int], np.ndarray] = {}

    def _template(self, prefix: bytes, width: int) -> np.ndarray:
        """uint8[bands, len(prefix) + 2 + width * r] with the prefix and band numbers filled in."""
        t = self._templates.get((prefix, width))
        if t is None:
            rows = [prefix + struct.pack(">H", i) + bytes(width * self.rows) for i in range(self.bands)]
            t = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(self.bands, -1)
            self._templates[(prefix, width)] = t
        return t

    def keys(self, sig: np.ndarray, prefix: bytes = b"") -> list[bytes]:
        """One key per band: ``prefix || band (u16 BE) || rows (r values, BE, in sig's width)``.

        ``sig`` is any unsigned integer array; a big-endian one is used without a copy.
        """
        width = sig.dtype.itemsize
        out = self._template(prefix, width).copy()
        n = self.bands * self.rows
        be = sig[:n].astype(sig.dtype.newbyteorder(">"), copy=False)
        out[:, len(prefix) + 2:] = be.view(np.uint8).reshape(self.bands, width * self.rows)
        return out.view(f"V{out.shape[1]}").ravel().tolist()  # one bytes object per row, in one call
