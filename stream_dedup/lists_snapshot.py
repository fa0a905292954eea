"""The snapshot of the index's in-memory lists: loaded at start and brought up to date, instead of built.

The in-memory lists (:mod:`stream_dedup.memory_lists`) are derived from RocksDB, and building them
reads every article record: 7-15 s per million articles on the 2-core benchmark machines (README,
Scale). So a snapshot of them is written to one file, ``memory-lists-3.bin`` in the index directory, when
the index is closed (unless the valid one is at most 1 % of the index behind it:
:meth:`~stream_dedup.index.Index.snapshot_fresh`) and, in a long-running process, now and then
(:meth:`~stream_dedup.index.Index.start_snapshot`: the worker's ``--lists-snapshot-every``); then a
random token naming that file is stored in RocksDB (``Mlists``).

Opening loads the file only if RocksDB holds the same token, then files again the articles indexed
after it (their seqs follow the snapshot's next seq: their records and ``D`` keys are read from
there on, as a build reads all of them), so a process that was killed restarts from its latest
snapshot plus what it wrote since, not from the whole index. Articles are added in seq order, and
deleted (retention, :meth:`~stream_dedup.engine.Deduplicator.remove`) between batches: while a
snapshot is valid, each deletion also writes, in its own write, a log entry (``Mdel``: the next seq
at that moment, the seq, the record's head, its id key and ``D`` value), and the restart applies it between the
articles added before and after it, as the live lists did (a bucket at its cap drops its oldest
member: the order of adds and deletes matters). The next snapshot clears the log; past
:data:`MAX_LOGGED_DELETIONS` the log and the token are dropped instead. A file without its token is
never read, the token is only written once the file is complete and synced, and a snapshot that
holds more than RocksDB (its writes lost after the file was synced) is not used. The lists loaded
and brought up to date are exactly the live ones, and decide as lists built from RocksDB do:
``tests/engine/test_lists_snapshot.py`` compares them.

The file is the arrays' bytes as they are in memory, each at a 64-byte aligned offset, after a
JSON header naming them (dtype, shape, offset), the token and the index's fingerprint::

    b"SDLISTS3"  header length (u64, little-endian)  header (JSON)  arrays ...

A load reads each array straight into its own new buffer (``readinto``) and a save writes each
from its buffer, past the page cache where the filesystem allows it
(:func:`~stream_dedup.direct_write.write_layout`): no compression, no checksum pass. The zip of
``np.savez`` that the layout before it used (``memory-lists-2.npz``) computed a CRC of every byte both ways and copied each
array once more: 1.1-1.8 s to save and 0.3-1.1 s to load the 377 MB of lists of a 300,000-article
index (README, Scale). What guards the file instead is what guarded it before, the token: it is
written to RocksDB only after the file is complete and synced, and a file of another size than its
header says is not read.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from rocksdict import WriteBatch

from . import page_memory
from .direct_write import write_layout
from .index_record import _RECORD, _SIG_DTYPE, FLAG_INDEXED
from .key_tables import exact_keys, id_key
from .memory_lists import Lists, empty, file_heads, file_passages, file_records, record_heads
from .passages import anchors_of
from .simhash_table import SimhashTable

if TYPE_CHECKING:
    from .index import Index
    from .index_record import StoredArticle

log = logging.getLogger(__name__)
#: (``-3``: raw arrays after a JSON header; the files of the layouts before it, ``memory-lists.npz`` and
#: ``memory-lists-2.npz``, are not read, so an index closed by an older version builds its lists again
#: once, and an older version never reads this layout; an older file found is deleted)
SNAPSHOT_FILE = "memory-lists-3.bin"
OLDER_FILES = ("memory-lists.npz", "memory-lists-2.npz")
MAGIC = b"SDLISTS3"
ALIGN = 64
TOKEN_KEY = b"Mlists"
#: the deletions since the snapshot, each in its own write: ``Mdel`` + the index's next seq when it
#: was made (8) + the article's seq (8) -> its record head, its id key (8, :func:`~stream_dedup.key_tables.id_key`)
#: and its ``D`` value (what filed it; before format 11 no id key: such a log goes with its snapshot, see Index)
DELETION_PREFIX, DELETIONS_END = b"Mdel", b"Mdem"
#: past this many deletions since the snapshot the log is dropped with the token (a restart then builds
#: the lists): what bounds it when snapshots are only written at close (~300 bytes each)
MAX_LOGGED_DELETIONS = 100_000
_LIST_ARRAYS = ("slot_keys", "slot_head", "node_seq", "node_next", "meta")


def _fingerprint(index: Index) -> list[int]:
    """What a snapshot must agree with: the article count, the next seq and the bucket shape."""
    return [int(x) for x in (index.count, index.next_seq, *index.banding, index.max_bucket)]


def _parts(lists: Lists) -> list[tuple[str, object, tuple[str, ...]]]:
    """(prefix in the snapshot, table, its arrays) of each list."""
    return [("buckets_", lists.buckets, _LIST_ARRAYS), ("lists_", lists.passages, _LIST_ARRAYS),
            ("simhash_", lists.simhash, SimhashTable.ARRAYS), ("ids_", lists.ids, _LIST_ARRAYS),
            ("exacts_", lists.exacts, _LIST_ARRAYS)]


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
            drop(index)
            path.unlink(missing_ok=True)
    return lists


def drop(index: Index) -> None:
    """Forget the snapshot: its token and its deletion log."""
    batch = WriteBatch(raw_mode=True)
    _forget(index, batch)
    index.db.write(batch)


def _forget(index: Index, batch: WriteBatch) -> None:
    """Put in ``batch`` the deletion of the snapshot's token and of its deletion log; from now on no
    snapshot is valid (nothing is logged, and one being written is not made valid)."""
    batch.delete(TOKEN_KEY)
    batch.delete_range(DELETION_PREFIX, DELETIONS_END)
    index.logged_deletions = None
    index.snapshot_generation += 1
    index.snapshot_next_seq = None


def _load(index: Index, path: Path, token: bytes) -> Lists | None:
    found = _read(path, token)
    if found is None:
        return None
    shape, arrays = found
    count, next_seq = shape[:2]
    # the same bucket shape, and since the snapshot the articles of the seqs after it added and those
    # of the deletion log deleted
    deletions = _deletions(index)
    if shape[2:] != _fingerprint(index)[2:] or next_seq > index.next_seq \
            or index.count - count != index.next_seq - next_seq - len(deletions):
        return None
    lists = empty(index, slots=1)
    for prefix, table, names in _parts(lists):
        for name in names:
            setattr(table, name, arrays[prefix + name])
        table.loaded()
    if not _replay(index, lists, next_seq, deletions):
        return None
    index.logged_deletions = len(deletions)
    index.snapshot_next_seq = next_seq
    return lists


def _replay(index: Index, lists: Lists, start: int, log: list[tuple[int, int, bytes]]) -> bool:
    """Bring the snapshot's lists (seqs below ``start``) up to date in the order the index changed
    since: the articles of seq ``start`` on filed in seq order, and each deletion of ``log`` (next
    seq at the time, seq, head + ``D`` value) applied once every article before it was filed; an
    article added and deleted since the snapshot is filed from its log entry. True if every seq
    from ``start`` to the index's next seq was accounted for."""
    if any(at < start for at, _, _ in log):
        return False  # (the snapshot's own write dropped the deletions before it: not this snapshot's log)
    gone = {seq: value for _, seq, value in log if seq >= start}
    made_at: dict[int, list[tuple[int, bytes]]] = {}  # next seq -> the deletions made then
    for at, deleted, value in log:
        made_at.setdefault(at, []).append((deleted, value))
    filed, seq = 0, start
    for stop in sorted(made_at.keys() | gone.keys() | {index.next_seq}):
        if seq < stop:
            filed += file_records(index, lists, seq, stop=stop)
            file_passages(index, lists.passages, seq, stop=stop)
            seq = stop
        for deleted, value in made_at.get(stop, ()):  # the deletions made when the next seq was ``stop`` ...
            _unfile(index, lists, deleted, value)
        if stop in gone:  # ... before article ``stop`` was added (deleted since: its record is gone)
            _file_logged(index, lists, stop, gone[stop])
            filed, seq = filed + 1, stop + 1
    return filed == index.next_seq - start


def log_deletion(index: Index, batch: WriteBatch, art: StoredArticle, added: bytes | None) -> None:
    """Put in ``batch`` (the deletion's own write) what a restart from the snapshot needs to take
    ``art`` out of the lists again when it did; past :data:`MAX_LOGGED_DELETIONS`, drop the snapshot
    instead. Nothing while there is no snapshot to keep up to date (``index.logged_deletions`` None)."""
    if index.logged_deletions is None:
        return
    if index.logged_deletions >= MAX_LOGGED_DELETIONS:
        _forget(index, batch)
        return
    head = _RECORD.pack(art.first_seen, art.simhash, art.n_shingles, FLAG_INDEXED if art.indexed else 0, art.exact)
    batch.put(DELETION_PREFIX + index.next_seq.to_bytes(8, "big") + art.seq.to_bytes(8, "big"),
              head + art.minhash.astype(_SIG_DTYPE, copy=False).tobytes() + id_key(art.article_id).to_bytes(8, "big")
              + (added or b""))
    index.logged_deletions += 1


def _deletions(index: Index) -> list[tuple[int, int, bytes]]:
    """The deletion log (:func:`log_deletion`): (next seq then, seq, head + id key + ``D`` value), in
    the order made."""
    n = len(DELETION_PREFIX)
    return [(int.from_bytes(key[n:n + 8], "big"), int.from_bytes(key[n + 8:n + 16], "big"), value)
            for key, value in index.scan_meta(DELETION_PREFIX)]


def _split(index: Index, value: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(record head, id key (uint64[1]), anchors added) of a deletion log entry."""
    head = record_heads(index.num_perm)
    n = head.itemsize
    return (np.frombuffer(value[:n], dtype=head), np.frombuffer(value[n:n + 8], dtype=">u8").astype(np.uint64),
            anchors_of(value[n + 8:]))


def _file_logged(index: Index, lists: Lists, seq: int, value: bytes) -> None:
    """File article ``seq`` from its deletion log entry, as :func:`file_records` and :func:`file_passages` would."""
    rows, ids, anchors = _split(index, value)
    file_heads(index, lists, rows, np.array([seq], dtype=np.uint32), ids)
    if anchors.shape[0]:
        lists.passages.add_entries(anchors, np.full(anchors.shape[0], seq, dtype=np.uint32))


def _unfile(index: Index, lists: Lists, seq: int, value: bytes) -> None:
    """Take article ``seq`` out of the lists, as :meth:`Index.delete` did."""
    rows, ids, anchors = _split(index, value)
    lists.ids.remove(ids, seq)
    if rows["flags"][0] & FLAG_INDEXED:
        lists.exacts.remove(exact_keys(rows["exact"]), seq)
    if rows["flags"][0] & FLAG_INDEXED and rows["n_shingles"][0] > 0:
        lists.buckets.remove(lists.buckets.keys(rows["sig"][0]), seq)
        lists.simhash.remove(np.asarray(index.tables.permute_array(int(rows["simhash"][0])), dtype=np.uint64), seq)
    lists.passages.remove(anchors, seq)


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
            # (on 4 kB pages while it is read, huge pages asked for once it is: page_memory)
            array = page_memory.loaded(shape[0], dtype) if len(shape) == 1 else np.empty(shape, dtype=np.dtype(dtype))
            f.seek(base + offset)
            view = memoryview(array).cast("B")
            done = 0
            while done < len(view):  # (readinto may return less than asked)
                n = f.readinto(view[done:])
                if not n:
                    return None
                done += n
            page_memory.promote(array)
            arrays[name] = array
    return [int(x) for x in header["index"]], arrays


def save(index: Index, lists: Lists) -> bytes:
    """Write the lists next to the index, then the token that makes them valid (see the module doc);
    returns the token."""
    token = os.urandom(16)  # (secrets.token_bytes; importing secrets loads OpenSSL through hmac)
    _publish(_write(Path(index.path), lists, token, _fingerprint(index)))
    _commit(index, token, None, index.next_seq)
    return token


def _write(directory: Path, lists: Lists, token: bytes, shape: list[int]) -> tuple[Path, Path]:
    """The snapshot file of ``lists``, not synced yet: (its temporary path, its final path)."""
    path = directory / SNAPSHOT_FILE
    tmp = path.with_name(f"{SNAPSHOT_FILE}.{os.getpid()}.tmp")
    for _, table, _ in _parts(lists):
        table.settle()  # a growth under way is finished: the snapshot keeps one table of each
    arrays = [(f"{prefix}{name}", np.ascontiguousarray(getattr(table, name)))
              for prefix, table, names in _parts(lists) for name in names]
    entries, size = [], 0  # offsets from the first array's (the header's end, aligned)
    for name, array in arrays:
        entries.append((name, array.dtype.str, list(array.shape), size))
        size += _aligned(array.nbytes)
    text = json.dumps({"token": token.hex(), "index": shape, "arrays": entries, "size": size}).encode()
    base = _aligned(len(MAGIC) + 8 + len(text))
    write_layout(tmp, MAGIC + len(text).to_bytes(8, "little") + text,
                 [(base + entry[3], array) for (_, array), entry in zip(arrays, entries, strict=True)], base + size)
    return tmp, path


def _publish(paths: tuple[Path, Path]) -> None:
    """Sync the written file to disk, then rename it to its final name (atomic)."""
    tmp, path = paths
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _commit(index: Index, token: bytes, held: list[bytes] | None, next_seq: int) -> None:
    """Make the snapshot ``token`` names valid (it holds the seqs below ``next_seq``): store the token,
    and drop from the deletion log the entries it holds (``held``; None: all of them) in the same write."""
    batch = WriteBatch(raw_mode=True)
    batch.put(TOKEN_KEY, token)
    if held is None:
        batch.delete_range(DELETION_PREFIX, DELETIONS_END)
    else:
        for key in held:
            batch.delete(key)
    index.db.write(batch)
    index.logged_deletions = 0 if held is None else (index.logged_deletions or 0) - len(held)
    index.snapshot_generation += 1
    index.snapshot_next_seq = next_seq


class BackgroundSnapshot:
    """A snapshot whose slow part, the sync of its file to disk, runs in a thread while the process
    goes on deciding.

    Writing the arrays into the file happens here, in the caller's turn, so the file holds the
    lists as they are now: past the page cache (:mod:`stream_dedup.direct_write`), ~0.5 s for the
    1.15 GB of lists of a million articles, where through the page cache it took 0.4-2.8 s (the
    kernel holds a writer of that many dirty pages to the disk's pace when another writes too).
    Syncing the file to disk and renaming it run in a thread that touches nothing else (the
    GIL is released while it waits); the lists change meanwhile without affecting the file. Once it is done
    (:meth:`poll`) the token is stored and the deletion log entries the snapshot holds (those made
    before it) are dropped; the ones logged since stay, for a restart to apply after it. If the
    snapshot was dropped meanwhile (over :data:`MAX_LOGGED_DELETIONS`) or another was committed, it
    is not made valid. (A forked child writing the whole file was tried: 3 ms of pause, but the
    lists' pages the parent changed while the child ran were copied, up to the lists' size again:
    +1.2 GB at 1M articles, an out-of-memory risk for a worker sized to its index.)
    """

    def __init__(self, index: Index) -> None:
        lists = index.lists()
        assert not index.lists_behind, "a snapshot is taken between batches"
        self.began = time.monotonic()
        self.token = os.urandom(16)
        self.held = [key for key, _ in index.scan_meta(DELETION_PREFIX)]
        if index.logged_deletions is None:  # no valid snapshot yet: log the deletions from now on
            index.logged_deletions = len(self.held)
        self.generation = index.snapshot_generation
        self.next_seq = index.next_seq
        paths = _write(Path(index.path), lists, self.token, _fingerprint(index))
        self.paused = time.monotonic() - self.began
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._publish, args=(paths,), name="lists-snapshot-sync", daemon=True)
        self._thread.start()

    def _publish(self, paths: tuple[Path, Path]) -> None:
        try:
            _publish(paths)
        except BaseException as exc:  # noqa: BLE001 - reported by poll
            self.error = exc

    def poll(self, index: Index, block: bool = False) -> bool | None:
        """None while the file is being synced; then True if the snapshot is written and now valid, False if not."""
        if block:
            self._thread.join()
        if self._thread.is_alive():
            return None
        if self.error is not None:
            log.warning("could not write the in-memory lists' snapshot in %s: %s", index.path, self.error)
            return False
        if index.snapshot_generation != self.generation:
            return False
        _commit(index, self.token, self.held, self.next_seq)
        return True

    def cancel(self) -> None:
        """Wait for the sync (the process is stopping; a sync cannot be interrupted); the snapshot is not made valid."""
        self._thread.join()


class SnapshotSchedule:
    """A background snapshot of ``index``'s lists every ``every`` seconds, for a long-running
    process that calls :meth:`tick` between its batches (the worker's decision stage, ``dedup`` with
    ``--state``)."""

    def __init__(self, index: Index, every: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.index, self.every, self.clock = index, every, clock
        self._last = clock()

    def tick(self) -> tuple[bool, float, float] | None:
        """Start a snapshot if one is due (:meth:`Index.start_snapshot`); returns what
        :meth:`Index.snapshot_done` says of the one that ended since the last call (None: none)."""
        done = self.index.snapshot_done()
        now = self.clock()
        if now - self._last >= self.every and self.index.start_snapshot():
            self._last = now
        return done


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _drop_older_files(index: Index) -> None:
    """Delete the snapshot files of the layouts before this one (never read again: disk only), and
    the unfinished files of writers that were killed."""
    for name in OLDER_FILES:
        (Path(index.path) / name).unlink(missing_ok=True)
    own = f"{SNAPSHOT_FILE}.{os.getpid()}.tmp"  # (this process's may be syncing: lists dropped and loaded again)
    for tmp in Path(index.path).glob(f"{SNAPSHOT_FILE}.*.tmp"):
        if tmp.name != own:
            tmp.unlink(missing_ok=True)
