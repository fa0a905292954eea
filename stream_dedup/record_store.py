"""The records of the articles read or written lately, in one compiled buffer: what a verification
reads, with no Python object per record.

A verification reads each candidate's whole record (:mod:`stream_dedup.index_record`); on short items
96 % of those reads are of records read before (the same stories are candidates again and again),
so the index keeps recent records in memory. :class:`RecordStore` keeps them in one byte buffer
that the verification kernel reads directly (:func:`stream_dedup.candidate_rules.verify_stored`):
the candidates' records need no dict lookup each, no join into one buffer and no copy per call.

Layout. The buffer is two halves (*segments*); records are appended to the current one, each after
an 8-byte header (its seq and its length, little-endian uint32). When the next record does not fit,
the other segment is emptied (every record in it forgotten) and becomes the current one: a FIFO
cache by halves, holding between half and all of ``limit`` bytes of the newest records. A map from
seq to the record's offset (open addressing, linear probing, uint32 ``seq + 1`` as the key so that
zeros are empty slots: the map's pages are touched only as used) finds a record; a deleted one is taken
out with backward shifting (no tombstones: probes stay short).

The store is a cache of what RocksDB holds, plus the records of the batch being decided (put at
:meth:`BatchView.insert <stream_dedup.batch.BatchView.insert>`, deleted again if the batch rolls
back): a record not in it is read from RocksDB and put.
"""

from __future__ import annotations

import numpy as np

from . import page_memory
from .jit import compiling, inline, kernel, trusted

if compiling():
    from .addresses import copy_into

__all__ = ["HEADER", "RecordStore"]

HEADER = 8  # bytes before each record: seq, length (little-endian uint32)
M_CURRENT, M_FILL, M_OTHER_FILL, M_COUNT, M_SEGMENT = range(5)  # meta[]
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_NO_SEQ = (1 << 32) - 1  # the last seq an index can number: seq + 1 would not fit the map's uint32 keys (not held)


@inline
def _home(key, mask):
    """The first slot to probe for ``key`` (Fibonacci hashing: consecutive seqs spread out)."""
    return np.int64((np.uint64(key) * _GOLDEN) >> np.uint64(40)) & mask


@inline
def _find(keys, vals, seq):
    """The offset of ``seq``'s header in the buffer, or -1."""
    if seq >= _NO_SEQ:
        return np.int64(-1)
    mask = keys.shape[0] - 1
    key = np.uint32(seq + 1)
    i = _home(key, mask)
    while True:
        k = keys[i]
        if k == key:
            return np.int64(vals[i])
        if k == 0:
            return np.int64(-1)
        i = (i + 1) & mask


@inline
def _forget(keys, vals, seq):
    """Take ``seq`` out of the map (backward shift: the entries after it move up where their probe
    allows). False if it was not there."""
    if seq >= _NO_SEQ:
        return False
    mask = keys.shape[0] - 1
    key = np.uint32(seq + 1)
    i = _home(key, mask)
    while keys[i] != key:
        if keys[i] == 0:
            return False
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        k = keys[j]
        if k == 0:
            break
        h = _home(k, mask)
        # the entry at j may move to the hole at i unless its home lies cyclically in (i, j]
        if (i < j and (h <= i or h > j)) or (i > j and h <= i and h > j):
            keys[i] = k
            vals[i] = vals[j]
            i = j
    keys[i] = 0
    vals[i] = 0
    return True


@inline
def _u32(buf, at):
    return np.int64(buf[at]) | (np.int64(buf[at + 1]) << 8) | (np.int64(buf[at + 2]) << 16) \
        | (np.int64(buf[at + 3]) << 24)


@inline
def _put_u32(buf, at, v):
    for b in range(4):
        buf[at + b] = np.uint8((v >> (8 * b)) & 0xFF)


@kernel
def store_put(buf, keys, vals, meta, seq, rec):
    """Append the record ``rec`` (uint8) of ``seq`` (see the module doc); True if it is now held.
    Not held: a record larger than a segment, or a map at half its slots. A seq already held keeps
    its record (records do not change; a caller replacing one deletes it first)."""
    need = np.int64(HEADER) + rec.shape[0]
    segment = meta[M_SEGMENT]
    if need > segment or 2 * (meta[M_COUNT] + 1) > keys.shape[0] or seq >= _NO_SEQ:
        return False
    if _find(keys, vals, seq) >= 0:
        return True
    current, fill = meta[M_CURRENT], meta[M_FILL]
    if fill + need > segment:  # the other half is emptied and becomes the current one
        other = 1 - current
        base = other * segment
        at = np.int64(0)
        end = meta[M_OTHER_FILL]
        while at < end:
            s = _u32(buf, base + at)
            if _find(keys, vals, s) == base + at:  # (not deleted, nor put again since)
                _forget(keys, vals, s)
                meta[M_COUNT] -= 1
            at += HEADER + _u32(buf, base + at + 4)
        meta[M_OTHER_FILL] = fill
        meta[M_CURRENT] = current = other
        fill = np.int64(0)
    at = current * segment + fill
    _put_u32(buf, at, seq)
    _put_u32(buf, at + 4, rec.shape[0])
    copy_into(buf, at + HEADER, rec, 0, rec.shape[0])
    mask = keys.shape[0] - 1
    key = np.uint32(seq + 1)
    i = _home(key, mask)
    while keys[i] != 0:
        i = (i + 1) & mask
    keys[i] = key
    vals[i] = np.uint32(at)
    meta[M_FILL] = fill + need
    meta[M_COUNT] += 1
    return True


@kernel
def store_put_many(buf, keys, vals, meta, seq0, recs, ends):
    """:func:`store_put` of the records of ``seq0``, ``seq0 + 1``, ... in one call: ``recs`` (uint8)
    holds them end to end, record ``i`` ending at ``ends[i]``."""
    begin = np.int64(0)
    for i in range(ends.shape[0]):
        store_put(buf, keys, vals, meta, seq0 + i, recs[begin:ends[i]])
        begin = ends[i]


@kernel
def store_delete(keys, vals, meta, seq):
    """Forget ``seq``'s record (its bytes stay until its segment is emptied); True if it was held."""
    if _forget(keys, vals, seq):
        meta[M_COUNT] -= 1
        return True
    return False


@inline
def locate(buf, keys, vals, seqs, starts, lengths):
    """Where the record of each of ``seqs`` starts in ``buf`` and its length (``starts[i] = -1``:
    not held); returns how many are not held."""
    missing = 0
    for i in range(seqs.shape[0]):
        at = _find(keys, vals, seqs[i])
        if at < 0:
            starts[i] = -1
            lengths[i] = 0
            missing += 1
        else:
            starts[i] = at + HEADER
            lengths[i] = _u32(buf, at + 4)
    return missing


@kernel
def store_locate(buf, keys, vals, seqs, starts, lengths):
    """:func:`locate` from Python (:meth:`RecordStore.get_many`)."""
    return locate(buf, keys, vals, seqs, starts, lengths)


_store_put = trusted(store_put)
_store_put_many = trusted(store_put_many)
_store_delete = trusted(store_delete)
_store_locate = trusted(store_locate)


class RecordStore:
    """Records by seq in ``limit`` bytes (see the module doc); ``min_record`` is the smallest record
    the index writes (it sizes the map: it never holds more than ``limit / min_record`` records)."""

    def __init__(self, limit: int, min_record: int) -> None:
        segment = max(limit // 2, 0)  # (0: nothing held; every verification reads its list of records)
        if 2 * segment >= 1 << 32:
            raise ValueError(f"a record store of {limit:,} bytes: at most 4 GiB (uint32 offsets)")
        self.min_record = min_record
        # (zeros: mapped, so the pages are resident only once written, as a dict's records were;
        # written and read in order: never on huge pages, see page_memory)
        self.buf = page_memory.zeros(2 * segment, np.uint8, probed=False)
        self.view = memoryview(self.buf)  # (slices of it: a record without a copy)
        most = 2 * segment // (HEADER + max(min_record, 1)) + 1
        slots = 1 << max(4, int(2 * most - 1).bit_length())  # at most half full
        self.keys = page_memory.zeros(slots, np.uint32)  # seq + 1 (0: an empty slot)
        self.vals = page_memory.zeros(slots, np.uint32)  # where its header is in buf
        self.meta = np.zeros(5, dtype=np.int64)
        self.meta[M_SEGMENT] = segment
        self._starts = np.zeros(64, dtype=np.int64)
        self._lengths = np.zeros(64, dtype=np.int64)

    def put(self, seq: int, record: bytes) -> bool:
        """Hold ``record`` as ``seq``'s (False: not held, see :func:`store_put`)."""
        return bool(_store_put(self.buf, self.keys, self.vals, self.meta, seq, np.frombuffer(record, dtype=np.uint8)))

    def put_many(self, seq0: int, records: list[bytes]) -> None:
        """:meth:`put` of ``records`` as those of ``seq0``, ``seq0 + 1``, ... in one call."""
        if records:
            self.put_packed(seq0, np.frombuffer(b"".join(records), dtype=np.uint8),
                            np.fromiter(map(len, records), np.int64, len(records)).cumsum())

    def put_packed(self, seq0: int, records: np.ndarray, ends: np.ndarray) -> None:
        """:meth:`put_many` of records already end to end (uint8), record ``i`` ending at ``ends[i]``
        (int64: :func:`stream_dedup.record_kernel.pack_run`'s)."""
        if ends.shape[0]:
            _store_put_many(self.buf, self.keys, self.vals, self.meta, seq0, records, ends)

    def delete(self, seq: int) -> bool:
        return bool(_store_delete(self.keys, self.vals, self.meta, seq))

    def get_many(self, seqs: list[int]) -> list[bytes | None]:
        """The records of ``seqs`` held (None: not held)."""
        m = len(seqs)
        if m > self._starts.shape[0]:
            self._starts = np.zeros(2 * m, dtype=np.int64)
            self._lengths = np.zeros(2 * m, dtype=np.int64)
        starts, lengths = self._starts[:m], self._lengths[:m]
        _store_locate(self.buf, self.keys, self.vals, np.array(seqs, dtype=np.int64), starts, lengths)
        buf = self.buf
        return [None if a < 0 else buf[a:a + n].tobytes() for a, n in zip(starts.tolist(), lengths.tolist(), strict=True)]

    def __len__(self) -> int:
        return int(self.meta[M_COUNT])

    @property
    def held_bytes(self) -> int:
        """Bytes of the two segments written so far (records and headers, deleted ones included)."""
        return int(self.meta[M_FILL] + self.meta[M_OTHER_FILL])

    @property
    def limit(self) -> int:
        return self.buf.shape[0]

    @property
    def nbytes(self) -> int:
        """The memory it takes: the bytes of the buffer written so far (its pages are touched only as
        written: up to :attr:`limit`) and its map's arrays."""
        return self.held_bytes + self.keys.nbytes + self.vals.nbytes
