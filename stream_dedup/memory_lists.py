"""The index's in-memory lists and how they are built from RocksDB.

The LSH buckets (:class:`~stream_dedup.band_table.BandTable`), the passage lists
(:class:`~stream_dedup.list_table.MemberLists`), the permuted SimHash tables
(:class:`~stream_dedup.simhash_table.SimhashTable`) and the id and exact-hash tables
(:mod:`stream_dedup.key_tables`) are derived from what RocksDB keeps: the buckets from the 16-bit
signature rows of the article records (``A`` keys), the SimHash tables from their SimHash, the key
tables from their ids and exact hashes, the passage lists from the anchors each article joined
(``D`` keys). Building them reads
every such key once, in seq order, a chunk of records at a time: 7-15 s per million articles on the
2-core benchmark machines (README, Scale). :mod:`stream_dedup.lists_snapshot` keeps a copy on disk
so that an index is not built again at each start; it files the articles added after the copy with
the same functions (:func:`file_records`, :func:`file_passages`, from a seq to a seq).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .band_table import BandTable
from .index_record import _RECORD, _SIG_DTYPE, FLAG_INDEXED, record_id_bytes
from .key_tables import KeyTable, exact_keys, raw_id_keys
from .list_table import UNCAPPED, MemberLists
from .passages import ANCHOR_BYTES, DELETE_PREFIX, anchors_of
from .simhash_table import SimhashTable

if TYPE_CHECKING:
    from .index import Index


class Lists(NamedTuple):
    """The index's in-memory lists."""
    buckets: BandTable
    passages: MemberLists
    simhash: SimhashTable
    ids: KeyTable      # article id -> seq (every article)
    exacts: KeyTable   # exact hash -> seq (indexed articles)


def empty(index: Index, slots: int = 1 << 12) -> Lists:
    """Empty lists for ``index`` (``slots``: of each hash table; 1 for arrays a snapshot replaces)."""
    return Lists(BandTable(*index.banding, index.max_bucket, slots=slots, nodes=slots),
                 MemberLists(UNCAPPED, slots=slots, nodes=slots),  # the engine stops adding at --passage-common-docs
                 SimhashTable(index.tables.key_masks, slots=slots), KeyTable(slots), KeyTable(slots))


def build(index: Index, chunk: int = 8192) -> Lists:
    """Every list, from RocksDB: the records' in seq order, a chunk of records at a time (after a
    crash this is what the first decision waits for), then the passage lists."""
    lists = empty(index)
    file_records(index, lists, 0, chunk)
    file_passages(index, lists.passages, 0, chunk // 2)
    return lists


def expect(lists: Lists, count: int, articles: int) -> None:
    """Prepare every list for ``articles`` more articles, each taking the slots and nodes that the
    ``count`` indexed so far took on average (:meth:`stream_dedup.engine.Deduplicator.expect`)."""
    if count <= 0 or articles <= 0:
        return

    def coming(used: int) -> int:  # (used so far, scaled to the articles coming, rounded up)
        return -(-used * articles // count)

    for table in (lists.buckets, lists.passages, lists.ids, lists.exacts):
        table.expect(coming(table.meta.item(0)), coming(table.meta.item(1)))
    lists.simhash.expect(coming(lists.simhash.meta.item(0)))


def file_records(index: Index, lists: Lists, start: int, chunk: int = 8192, stop: int | None = None) -> int:
    """File the articles of seqs ``start`` to ``stop`` (excluded; None: the last) in the LSH buckets,
    SimHash tables and key tables, in seq order, as the decisions filed them; returns the number of
    records read. Each chunk's fixed-size heads are read as one array (:func:`record_heads`), not
    unpacked one by one; only the ids are taken from each record."""
    head = record_heads(index.num_perm)
    size, num_perm = head.itemsize, index.num_perm
    read = 0
    for values, numbers in _chunks(index, b"A", chunk, None, start, stop):
        read += numbers.shape[0]
        rows = np.frombuffer(b"".join([v[:size] for v in values]), dtype=head)
        file_heads(index, lists, rows, numbers, raw_id_keys([record_id_bytes(v, num_perm) for v in values]))
    return read


def file_heads(index: Index, lists: Lists, rows: np.ndarray, numbers: np.ndarray, ids: np.ndarray) -> None:
    """File the record heads ``rows`` (seqs ``numbers``, id keys ``ids``): every one in the id table,
    those indexed in the exact-hash table, and those with sketches (not exact copies, empty texts nor
    close near-copies: their records say so) in the LSH buckets and SimHash tables."""
    lists.ids.add_entries(ids, numbers)
    indexed = (rows["flags"] & FLAG_INDEXED) != 0
    if indexed.all():
        lists.exacts.add_entries(exact_keys(rows["exact"]), numbers)
    elif indexed.any():
        lists.exacts.add_entries(exact_keys(rows["exact"][indexed]), numbers[indexed])
    keep = indexed & (rows["n_shingles"] > 0)
    if not keep.all():
        rows, numbers = rows[keep], numbers[keep]
    if rows.shape[0]:
        table = lists.buckets
        table.add(table.keys(rows["sig"]), numbers)
        lists.simhash.add_many(index.tables.permute_many(rows["simhash"].astype(np.uint64)), numbers)


def record_heads(num_perm: int) -> np.dtype:
    """The fixed-size head of an article record (:data:`~stream_dedup.index_record._RECORD`, then
    the 16-bit signature) as a numpy record type: the same big-endian fields, no padding."""
    head = np.dtype([("first_seen", ">f8"), ("simhash", ">u8"), ("n_shingles", ">u4"), ("flags", "u1"),
                     ("exact", "V16"), ("sig", _SIG_DTYPE, (num_perm,))])
    assert head.itemsize == _RECORD.size + _SIG_DTYPE.itemsize * num_perm
    return head


def file_passages(index: Index, lists: MemberLists, start: int, chunk: int = 4096, stop: int | None = None) -> None:
    """File the articles of seqs ``start`` to ``stop`` (excluded; None: the last) in the passage lists
    their ``D`` keys name, in seq order."""
    for values, numbers in _chunks(index, DELETE_PREFIX, chunk, None, start, stop):
        lists.add_entries(anchors_of(b"".join(values)), np.repeat(numbers, [len(v) // ANCHOR_BYTES for v in values]))


def _chunks(index: Index, prefix: bytes, chunk: int, size: int | None = None, start: int = 0,
            stop: int | None = None) -> Iterator[tuple[list[bytes], np.ndarray]]:
    """The values of the keys ``prefix`` + seq (8 bytes), in seq order from ``start`` to ``stop``
    (excluded; None: the last), ``chunk`` at a time (each cut to its first ``size`` bytes if given),
    with their seqs (uint32: they fit, :meth:`Index.check_seq`).

    No seq at or past the index's next one has keys: from there nothing is read (a fresh index, or
    a snapshot nothing was added after, opens without a scan: a total-order iterator over the
    points family's hash memtable costs ~7 ms however empty it is)."""
    if start >= (index.next_seq if stop is None else min(stop, index.next_seq)):
        return
    values: list[bytes] = []
    seqs: list[bytes] = []
    end = prefix + stop.to_bytes(8, "big") if stop is not None else None
    for key, value in index.scan(prefix, start.to_bytes(8, "big") if start else b""):
        if end is not None and key >= end:
            break
        values.append(value if size is None else value[:size])
        seqs.append(key[1:9])
        if len(values) == chunk:
            yield values, np.frombuffer(b"".join(seqs), dtype=">u8").astype(np.uint32)
            values, seqs = [], []
    if values:
        yield values, np.frombuffer(b"".join(seqs), dtype=">u8").astype(np.uint32)
