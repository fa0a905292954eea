"""The index's in-memory lists: built from RocksDB, or loaded from the latest snapshot and brought up to date.

The LSH buckets (:class:`~stream_dedup.band_table.BandTable`), the passage lists
(:class:`~stream_dedup.list_table.MemberLists`) and the permuted SimHash tables
(:class:`~stream_dedup.simhash_table.SimhashTable`) are derived from what RocksDB keeps: the buckets
from the 16-bit signature rows of the article records (``A`` keys), the SimHash tables from their
SimHash, the passage lists from the anchors each article joined (``D`` keys). Building them reads
every such key once: 11-15 s per million articles on the 2-core benchmark machine (README, Scale).
So a snapshot of them is written to one file, ``memory-lists-3.bin`` in the index directory, when
the index is closed and, in a long-running process, now and then
(:meth:`~stream_dedup.index.Index.snapshot_lists`: the worker's ``--lists-snapshot-every``); then a
random token naming that file is stored in RocksDB (``Mlists``).

Opening loads the file only if RocksDB holds the same token, then files again the articles indexed
after it (their seqs follow the snapshot's next seq: their records and ``D`` keys are read from
there on, as a build reads all of them), so a process that was killed restarts from its latest
snapshot plus what it wrote since, not from the whole index. Articles are only ever added in seq
order; deleting one (retention, :meth:`~stream_dedup.engine.Deduplicator.remove`) deletes the token
in the same write, since the snapshot still holds it: the lists are then built from RocksDB until
the next snapshot. A file without its token is never read, and the token is only written once the
file is complete and synced. Nothing of the decisions depends on which way the lists came:
``tests/engine/test_memory_lists.py`` compares them.

The file is the arrays' bytes as they are in memory, each at a 64-byte aligned offset, after a
JSON header naming them (dtype, shape, offset), the token and the index's fingerprint::

    b"SDLISTS3"  header length (u64, little-endian)  header (JSON)  arrays ...

A load reads each array straight into its own new buffer (``readinto``) and a save writes each
from its buffer: no copy, no compression, no checksum pass. The zip of ``np.savez`` that the layout
before it used (``memory-lists-2.npz``) computed a CRC of every byte both ways and copied each
array once more: 1.1-1.8 s to save and 0.3-1.1 s to load the 377 MB of lists of a 300,000-article
index (README, Scale). What guards the file instead is what guarded it before, the token: it is
written to RocksDB only after the file is complete and synced, and a file of another size than its
header says is not read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .band_table import BandTable
from .index_record import _RECORD, _SIG_DTYPE, FLAG_INDEXED
from .list_table import UNCAPPED, MemberLists
from .passages import ANCHOR_BYTES, DELETE_PREFIX, anchors_of
from .simhash_table import SimhashTable

if TYPE_CHECKING:
    from .index import Index

#: (``-3``: raw arrays after a JSON header; the files of the layouts before it, ``memory-lists.npz`` and
#: ``memory-lists-2.npz``, are not read, so an index closed by an older version builds its lists again
#: once, and an older version never reads this layout; an older file found is deleted)
SNAPSHOT_FILE = "memory-lists-3.bin"
OLDER_FILES = ("memory-lists.npz", "memory-lists-2.npz")
MAGIC = b"SDLISTS3"
ALIGN = 64
TOKEN_KEY = b"Mlists"
_LIST_ARRAYS = ("slot_keys", "slot_head", "node_seq", "node_next", "meta")


class Lists(NamedTuple):
    """The index's in-memory lists."""
    buckets: BandTable
    passages: MemberLists
    simhash: SimhashTable


def build(index: Index) -> Lists:
    """Every list, from RocksDB."""
    buckets, simhash = build_sketch_tables(index)
    return Lists(buckets, build_passage_lists(index), simhash)


def build_sketch_tables(index: Index, chunk: int = 8192) -> tuple[BandTable, SimhashTable]:
    """The LSH buckets and SimHash table entries of every indexed article, from the records, in seq order.

    Each chunk of records is read as one array (:func:`_record_heads`: their fixed-size heads),
    not unpacked one by one: after a crash this is what the first decision waits for."""
    table = BandTable(*index.banding, index.max_bucket)
    simhash = SimhashTable(index.tables.key_masks)
    file_sketches(index, table, simhash, 0, chunk)
    return table, simhash


def file_sketches(index: Index, table: BandTable, simhash: SimhashTable, start: int, chunk: int = 8192) -> int:
    """File the articles of seq ``start`` on in ``table`` and ``simhash``, in seq order, as the
    decisions filed them (those with sketches: not exact copies, empty texts, close near-copies);
    returns the number of records read."""
    head = _record_heads(index.num_perm)
    read = 0
    for heads, numbers in _chunks(index, b"A", chunk, head.itemsize, start):
        read += numbers.shape[0]
        rows = np.frombuffer(b"".join(heads), dtype=head)
        keep = ((rows["flags"] & FLAG_INDEXED) != 0) & (rows["n_shingles"] > 0)
        if not keep.all():
            rows, numbers = rows[keep], numbers[keep]
        if rows.shape[0]:
            table.add(table.keys(rows["sig"]), numbers)
            simhash.add_many(index.tables.permute_many(rows["simhash"].astype(np.uint64)), numbers)
    return read


def _record_heads(num_perm: int) -> np.dtype:
    """The fixed-size head of an article record (:data:`~stream_dedup.index_record._RECORD`, then
    the 16-bit signature) as a numpy record type: the same big-endian fields, no padding."""
    head = np.dtype([("first_seen", ">f8"), ("simhash", ">u8"), ("n_shingles", ">u4"), ("flags", "u1"),
                     ("exact", "V16"), ("sig", _SIG_DTYPE, (num_perm,))])
    assert head.itemsize == _RECORD.size + _SIG_DTYPE.itemsize * num_perm
    return head


def build_passage_lists(index: Index, chunk: int = 4096) -> MemberLists:
    """The passage lists: each article in the lists its ``D`` key names, in seq order (a chunk of
    ``D`` values converted as one array: :func:`~stream_dedup.passages.anchors_of` of their bytes)."""
    lists = MemberLists(UNCAPPED)  # the engine stops adding at --passage-common-docs
    file_passages(index, lists, 0, chunk)
    return lists


def file_passages(index: Index, lists: MemberLists, start: int, chunk: int = 4096) -> None:
    """File the articles of seq ``start`` on in the passage lists their ``D`` keys name, in seq order."""
    for values, numbers in _chunks(index, DELETE_PREFIX, chunk, None, start):
        lists.add_entries(anchors_of(b"".join(values)), np.repeat(numbers, [len(v) // ANCHOR_BYTES for v in values]))


def _chunks(index: Index, prefix: bytes, chunk: int, size: int | None = None,
            start: int = 0) -> Iterator[tuple[list[bytes], np.ndarray]]:
    """The values of the keys ``prefix`` + seq (8 bytes), in seq order from ``start``, ``chunk`` at a
    time (each cut to its first ``size`` bytes if given), with their seqs (uint32: they fit,
    :meth:`Index.check_seq`)."""
    values: list[bytes] = []
    seqs: list[bytes] = []
    for key, value in index.scan(prefix, start.to_bytes(8, "big") if start else b""):
        values.append(value if size is None else value[:size])
        seqs.append(key[1:9])
        if len(values) == chunk:
            yield values, np.frombuffer(b"".join(seqs), dtype=">u8").astype(np.uint32)
            values, seqs = [], []
    if values:
        yield values, np.frombuffer(b"".join(seqs), dtype=">u8").astype(np.uint32)


def _fingerprint(index: Index) -> list[int]:
    """What a snapshot must agree with: the article count, the next seq and the bucket shape."""
    return [int(x) for x in (index.count, index.next_seq, *index.banding, index.max_bucket)]


def _parts(lists: Lists) -> list[tuple[str, object, tuple[str, ...]]]:
    """(prefix in the snapshot, table, its arrays) of each list."""
    return [("buckets_", lists.buckets, _LIST_ARRAYS), ("lists_", lists.passages, _LIST_ARRAYS),
            ("simhash_", lists.simhash, SimhashTable.ARRAYS)]


def load(index: Index) -> Lists | None:
    """The lists of the latest snapshot if RocksDB names it, with the articles indexed after it filed
    again (see the module doc); None if there is none to use (the token and the file are then
    dropped: the lists are built from RocksDB, and the next snapshot replaces them)."""
    _drop_older_files(index)
    token = index.db.get(TOKEN_KEY)
    if token is None:
        return None
    path = Path(index.path) / SNAPSHOT_FILE
    lists = None
    try:
        lists = _load(index, path, token)
    except (OSError, KeyError, ValueError, TypeError):  # a torn or foreign file: build them from RocksDB
        lists = None
    finally:
        if lists is None:
            index.db.delete(TOKEN_KEY)
            path.unlink(missing_ok=True)
    return lists


def _load(index: Index, path: Path, token: bytes) -> Lists | None:
    found = _read(path, token)
    if found is None:
        return None
    shape, arrays = found
    count, next_seq = shape[:2]
    # the same bucket shape, and since the snapshot only articles added (each one seq, none deleted:
    # a delete drops the token)
    if shape[2:] != _fingerprint(index)[2:] or next_seq > index.next_seq \
            or index.count - count != index.next_seq - next_seq:
        return None
    lists = Lists(BandTable(*index.banding, index.max_bucket, slots=1, nodes=1),
                  MemberLists(UNCAPPED, slots=1, nodes=1), SimhashTable(index.tables.key_masks, slots=1))
    for prefix, table, names in _parts(lists):
        for name in names:
            setattr(table, name, arrays[prefix + name])
        table.loaded()
    if next_seq < index.next_seq:  # written since: filed again, in seq order, as the decisions did
        if file_sketches(index, lists.buckets, lists.simhash, next_seq) != index.next_seq - next_seq:
            return None
        file_passages(index, lists.passages, next_seq)
    return lists


def _read(path: Path, token: bytes) -> tuple[list[int], dict[str, np.ndarray]] | None:
    """The index shape (:func:`_fingerprint` when it was written) and the arrays of the snapshot at
    ``path`` if it is the one ``token`` names, else None."""
    with open(path, "rb", buffering=0) as f:
        if f.read(len(MAGIC)) != MAGIC:
            return None
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
        base = _aligned(len(MAGIC) + 8 + length)
        if bytes.fromhex(header["token"]) != token or os.fstat(f.fileno()).st_size != base + header["size"]:
            return None
        arrays = {}
        for name, dtype, shape, offset in header["arrays"]:
            if np.dtype(dtype).kind not in "iu":  # the lists hold integers only
                return None
            array = np.empty(shape, dtype=np.dtype(dtype))
            f.seek(base + offset)
            view = memoryview(array).cast("B")
            done = 0
            while done < len(view):  # (readinto may return less than asked)
                n = f.readinto(view[done:])
                if not n:
                    return None
                done += n
            arrays[name] = array
    return [int(x) for x in header["index"]], arrays


def save(index: Index, lists: Lists) -> None:
    """Write the lists next to the index, then the token that makes them valid (see the module doc)."""
    path = Path(index.path) / SNAPSHOT_FILE
    tmp = path.with_suffix(".tmp")
    token = os.urandom(16)  # (secrets.token_bytes; importing secrets loads OpenSSL through hmac)
    for _, table, _ in _parts(lists):
        table.settle()  # a growth under way is finished: the snapshot keeps one table of each
    arrays = [(f"{prefix}{name}", np.ascontiguousarray(getattr(table, name)))
              for prefix, table, names in _parts(lists) for name in names]
    entries, size = [], 0  # offsets from the first array's (the header's end, aligned)
    for name, array in arrays:
        entries.append((name, array.dtype.str, list(array.shape), size))
        size += _aligned(array.nbytes)
    text = json.dumps({"token": token.hex(), "index": _fingerprint(index), "arrays": entries, "size": size}).encode()
    base = _aligned(len(MAGIC) + 8 + len(text))
    with open(tmp, "wb") as f:
        f.write(MAGIC + len(text).to_bytes(8, "little") + text)
        for (_, array), entry in zip(arrays, entries, strict=True):
            f.write(b"\0" * (base + entry[3] - f.tell()))
            if array.nbytes:
                f.write(memoryview(array).cast("B"))
        f.truncate(base + size)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    index.db.put(TOKEN_KEY, token)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _drop_older_files(index: Index) -> None:
    """Delete the snapshot files of the layouts before this one (never read again: disk only)."""
    for name in OLDER_FILES:
        (Path(index.path) / name).unlink(missing_ok=True)
