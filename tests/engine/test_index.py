"""stream_dedup.index: key layout, records, buckets, tables, deletes, retention order, persistence."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from rocksdict import Options, Rdict

from stream_dedup import lists_snapshot
from stream_dedup.index import Index, files_bytes
from stream_dedup.index_record import stored_signature
from stream_dedup.key_tables import id_key

SETTINGS = {"num_perm": 8, "seed": 1, "purpose": "index-test"}
BANDING = (2, 3)  # two bands of three rows: signature rows 0-2 and 3-5


def open_index(path: Path, **kw) -> Index:
    return Index(path, num_perm=8, settings=kw.pop("settings", SETTINGS), banding=BANDING, **kw)


def signature(n: int, band0: int | None = None, band1: int | None = None) -> np.ndarray:
    """A signature whose band 0 (and band 1) rows are shared by every call with the same value."""
    sig = np.arange(8, dtype=np.uint32) + 100 * n + 1000
    if band0 is not None:
        sig[0:3] = band0
    if band1 is not None:
        sig[3:6] = band1
    return sig


def keys(index: Index, sig: np.ndarray) -> np.ndarray:
    return index.buckets.keys(stored_signature(sig))


def add(index: Index, n: int, *, sig: np.ndarray | None = None, bucketed: bool = False, permuted: list[int] = (),
        first_seen: float = 0.0, indexed: bool = True, exact: bytes | None = None, simhash: int = 0,
        decision: dict | None = None, checkpoint: tuple[str, int] | None = None, article_id: str | None = None,
        receipt: bytes | None = None) -> int:
    """Insert article ``n`` (filed in its LSH buckets if ``bucketed``, as the engine does when it has shingles)."""
    sig = signature(n) if sig is None else sig
    band_keys = keys(index, sig) if bucketed else np.zeros(0, dtype=np.uint64)
    return index.insert(article_id=article_id or f"a{n}", first_seen=first_seen, simhash=simhash, n_shingles=n + 1,
                        exact=exact or n.to_bytes(16, "big"), minhash=sig,
                        root_id=f"root{n}", decision=decision or {"n": n}, bucket_keys=band_keys,
                        permuted=np.array(list(permuted), dtype=np.uint64), index_sketches=indexed, checkpoint=checkpoint, receipt=receipt)


def key_families(index: Index) -> Counter:
    return index.key_counts()


def test_record_round_trip(tmp_path: Path) -> None:
    with_unicode = "ü-東京-\U0001f600"
    idx = open_index(tmp_path)
    sig = np.array([0, 1, 2**32 - 1, 7, 8, 9, 10, 2**31], dtype=np.uint32)
    decision = {"id": with_unicode, "type": "new", "similarity": None, "methods": ["a", "b"]}
    seq = idx.insert(article_id=with_unicode, first_seen=1234.5678, simhash=2**64 - 1, n_shingles=2**32 - 1,
                     exact=b"\x01" * 16, minhash=sig, root_id="root-ü", decision=decision,
                     bucket_keys=np.zeros(0, dtype=np.uint64), permuted=[], index_sketches=True, checkpoint=None)
    art = idx.article(seq)
    assert art is not None
    assert (art.seq, art.article_id, art.root_id, art.first_seen, art.simhash, art.n_shingles, art.exact,
            art.indexed, art.decision) == (seq, with_unicode, "root-ü", 1234.5678, 2**64 - 1, 2**32 - 1, b"\x01" * 16,
                                           True, decision)
    # the index keeps the low 16 bits of each row (b-bit minwise hashing), big-endian
    assert art.minhash.dtype == np.dtype(">u2") and np.array_equal(art.minhash, sig & 0xFFFF)
    record = idx._points.get(b"A" + seq.to_bytes(8, "big"))
    assert sig.astype(">u2").tobytes() in record and sig.astype(">u4").tobytes() not in record
    assert idx.seq_of(with_unicode) == seq
    assert idx.exact_match(b"\x01" * 16) == seq
    assert idx.article(seq + 1) is None
    idx.close()


def test_seqs_are_dense_and_count(tmp_path: Path) -> None:
    idx = open_index(tmp_path)
    assert [add(idx, n) for n in range(5)] == [0, 1, 2, 3, 4]
    assert idx.count == 5 and idx.next_seq == 5
    assert [a.article_id for a in idx.articles([4, 99, 0])] == ["a4", "a0"]
    assert idx.articles([]) == []
    idx.close()


def test_unindexed_records_have_no_sketch_keys(tmp_path: Path) -> None:
    idx = open_index(tmp_path)
    seq = add(idx, 0, bucketed=True, permuted=[5], indexed=False)
    assert idx.exact_match((0).to_bytes(16, "big")) is None
    assert idx.lookup(keys(idx, signature(0)), [], 256).lsh == set() and idx.buckets.members == 0
    fam = key_families(idx)
    assert idx.lists().exacts.members == 0 and idx.simhash_table.entries == 0
    assert fam[b"A"] == 1 and fam[b"T"] == 1 and idx.lists().ids.members == 1 and idx.seq_of("a0") == seq
    assert fam[b"I"] == fam[b"X"] == 0  # the key tables are in memory only (format 11)
    assert idx.article(seq).indexed is False
    idx.close()


def test_lsh_buckets_collect_members_and_keep_the_newest(tmp_path: Path) -> None:
    idx = open_index(tmp_path, max_bucket=3)
    for n in range(5):
        add(idx, n, sig=signature(n, band0=7), bucketed=True)  # band 0 shared, band 1 each its own
    shared, own = keys(idx, signature(0, band0=7))
    absent = keys(idx, signature(9))[1]
    found = idx.lookup(np.array([shared, own, absent], dtype=np.uint64), [], 256)
    assert found.lsh == {2, 3, 4, 0}  # shared bucket capped to the newest 3; `own` holds 0
    assert idx.buckets.lookup(np.array([shared, absent, own], dtype=np.uint64)).tolist() == [4, 3, 2, 0]
    assert idx.lookup(np.zeros(0, dtype=np.uint64), [], 256).lsh == set()
    assert key_families(idx)[b"B"] == 0  # nothing of the buckets is in RocksDB
    idx.close()


def test_insert_takes_keys_of_any_integer_type(tmp_path: Path) -> None:
    """Index.insert (the library's) files bucket keys and permuted SimHashes given as lists, as
    big-endian arrays or as strided views, as it files the engine's C-ordered uint64 arrays (the
    filing kernel reads them unchecked: BatchView.insert converts them first)."""
    values = [(1 << 62) + 5, 7]
    filed = []
    variants = (lambda v: np.array(v, dtype=np.uint64), list, lambda v: np.array(v, dtype=">u8"),
                lambda v: np.repeat(np.array(v, dtype=np.uint64), 2)[::2])
    for n, convert in enumerate(variants):
        idx = open_index(tmp_path / f"s{n}")
        band_keys = keys(idx, signature(0))
        idx.insert(article_id="a0", first_seen=0.0, simhash=0, n_shingles=1, exact=bytes(16), minhash=signature(0),
                   root_id="a0", decision={"n": 0}, bucket_keys=convert(band_keys.tolist()),
                   permuted=convert(values), index_sketches=True, checkpoint=None)
        filed.append((idx.buckets.as_dict(), idx.lists().simhash.as_set()))
        idx.close()
    assert filed[0] == filed[1] == filed[2] == filed[3] and filed[0][0] and len(filed[0][1]) == 2


def test_simhash_probe_reads_the_entries_sharing_the_key_bits_within_the_distance(tmp_path: Path) -> None:
    idx = open_index(tmp_path)
    low = (1 << (64 - idx.tables.key_bits[0])) - 1  # the bits outside table 0's key
    base = 0x1234_5678_9ABC_DEF0 & ~low
    values = {0: base | 1, 1: base | low, 2: base ^ (1 << 63), 3: base}
    for n, v in values.items():
        add(idx, n, permuted=[v, v ^ (2**64 - 1)])  # tables 0 and 1
    query = base | 0b110  # 3 bits from value 0, 2 from value 3, (key bits - 2) from value 1; value 2: another key

    def probe(*permuted: int, distance: int = 64) -> set[int]:
        return idx.lookup([], np.array(permuted, dtype=np.uint64), distance).simhash

    assert probe(query) == {0, 1, 3}
    assert probe(query, distance=3) == {0, 3}
    assert probe(query, distance=2) == {3}
    assert probe(query, distance=1) == set()
    # table 1 holds the complements: the query's key is not there; value 2's key in table 0 is
    assert probe(query ^ (1 << 63), query) == {2}
    assert probe(base ^ (2**64 - 1), distance=0) == set()  # a value of table 1 is not found in table 0
    assert probe(0, base ^ (2**64 - 1), distance=0) == {3}
    idx.close()


def test_delete_removes_every_key_of_the_article(tmp_path: Path) -> None:
    idx = open_index(tmp_path)
    add(idx, 0, sig=signature(0, band0=7), bucketed=True, permuted=[10], first_seen=5.0)
    add(idx, 1, sig=signature(1, band0=7), bucketed=True, permuted=[11], first_seen=6.0)
    before = key_families(idx)
    assert (idx.lists().ids.members, idx.lists().exacts.members) == (2, 2)
    art = idx.article(0)
    idx.delete(art, keys(idx, art.minhash), [10])
    after = key_families(idx)
    assert before - after == Counter({b"A": 1, b"T": 1})
    assert idx.lists().ids.as_dict() == {id_key("a1"): [1]} and idx.lists().exacts.as_dict() == {1: [1]}
    assert idx.simhash_table.as_set() == {(0, 11, 1)}
    assert idx.count == 1
    assert idx.seq_of("a0") is None and idx.article(0) is None and idx.exact_match((0).to_bytes(16, "big")) is None
    shared, own = keys(idx, signature(0, band0=7))
    found = idx.lookup(np.array([shared, own], dtype=np.uint64), np.array([11], dtype=np.uint64), 256)
    assert found.lsh == {1} and found.simhash == {1}
    assert idx.buckets.lookup(np.array([own], dtype=np.uint64)).size == 0 and idx.buckets.members == 2
    assert idx.oldest(100.0, 10) == [1]
    idx.close()


def test_delete_keeps_keys_now_owned_by_another_article(tmp_path: Path) -> None:
    idx = open_index(tmp_path)
    add(idx, 0, article_id="same", exact=b"E" * 16)
    old = idx.article(0)
    add(idx, 1, article_id="same", exact=b"E" * 16)  # id and exact hash now point to seq 1
    idx.delete(old, np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64))
    assert idx.seq_of("same") == 1 and idx.exact_match(b"E" * 16) == 1
    idx.close()


def test_oldest_in_first_seen_order(tmp_path: Path) -> None:
    idx = open_index(tmp_path)
    times = [50.0, 10.0, 30.5, 10.0, 99.999]
    for n, t in enumerate(times):
        add(idx, n, first_seen=t)
    assert idx.oldest(31.0, 100) == [1, 3, 2]
    assert idx.oldest(31.0, 2) == [1, 3]
    assert idx.oldest(10.0, 100) == []           # strictly before
    assert idx.oldest(1e9, 100) == [1, 3, 2, 0, 4]
    idx.close()


def test_checkpoints(tmp_path: Path) -> None:
    idx = open_index(tmp_path)
    assert idx.checkpoint("sig") is None
    add(idx, 0, checkpoint=("sig", 41))
    assert idx.checkpoint("sig") == 41
    idx.mark(("sig", 2**40))
    idx.mark(("other", 0))
    assert idx.checkpoint("sig") == 2**40 and idx.checkpoint("other") == 0
    idx.close()
    idx = open_index(tmp_path)
    assert idx.checkpoint("sig") == 2**40
    idx.close()


def test_state_survives_reopen(tmp_path: Path) -> None:
    idx = open_index(tmp_path, max_bucket=4)
    for n in range(7):
        add(idx, n, sig=signature(n, band0=7, band1=n % 2), bucketed=True)
    add(idx, 7, sig=signature(7, band0=7), bucketed=True, indexed=False)  # not in the buckets
    idx.delete(idx.article(5), keys(idx, idx.article(5).minhash), [])
    (shared, even), odd = keys(idx, signature(0, band0=7, band1=0)), keys(idx, signature(1, band0=7, band1=1))[1]
    every = np.array([shared, even, odd], dtype=np.uint64)
    live = [idx.buckets.lookup(every[i:i + 1]).tolist() for i in range(len(every))]
    assert live == [[6, 4, 3], [6, 4, 2, 0], [3, 1]]  # newest first; 5 deleted; the shared one capped at 4
    idx.close()
    shutil.copytree(tmp_path, tmp_path.parent / "copy")
    idx = open_index(tmp_path, max_bucket=4)  # the buckets as the close left them (its snapshot)
    assert idx.count == 7 and idx.next_seq == 8
    assert [idx.buckets.lookup(every[i:i + 1]).tolist() for i in range(len(every))] == live
    assert add(idx, 8, sig=signature(8, band0=7), bucketed=True) == 8
    assert idx.lookup(every[:1], [], 256).lsh == {8, 6, 4, 3}
    assert idx.article(2).decision == {"n": 2}
    idx.close()
    (tmp_path.parent / "copy" / lists_snapshot.SNAPSHOT_FILE).unlink()
    idx = open_index(tmp_path.parent / "copy", max_bucket=4)  # no snapshot: rebuilt from the records
    # the shared bucket gets back 2, which the cap had dropped before 5 was deleted: one more candidate
    assert [idx.buckets.lookup(every[i:i + 1]).tolist() for i in range(len(every))] == [[6, 4, 3, 2], [6, 4, 2, 0],
                                                                                         [3, 1]]
    idx.close()


def test_settings_mismatch_is_refused_and_releases_the_db(tmp_path: Path) -> None:
    idx = open_index(tmp_path)
    add(idx, 0)
    idx.close()
    with pytest.raises(ValueError, match="different settings"):
        open_index(tmp_path, settings={**SETTINGS, "num_perm": 16})
    idx = open_index(tmp_path)  # the failed open closed the database again
    assert idx.count == 1
    idx.close()


def test_an_index_in_the_old_format_is_refused_in_one_line(tmp_path: Path) -> None:
    idx = open_index(tmp_path)
    add(idx, 0)
    stored = json.loads(idx.db.get(b"Msettings"))
    idx.db.put(b"Msettings", json.dumps({**stored, "schema": 6}, sort_keys=True).encode())  # as format 6 wrote it
    idx.close()
    with pytest.raises(ValueError, match=r"is in format 6 .*reads format 11 \(16-bit signatures\).*Rebuild") as err:
        open_index(tmp_path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("old", [7, 8, 9, 10])
def test_an_index_of_format_7_to_10_drops_what_moved_to_memory_and_opens(tmp_path: Path, old: int) -> None:
    idx = open_index(tmp_path)
    fp = idx.tables.permute_array(0xABCD_0123_4567_89EF)
    add(idx, 0, sig=signature(0, band0=7), bucketed=True, permuted=fp.tolist(), simhash=0xABCD_0123_4567_89EF)
    add(idx, 1, article_id="copy", exact=(0).to_bytes(16, "big"), indexed=False)  # an exact copy: no X key
    stored = json.loads(idx.db.get(b"Msettings"))
    idx.db.put(b"Msettings", json.dumps({**stored, "schema": old}, sort_keys=True).encode())
    # the id and exact-hash keys as formats 10 and older kept them (seqs of 4 bytes; 8 before 10), and a
    # lists' snapshot token with a deletion log entry of format 10's layout (no id key in it)
    width = 4 if old == 10 else 8
    for key, seq in ((b"I" + bytes(8) + b"a0", 0), (b"I" + bytes(8) + b"copy", 1), (b"X" + bytes(16), 0)):
        idx._points.put(key, seq.to_bytes(width, "big"))
    idx.db.put(lists_snapshot.TOKEN_KEY, b"t" * 16)
    idx.db.put(lists_snapshot.DELETION_PREFIX + bytes(16), b"h" * 40)
    if old == 7:
        idx._points.put(b"B\x00\x00" + bytes(6), (0).to_bytes(4, "big"))  # a bucket as format 7 kept it
    for family in ("passages", "simhash"):  # a passage list as formats 6-8 kept it, a SimHash entry as 5-9 did
        idx.db.create_column_family(family, Options(raw_mode=True)).put(bytes(17), b"")
    idx.close()
    assert {"passages", "simhash"} <= set(Rdict.list_cf(str(tmp_path), Options(raw_mode=True)))
    idx = open_index(tmp_path)
    families = key_families(idx)
    assert families[b"B"] == families[b"I"] == families[b"X"] == 0
    assert json.loads(idx.db.get(b"Msettings"))["schema"] == 11
    assert idx.db.get(lists_snapshot.TOKEN_KEY) is None and not list(idx.scan_meta(lists_snapshot.DELETION_PREFIX))
    found = idx.lookup(keys(idx, signature(0, band0=7))[:1], fp, 0)  # rebuilt from the record
    assert (found.lsh, found.simhash, found.candidates()) == ({0}, {0}, [0])
    # so are the key tables: both ids, the indexed article's exact hash only
    assert idx.seq_of("a0") == 0 and idx.seq_of("copy") == 1 and idx.exact_match(bytes(16)) == 0
    assert idx.exact_match((1).to_bytes(16, "big")) is None and idx.lists().exacts.members == 1
    idx.close()
    assert not {"passages", "simhash"} & set(Rdict.list_cf(str(tmp_path), Options(raw_mode=True)))
    assert open_index(tmp_path).count == 2


def test_seqs_beyond_what_a_bucket_can_name_are_refused(tmp_path: Path) -> None:
    idx = open_index(tmp_path)
    idx.next_seq = 2**32 - 1
    assert add(idx, 0, bucketed=True) == 2**32 - 1   # the last one a bucket can hold
    assert idx.lookup(keys(idx, signature(0)), np.zeros(0, dtype=np.uint64), 256).lsh == {2**32 - 1}
    with pytest.raises(OverflowError, match="rebuild it"):
        add(idx, 1)
    idx.close()


def test_non_durable_writes_and_disk_bytes(tmp_path: Path) -> None:
    idx = open_index(tmp_path, durable_writes=False)
    for n in range(20):
        add(idx, n)
    idx.flush()
    assert idx.disk_bytes() > 0
    idx.close()
    idx = open_index(tmp_path)
    assert idx.count == 20
    idx.close()


def test_a_file_deleted_while_the_directory_is_counted_counts_nothing(tmp_path: Path) -> None:
    """RocksDB deletes a compaction's inputs at any time: ``disk_bytes`` (the ``dedup`` stats line,
    the worker's gauge) counts a file listed and then gone as 0 instead of raising (a 1M run died of
    it at a stats line). Real files: the directory is listed, then one of them is deleted."""
    import os

    (tmp_path / "000012.sst").write_bytes(b"x" * 1000)
    (tmp_path / "000013.sst").write_bytes(b"y" * 300)
    (tmp_path / lists_snapshot.SNAPSHOT_FILE).write_bytes(b"z" * 50)
    with os.scandir(tmp_path) as listed:
        entries = list(listed)
    (tmp_path / "000012.sst").unlink()  # (a compaction finished between the listing and the stat)
    assert files_bytes(entries, snapshot=False) == 300
    assert files_bytes(entries, snapshot=True) == 50
    with pytest.raises(FileNotFoundError):  # (what the sum of stats did)
        sum(e.stat().st_size for e in entries if e.is_file())


def test_receipts_are_stored_with_the_article_and_alone(tmp_path: Path) -> None:
    idx = open_index(tmp_path)
    token = bytes(range(16))
    assert idx.receipt(token) is None
    add(idx, 0, checkpoint=("sig", 7), receipt=token)
    assert idx.receipt(token) == (7, False)
    assert idx.checkpoint("sig") == 7
    other = bytes(range(1, 17))
    idx.mark(("sig", 9), other, replayed=True)
    assert idx.receipt(other) == (9, True) and idx.checkpoint("sig") == 9
    idx.close()
    reopened = open_index(tmp_path)
    assert reopened.receipt(token) == (7, False) and reopened.receipt(other) == (9, True)
