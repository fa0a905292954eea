"""The persistent index: LSH buckets, permuted SimHash tables and article records in RocksDB.

One RocksDB (via rocksdict, raw bytes) with a one-byte namespace per key family; every integer
is big-endian so that byte order is numeric order and a prefix seek is a range scan:

===========================================  ===========================  ==========================
key                                          value                        what for
===========================================  ===========================  ==========================
``A`` seq(8)                                 article record (below)       verify candidates, replay
``I`` article id (UTF-8)                     seq(8)                       idempotency, ``remove``
``X`` exact hash(16)                         seq(8)                       exact-duplicate fast path
``B`` band(2) rows(4r)                       seq(8) x n, oldest first     LSH bucket
``S`` table(1) permuted simhash(8) seq(8)    empty                        permuted SimHash tables
``T`` first_seen ms(8) seq(8)                empty                        retention (oldest first)
``M`` name                                   bytes                        counters, checkpoints, config
===========================================  ===========================  ==========================

``seq`` is a dense internal number given in arrival order. An LSH bucket is one key whose value
lists its members (at most ``max_bucket`` of them, the newest kept), so all bands of a signature
are looked up in one multi-get; the article's own write appends to the values just read (the
index has a single writer). A SimHash probe is a range scan (prefix seek) over big-endian keys. The article record packs first-seen time, SimHash, set size, exact hash, the MinHash
signature (uint32 BE), the article id and its cluster root id (length-prefixed UTF-8), and the
decision first returned for it as JSON (replayed verbatim when the same id arrives again).

All writes for one article go in one ``WriteBatch``: a crash leaves an article either fully
indexed or absent.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
from rocksdict import BlockBasedOptions, Cache, Options, Rdict, ReadOptions, WriteBatch, WriteOptions

_U64 = struct.Struct(">Q")
_RECORD = struct.Struct(">dQIB16s")  # first_seen, simhash, n_shingles, flags, exact
_LENGTHS = struct.Struct(">HH")      # UTF-8 lengths of the article id and its cluster root id
FLAG_INDEXED = 1  # the record has B/S/X entries (exact duplicates and empty texts do not)
_SCHEMA = 2


@dataclass(frozen=True)
class Lookup:
    lsh: set[int]                   # members of the signature's LSH buckets
    simhash: set[int]               # entries of the SimHash tables agreeing on a key
    buckets: list[bytes | None]     # raw bucket values, appended to by ``insert``


@dataclass(frozen=True)
class StoredArticle:
    seq: int
    article_id: str
    root_id: str
    first_seen: float
    simhash: int
    n_shingles: int
    exact: bytes
    indexed: bool
    minhash: np.ndarray
    decision_json: bytes

    @property
    def decision(self) -> dict:
        """The decision first returned for this article (parsed on demand: only replays need it)."""
        return orjson.loads(self.decision_json)


def _pack_record(first_seen: float, simhash: int, n_shingles: int, indexed: bool, exact: bytes,
                 minhash: np.ndarray, article_id: str, root_id: str, decision: dict) -> bytes:
    aid = article_id.encode("utf-8", "surrogatepass")
    rid = root_id.encode("utf-8", "surrogatepass")
    return b"".join((_RECORD.pack(first_seen, simhash, n_shingles, FLAG_INDEXED if indexed else 0, exact),
                     minhash.astype(">u4").tobytes(), _LENGTHS.pack(len(aid), len(rid)), aid, rid,
                     orjson.dumps(decision)))


def _unpack_record(seq: int, value: bytes, num_perm: int) -> StoredArticle:
    first_seen, simhash, n, flags, exact = _RECORD.unpack_from(value)
    start = _RECORD.size
    end = start + 4 * num_perm
    sig = np.frombuffer(value, dtype=">u4", count=num_perm, offset=start).astype(np.uint32)
    id_len, root_len = _LENGTHS.unpack_from(value, end)
    pos = end + _LENGTHS.size
    article_id = value[pos:pos + id_len].decode("utf-8", "surrogatepass")
    pos += id_len
    root_id = value[pos:pos + root_len].decode("utf-8", "surrogatepass")
    return StoredArticle(seq, article_id, root_id, first_seen, simhash, n, exact,
                         bool(flags & FLAG_INDEXED), sig, value[pos + root_len:])


def _u64(n: int) -> bytes:
    return _U64.pack(n)


class Index:
    """Key layout and primitive operations; the decision logic lives in :mod:`stream_dedup.engine`."""

    def __init__(self, path: str | Path, num_perm: int, settings: dict, max_bucket: int = 256,
                 cache_bytes: int = 64 << 20, durable_writes: bool = True) -> None:
        self.path = Path(path)
        self.max_bucket = max_bucket
        self.path.mkdir(parents=True, exist_ok=True)
        self.num_perm = num_perm
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.increase_parallelism(max(1, min(4, os.cpu_count() or 1)))
        table = BlockBasedOptions()
        table.set_bloom_filter(10, False)          # absent keys (most ids, buckets) skip SST reads
        table.set_block_cache(Cache(cache_bytes))
        table.set_cache_index_and_filter_blocks(True)
        table.set_pin_l0_filter_and_index_blocks_in_cache(True)
        opts.set_block_based_table_factory(table)
        opts.set_memtable_prefix_bloom_ratio(0.1)  # ... and the same in the memtable
        opts.set_memtable_whole_key_filtering(True)
        opts.set_write_buffer_size(64 << 20)
        self.db = Rdict(str(self.path), opts)
        if not durable_writes:
            wo = WriteOptions()
            wo.disable_wal = True
            self.db.set_write_options(wo)
        self._read = ReadOptions()
        self._check_settings(settings)
        self.next_seq = self._get_int(b"Mnext_seq", 0)
        self.count = self._get_int(b"Mcount", 0)

    # -- metadata ---------------------------------------------------------------------------
    def _get_int(self, key: bytes, default: int) -> int:
        v = self.db.get(key)
        return default if v is None else _U64.unpack(v)[0]

    def _check_settings(self, settings: dict) -> None:
        wanted = json.dumps({"schema": _SCHEMA, **settings}, sort_keys=True).encode()
        stored = self.db.get(b"Msettings")
        if stored is None:
            self.db.put(b"Msettings", wanted)
        elif stored != wanted:
            self.db.close()
            raise ValueError(
                f"the index in {self.path} was built with different settings ({stored.decode()}); "
                f"this run needs {wanted.decode()}. Use another --state directory or the original settings.")

    def checkpoint(self, name: str) -> int | None:
        v = self.db.get(b"Mckpt:" + name.encode())
        return None if v is None else _U64.unpack(v)[0]

    # -- reads ------------------------------------------------------------------------------
    def seq_of(self, article_id: str) -> int | None:
        v = self.db.get(b"I" + article_id.encode("utf-8", "surrogatepass"))
        return None if v is None else _U64.unpack(v)[0]

    def exact_match(self, exact: bytes) -> int | None:
        v = self.db.get(b"X" + exact)
        return None if v is None else _U64.unpack(v)[0]

    def article(self, seq: int) -> StoredArticle | None:
        v = self.db.get(b"A" + _u64(seq))
        return None if v is None else _unpack_record(seq, v, self.num_perm)

    def articles(self, seqs: list[int]) -> list[StoredArticle]:
        if not seqs:
            return []
        values = self.db.get([b"A" + _u64(s) for s in seqs])
        return [_unpack_record(s, v, self.num_perm) for s, v in zip(seqs, values, strict=True) if v is not None]

    def lookup(self, band_keys: list[bytes], table_probes: list[tuple[bytes, int, int]],
               max_distance: int = 64) -> Lookup:
        """Members of the signature's LSH buckets, and every SimHash within ``max_distance`` bits.

        ``table_probes`` holds per table ``(seek key, permuted query, key mask)``. A probe scans
        the whole key range (entries agreeing with the query on the masked key bits), with no cap,
        so no fingerprint within ``max_distance`` of the query is ever missed; entries farther
        away are dropped during the scan (Hamming distance is the same on permuted values).
        """
        buckets = self.db.get([b"B" + bk for bk in band_keys]) if band_keys else []
        members = b"".join(v for v in buckets if v)
        lsh = set(np.frombuffer(members, dtype=">u8").tolist()) if members else set()
        sim: set[int] = set()
        if table_probes:
            it = self.db.iter(self._read)
            for seek, query, mask in table_probes:
                prefix = seek[:2]
                want = query & mask
                it.seek(seek)
                while it.valid():
                    key = it.key()
                    if not key.startswith(prefix):
                        break
                    permuted = _U64.unpack_from(key, 2)[0]
                    if permuted & mask != want:
                        break
                    if (permuted ^ query).bit_count() <= max_distance:
                        sim.add(_U64.unpack_from(key, 10)[0])
                    it.next()
            del it
        return Lookup(lsh, sim, buckets)

    # -- writes -----------------------------------------------------------------------------
    def insert(self, *, article_id: str, first_seen: float, simhash: int, n_shingles: int, exact: bytes,
               minhash: np.ndarray, root_id: str, decision: dict, band_keys: list[bytes],
               buckets: list[bytes | None], table_keys: list[bytes], index_sketches: bool,
               checkpoint: tuple[str, int] | None) -> int:
        seq = self.next_seq
        s8 = _u64(seq)
        wb = WriteBatch(raw_mode=True)
        wb.put(b"A" + s8, _pack_record(first_seen, simhash, n_shingles, index_sketches, exact, minhash,
                                       article_id, root_id, decision))
        wb.put(b"I" + article_id.encode("utf-8", "surrogatepass"), s8)
        wb.put(b"T" + _u64(int(first_seen * 1000)) + s8, b"")
        if index_sketches:
            wb.put(b"X" + exact, s8)
            cap = 8 * self.max_bucket
            for bk, members in zip(band_keys, buckets, strict=True):
                wb.put(b"B" + bk, (members + s8)[-cap:] if members else s8)
            for tk in table_keys:
                wb.put(b"S" + tk + s8, b"")
        self.next_seq = seq + 1
        self.count += 1
        wb.put(b"Mnext_seq", _u64(self.next_seq))
        wb.put(b"Mcount", _u64(self.count))
        if checkpoint is not None:
            wb.put(b"Mckpt:" + checkpoint[0].encode(), _u64(checkpoint[1]))
        self.db.write(wb)
        return seq

    def set_checkpoint(self, name: str, offset: int) -> None:
        self.db.put(b"Mckpt:" + name.encode(), _u64(offset))

    def delete(self, art: StoredArticle, band_keys: list[bytes], table_keys: list[bytes]) -> None:
        """Remove every key of ``art`` in one atomic write (bucket values are read, so one at a time)."""
        wb = WriteBatch(raw_mode=True)
        s8 = _u64(art.seq)
        wb.delete(b"A" + s8)
        if self.seq_of(art.article_id) == art.seq:
            wb.delete(b"I" + art.article_id.encode("utf-8", "surrogatepass"))
        wb.delete(b"T" + _u64(int(art.first_seen * 1000)) + s8)
        if art.indexed:
            if self.exact_match(art.exact) == art.seq:
                wb.delete(b"X" + art.exact)
            buckets = self.db.get([b"B" + bk for bk in band_keys]) if band_keys else []
            for bk, members in zip(band_keys, buckets, strict=True):
                if not members:
                    continue
                kept = b"".join(members[i:i + 8] for i in range(0, len(members), 8) if members[i:i + 8] != s8)
                if kept:
                    wb.put(b"B" + bk, kept)
                else:
                    wb.delete(b"B" + bk)
            for tk in table_keys:
                wb.delete(b"S" + tk + s8)
        self.count -= 1
        wb.put(b"Mcount", _u64(self.count))
        self.db.write(wb)

    def oldest(self, before: float, limit: int) -> list[int]:
        """Seqs first seen before ``before`` (epoch seconds), oldest first."""
        it = self.db.iter(self._read)
        it.seek(b"T")
        out: list[int] = []
        bound = int(before * 1000)
        while it.valid() and len(out) < limit:
            key = it.key()
            if key[:1] != b"T" or _U64.unpack_from(key, 1)[0] >= bound:
                break
            out.append(_U64.unpack_from(key, 9)[0])
            it.next()
        del it
        return out

    def disk_bytes(self) -> int:
        total = 0
        for entry in os.scandir(self.path):
            if entry.is_file():
                total += entry.stat().st_size
        return total

    def flush(self) -> None:
        self.db.flush()

    def close(self) -> None:
        self.db.close()
