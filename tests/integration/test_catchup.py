"""stream_dedup.service.catchup.replay against a real broker: every record of the range applied once,
in offset order, and ``expect`` told once, after its first ``expect_after`` records, how many are
left (the decision stage prepares its index's lists for a long replay with it). Then the decision
stage's use of it: a real index told by a replay prepares its lists at once and decides the same."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from conftest import produce

from stream_dedup.config import EngineConfig
from stream_dedup.engine import Deduplicator
from stream_dedup.record import Article
from stream_dedup.service import catchup

pytestmark = pytest.mark.kafka
N = 2_600


@pytest.fixture
def topic(kafka_bootstrap: str, kafka_topics, unique_topic_prefix: str) -> str:
    name = kafka_topics([f"{unique_topic_prefix}-signatures"])[0]
    produce(kafka_bootstrap, name, [(None, f"r{i}".encode(), 0) for i in range(N)])
    return name


def _text(seed: int) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(20_000)}" for _ in range(60))


def _replay(bootstrap: str, topic: str, start: int, end: int, expect_after: int, batch: int = 500):
    applied: list[tuple[int, bytes]] = []
    told: list[tuple[int, int]] = []  # (records applied when told, records left)
    count = catchup.replay({"bootstrap.servers": bootstrap}, topic, 0, start, end, applied.extend, batch=batch,
                           expect=lambda left: told.append((len(applied), left)), expect_after=expect_after)
    return count, applied, told


def test_a_replay_tells_how_many_records_are_left_once(kafka_bootstrap: str, topic: str) -> None:
    count, applied, told = _replay(kafka_bootstrap, topic, 100, N, expect_after=1000)
    assert count == N - 100 and [o for o, _ in applied] == list(range(100, N))
    assert applied[0][1] == b"r100" and applied[-1][1] == f"r{N - 1}".encode()
    assert len(told) == 1
    done, left = told[0]
    assert 1000 <= done < N - 100 and done + left == N - 100  # (told after the chunk that passed 1,000)


def test_a_replay_shorter_than_the_threshold_tells_nothing(kafka_bootstrap: str, topic: str) -> None:
    count, _, told = _replay(kafka_bootstrap, topic, 0, 900, expect_after=1000)
    assert count == 900 and told == []
    count, _, told = _replay(kafka_bootstrap, topic, 0, N, expect_after=N)  # (nothing left when it is reached)
    assert count == N and told == []


def test_an_index_told_by_a_replay_prepares_its_lists_and_decides_the_same(tmp_path: Path, kafka_bootstrap: str,
                                                                          topic: str) -> None:
    """The decision stage passes ``Deduplicator.expect``: a replay of 2,600 records told after its
    first 100 prepares the band table for the rest at once (its size the same after every chunk
    from there), and the decisions are those of an index never told (whose table grows on the way)."""
    texts = {f"r{i}": _text(i % 2_400) for i in range(N)}  # (records 2,400 apart: the same text)

    def run(told: bool, path: Path) -> tuple[list[dict], list[int]]:
        with Deduplicator(EngineConfig(), path) as d:
            events: list[dict] = []
            sizes: list[int] = []  # the band table's size after each chunk, from the hint on (all, untold)

            def expect(left: int) -> None:
                sizes.clear()
                d.expect(left)

            def apply(chunk: list[tuple[int, bytes]]) -> None:
                batch = [Article(id=v.decode(), text=texts[v.decode()]) for _, v in chunk]
                events.extend(x.to_event() for x in d.process_batch(batch, now=1_700_000_000.0))
                sizes.append(d.index.buckets.slot_keys.shape[0])

            catchup.replay({"bootstrap.servers": kafka_bootstrap}, topic, 0, 0, N, apply, batch=100,
                           expect=expect if told else None, expect_after=100)
            return events, sizes

    told_events, told_sizes = run(True, tmp_path / "told")
    events, sizes = run(False, tmp_path / "untold")
    assert told_events == events and any(e["type"] == "duplicate-of" for e in events)
    # (the prepared table is taken by the next adds that need room: within a chunk or two of the hint)
    assert len(told_sizes) > 10 and len(set(told_sizes[2:])) == 1 < len(set(sizes[2:]))
    assert told_sizes[-1] == sizes[-1]  # (the same final table: prepared once instead of grown step by step)
