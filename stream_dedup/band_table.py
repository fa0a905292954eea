"""LSH band buckets in memory: the bucket keys of an article's bands and the
:class:`BandTable` of the articles filed under each.

Banding LSH (:mod:`stream_dedup.lsh`) files every indexed article under one bucket per band. Kept
in RocksDB, that was 37 read-modify-write puts per article (each bucket value a list of members),
about 60 % of the bytes the index wrote and stored, and the writes, flushes and compactions that
made the rate fall as the index grew. The buckets are *derived* data: every one can be computed
again from the 16-bit signature rows each article record keeps (:func:`band_keys` on the record
bytes). So they live in memory, a :class:`~stream_dedup.list_table.MemberLists` of bucket key ->
members, loaded from the snapshot the index's last close wrote, or rebuilt from the records
(:mod:`stream_dedup.memory_lists`); RocksDB stays the one durable copy.

A bucket key is a ``uint64``: for ``r <= 3`` rows it is the band number (16 bits) and the rows
(16 bits each) packed, so two signatures share a bucket iff the band agrees (no collision to
reason about); for ``r > 3`` it is a 64-bit mix of them (a false collision, ~n/2^64 per lookup,
only adds a candidate that verification then rejects); never :data:`~stream_dedup.list_table.EMPTY`.

Memory: ~0.5 KB per indexed article at 37 bands between growths (488 MB at 1,000,000 articles of
``bench/scale.py``, where 81 % of the buckets hold one article, inline in its slot; the
``stream_dedup_band_table_bytes`` gauge). Rebuilding reads every article record once (~13 s per
million articles); loading the snapshot
reads one file of about the lists' size.
"""

from __future__ import annotations

import numpy as np

from .jit import kernel, trusted
from .list_table import EMPTY, MemberLists

__all__ = ["BandTable", "band_keys", "bucket_keys"]


@kernel
def band_keys(rows, bands, r):
    """uint64[n, bands]: the bucket key of every band of each row of ``rows`` (uint16[n, num_perm],
    the signatures' stored 16-bit values as raw bytes read natively: the same bytes give the same keys)."""
    n = rows.shape[0]
    out = np.empty((n, bands), dtype=np.uint64)
    for i in range(n):
        for b in range(bands):
            if r <= 3:
                k = np.uint64(b) << np.uint64(48)
                for j in range(r):
                    k |= np.uint64(rows[i, b * r + j]) << np.uint64(16 * (r - 1 - j))
            else:
                k = np.uint64(b) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x2545F4914F6CDD1D)
                for j in range(r):
                    k = (k ^ np.uint64(rows[i, b * r + j])) * np.uint64(0xFF51AFD7ED558CCD)
                    k ^= k >> np.uint64(29)
                if k == EMPTY:
                    k = EMPTY - np.uint64(1)
            out[i, b] = k
    return out


def bucket_keys(rows: np.ndarray, bands: int, r: int) -> np.ndarray:
    """uint64[n, bands] bucket keys of 16-bit signatures (``[n, num_perm]``, or one signature: then
    ``uint64[bands]``) in ``bands`` bands of ``r`` rows. The kernel reads the big-endian bytes the
    records keep (no copy for ``>u2``)."""
    one = rows.ndim == 1
    be = rows.astype(">u2", copy=False)
    raw = np.ascontiguousarray(be.view(np.uint16).reshape(1 if one else rows.shape[0], -1))
    out = _band_keys(raw, bands, r)
    return out[0] if one else out


class BandTable(MemberLists):
    """The LSH buckets of an index: a list of article seqs per bucket key, the newest ``cap`` kept."""

    def __init__(self, bands: int, rows: int, cap: int, slots: int = 1 << 12, nodes: int = 1 << 12) -> None:
        super().__init__(cap, slots, nodes)
        self.bands, self.rows = bands, rows

    def keys(self, rows: np.ndarray) -> np.ndarray:
        """:func:`bucket_keys` of 16-bit signatures (``[n, num_perm]``, or one signature: then
        ``uint64[bands]``) in this table's banding."""
        return bucket_keys(rows, self.bands, self.rows)

    def add(self, keys: np.ndarray, seqs: np.ndarray) -> None:
        """File ``seqs[i]`` (uint32[n]) under each of ``keys[i]`` (uint64[n, bands]), in order."""
        if keys.shape[0]:
            self.add_entries(keys.ravel(), np.repeat(seqs, keys.shape[1]))


_band_keys = trusted(band_keys)  # raw: made C-ordered uint16 above (jit.trusted)
