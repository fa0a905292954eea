"""stream_dedup.fingerprint_pool: chunks of a file read, parsed and fingerprinted by forked children
(or by the caller) give what parsing and fingerprinting each line in process gives."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from stream_dedup.batch import KeyMaker
from stream_dedup.config import EngineConfig
from stream_dedup.engine import lsh_params
from stream_dedup.fingerprint import Fingerprinter
from stream_dedup.fingerprint_batch import FingerprintBatch
from stream_dedup.fingerprint_pool import REPARSE, FingerprintPool, Parsed, read_chunk
from stream_dedup.record import RecordError, parse_record
from stream_dedup.simhash import PermutedTables

CONFIG = EngineConfig()
FPR = Fingerprinter(CONFIG)
KEYS = KeyMaker((lsh_params(CONFIG).bands, lsh_params(CONFIG).rows), PermutedTables(CONFIG.simhash_k, CONFIG.simhash_blocks))


def _lines(n: int) -> list[bytes]:
    """Records of every kind a file holds: plain, HTML, non-ASCII, with a title, CRLF ends, blank
    lines, lines that do not parse, a last line without its newline."""
    out = []
    for i in range(n):
        kind = i % 9
        if kind == 0:
            out.append(b"\n")
        elif kind == 1:
            out.append(b'{"id": "broken' + str(i).encode() + b'"\n')
        elif kind == 2:
            out.append(json.dumps({"id": f"h{i}", "html": f"<p>story {i % 5} <b>bold</b> words</p>" * 5}).encode()
                       + b"\r\n")
        elif kind == 3:
            out.append(json.dumps({"id": i, "text": f"Ünïcödé störy {i % 4} " * 12, "title": f"t{i}"},
                                  ensure_ascii=False).encode() + b"\n")
        else:
            out.append(json.dumps({"id": f"r{i}", "text": f"story {i % 7} tale {i} " + "the words of it " * 15})
                       .encode() + b"\n")
    out[-1] = out[-1].rstrip(b"\r\n")
    return out


def _expected(lines: list[bytes]) -> tuple[list, list]:
    parsed, fps = [], []
    for raw in lines:
        raw = raw.rstrip(b"\r\n")
        if not raw.strip():
            parsed.append(None)
            continue
        try:
            article = parse_record(raw, CONFIG)
        except RecordError:
            parsed.append(REPARSE)
            continue
        parsed.append(Parsed(article.id, article.title))
        fps.append(FPR.fingerprint_text(article.text, article.is_html))
    return parsed, fps


def _listed(result: tuple) -> tuple[list, list]:
    """A chunk's result with its fingerprints as a list; a batch's keys checked: made (by the child
    or the caller), for its rows, the signatures the records keep, the keys the band table makes."""
    parsed, fps = result
    if isinstance(fps, FingerprintBatch):
        keys, listed = fps.keys, fps.fingerprints()
        assert keys is not None and keys.made_for == KEYS.made_for
        rows = [r for r in range(len(listed)) if r not in fps.whole]  # (a text computed otherwise has no row)
        assert keys.signatures[rows].tolist() == [(listed[r].minhash & 0xFFFF).tolist() for r in rows]
        assert np.array_equal(keys.keys, KEYS(fps).keys) and keys.keys.shape == (len(listed), KEYS.bands)
        assert keys.permuted[rows].tolist() == [KEYS.tables.permute_all(listed[r].simhash) for r in rows]
        fps = listed
    return parsed, fps


@contextmanager
def _pool_over(tmp_path: Path, lines: list[bytes], processes: int = 1) -> Iterator[FingerprintPool]:
    """A pool reading a file of ``lines``, closed at the end."""
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(lines))
    with path.open("rb") as f:
        pool = FingerprintPool(CONFIG, processes, f.fileno(), FPR, KEYS)
        try:
            yield pool
        finally:
            pool.close()


def _chunks(lines: list[bytes], size: int) -> list[tuple[int, list[int]]]:
    out, at = [], 0
    for i in range(0, len(lines), size):
        lengths = [len(line) for line in lines[i:i + size]]
        out.append((at, lengths))
        at += sum(lengths)
    return out


def test_read_chunk_is_parse_and_fingerprint_of_each_line(tmp_path: Path) -> None:
    lines = _lines(120)
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(lines))
    with path.open("rb") as f:
        for (start, lengths), i in zip(_chunks(lines, 50), range(0, 120, 50), strict=True):
            assert _listed(read_chunk(FPR, CONFIG, f.fileno(), start, lengths, KEYS)) == _expected(lines[i:i + 50])
            parsed, batch = read_chunk(FPR, CONFIG, f.fileno(), start, lengths)  # (no keys asked for: none made)
            assert batch.keys is None and (parsed, batch.fingerprints()) == _expected(lines[i:i + 50])


@pytest.mark.parametrize("processes", [1, 2])
def test_a_pool_gives_each_chunk_as_in_process_and_the_caller_works_meanwhile(tmp_path: Path, processes: int) -> None:
    """Chunks come back in any order asked; asking for the first while the rest are queued makes the
    caller do queued chunks itself (``stolen``), with the same results."""
    lines = _lines(1800)
    chunks = _chunks(lines, 200)
    with _pool_over(tmp_path, lines, processes) as pool:
        numbers = [pool.submit(start, lengths) for start, lengths in chunks]
        results = {n: pool.result(n) for n in [numbers[0], numbers[5], *numbers[1:5], *numbers[6:]]}
    assert pool.stolen >= 1 and not pool.broken
    for n, i in zip(numbers, range(0, len(lines), 200), strict=True):
        assert _listed(results[n]) == _expected(lines[i:i + 200])


def test_a_child_that_dies_costs_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lines = _lines(900)
    with _pool_over(tmp_path, lines) as pool:
        numbers = [pool.submit(start, lengths) for start, lengths in _chunks(lines, 100)]
        os.kill(pool._children[0].process.pid, 9)
        with caplog.at_level("WARNING", logger="stream_dedup"):
            results = [pool.result(n) for n in numbers]
    assert pool.broken and sum("a fingerprint process died" in r.getMessage() for r in caplog.records) == 1
    assert [_listed(r) for r in results] == [_expected(lines[i:i + 100]) for i in range(0, 900, 100)]


def test_a_chunk_that_raises_in_a_child_raises_in_the_caller(tmp_path: Path) -> None:
    """A chunk the file no longer holds (cut short after its lines were read): the child reports it,
    the caller reads it itself and gets the error; the child goes on with the next chunk."""
    lines = _lines(300)
    with _pool_over(tmp_path, lines) as pool:
        first = pool.submit(0, [len(line) for line in lines[:100]])
        past = pool.submit(10 ** 9, [100])
        assert _listed(pool.result(first)) == _expected(lines[:100])
        with pytest.raises(OSError, match="the input ended"):
            pool.result(past)
        again = pool.submit(0, [len(line) for line in lines[:100]])
        assert _listed(pool.result(again)) == _expected(lines[:100]) and not pool.broken


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")
def test_children_run_as_batch_work_and_do_not_preempt_the_caller(tmp_path: Path) -> None:
    """The children are SCHED_BATCH: a task sent to an idle child wakes it without preempting the
    deciding process on its core (measured: the sends of a ten-round short-item run blocked
    78-108 ms in all, 15-21 ms with the children so)."""
    lines = _lines(300)
    with _pool_over(tmp_path, lines) as pool:
        number = pool.submit(0, [len(line) for line in lines])
        assert _listed(pool.result(number)) == _expected(lines)
        assert [os.sched_getscheduler(c.process.pid) for c in pool._children] == [os.SCHED_BATCH]
    assert os.sched_getscheduler(0) != os.SCHED_BATCH  # (the caller keeps its own)
