"""SimHash (Charikar 2002) fingerprints and Manku et al. (2007) permuted tables.

**Fingerprint.** Each feature f (a shingle hash, 64 bits) with weight w_f votes on every bit
position i: ``V_i += w_f`` if bit i of f is 1, else ``V_i -= w_f``. Bit i of the fingerprint is
1 iff ``V_i > 0``. Features are counted with multiplicity, so w_f is the term frequency. For two
documents with feature-vector angle θ, Pr[bit i agrees] = 1 - θ/π: similar documents get
fingerprints at small Hamming distance.

**Permuted tables.** To find every stored fingerprint within Hamming distance k of a query,
split the 64 bits into B > k blocks. If two fingerprints differ in at most k bits, at most k
blocks differ, so at least B - k blocks are identical (pigeonhole). For each of the C(B, B-k)
= C(B, k) combinations of B - k blocks we keep one table whose key is the fingerprint permuted so
that those blocks come first (combinations, not permutations: block order inside the key does not
matter). A probe in table t looks up every stored fingerprint whose first ``key_bits(t)`` bits
equal the query's, i.e. a range scan over a sorted big-endian key (a RocksDB prefix seek), then
checks the full Hamming distance. Every fingerprint within k bits is found in at least one table;
Hamming distance is invariant under the common permutation, so it is checked on permuted values.
"""

from __future__ import annotations

from itertools import combinations
from math import comb

import numpy as np

from .jit import trusted
from .kernels import permute_blocks, permute_rows, simhash64

_SHIFTS = np.arange(64, dtype=np.uint64)


def simhash_numpy(features: np.ndarray) -> int:
    """Reference 64-bit SimHash of uint64 features (each occurrence has weight 1)."""
    if features.shape[0] == 0:
        return 0
    bits = ((features[:, None] >> _SHIFTS) & np.uint64(1)).astype(np.int64)
    votes = 2 * bits.sum(axis=0) - features.shape[0]
    return int(sum(1 << i for i in range(64) if votes[i] > 0))


def simhash(features: np.ndarray) -> int:
    """64-bit SimHash of uint64 features (term-frequency weights: repeat a feature to weight it)."""
    return int(simhash64(np.ascontiguousarray(features, dtype=np.uint64)))


def hamming(a: int, b: int) -> int:
    """Number of differing bits (popcount of XOR)."""
    return (a ^ b).bit_count()


class PermutedTables:
    """The block layout and permutations for finding all fingerprints within ``k`` bits.

    Blocks are numbered from the most significant end; widths differ by at most one bit.
    """

    def __init__(self, k: int = 3, blocks: int = 5, bits: int = 64) -> None:
        if not 0 <= k < blocks <= bits:
            raise ValueError("need 0 <= k < blocks <= bits")
        self.k, self.blocks, self.bits = k, blocks, bits
        base, extra = divmod(bits, blocks)
        self.widths = [base + (1 if i < extra else 0) for i in range(blocks)]
        # shift of block i's least significant bit in the fingerprint
        self.shifts = [bits - sum(self.widths[: i + 1]) for i in range(blocks)]
        self.tables: list[tuple[int, ...]] = list(combinations(range(blocks), blocks - k))
        assert len(self.tables) == comb(blocks, k)
        self._plans: list[list[tuple[int, int, int]]] = []
        self.key_bits: list[int] = []
        for key_blocks in self.tables:
            order = list(key_blocks) + [i for i in range(blocks) if i not in key_blocks]
            plan, dst = [], bits
            for i in order:
                dst -= self.widths[i]
                plan.append((self.shifts[i], (1 << self.widths[i]) - 1, dst))
            self._plans.append(plan)
            self.key_bits.append(sum(self.widths[i] for i in key_blocks))
        full = (1 << bits) - 1
        self.key_masks = [full ^ ((1 << (bits - m)) - 1) for m in self.key_bits]
        # the plans as arrays [table, block] for the compiled permute_all
        self._src, self._mask, self._dst = (np.array([[step[i] for step in plan] for plan in self._plans],
                                                     dtype=np.uint64) for i in range(3))

    def __len__(self) -> int:
        return len(self.tables)

    def permute(self, fp: int, table: int) -> int:
        """``fp`` with table ``table``'s key blocks moved to the most significant end."""
        out = 0
        for src, mask, dst in self._plans[table]:
            out |= ((fp >> src) & mask) << dst
        return out

    def permute_all(self, fp: int) -> list[int]:
        """``[permute(fp, t) for every table t]`` in one compiled call."""
        return self.permute_array(fp).tolist()

    def permute_array(self, fp: int) -> np.ndarray:
        """:meth:`permute_all` as uint64[T] (the hot path)."""
        return _permute_blocks(np.uint64(fp), self._src, self._mask, self._dst)

    def permute_many(self, fps: np.ndarray) -> np.ndarray:
        """uint64[n, T]: :meth:`permute_array` of each of ``fps`` (uint64[n])."""
        return _permute_rows(fps, self._src, self._mask, self._dst)

    def unpermute(self, permuted: int, table: int) -> int:
        out = 0
        for src, mask, dst in self._plans[table]:
            out |= ((permuted >> dst) & mask) << src
        return out


# the tables' own arrays; fps uint64[n] from the engine (jit.trusted)
_permute_blocks, _permute_rows = trusted(permute_blocks), trusted(permute_rows)
