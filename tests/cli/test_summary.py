"""The ``dedup`` summary of a batch counted at once (Summary.count_events, on the events the
compiled calls write: Deduplicator.process_batch_events) is the summary of its decisions counted
one by one (Summary.count on process_batch's decisions): new, duplicates by method, repeated ids,
clusters, titles and similarities, also where the title and similarity caps fall inside a batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream_dedup.cli import summary as summary_module
from stream_dedup.cli.summary import Summary
from stream_dedup.config import EngineConfig
from stream_dedup.engine import Deduplicator
from stream_dedup.record import Article, parse_record

from .conftest import SAMPLE


def _articles() -> list[Article]:
    config = EngineConfig()
    return [parse_record(line, config) for line in SAMPLE.read_bytes().splitlines() if line.strip()]


@pytest.mark.parametrize("caps", [None, (150, 60), (100, 100)])
def test_count_events_is_count_of_each_decision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                caps: tuple[int, int] | None) -> None:
    if caps:
        monkeypatch.setattr(summary_module, "MAX_TITLES", caps[0])
        monkeypatch.setattr(summary_module, "MAX_SIMILARITIES", caps[1])
    articles = _articles()
    # batches of 64 new articles after ids seen before (replays: Python's decisions)
    batches = [articles[max(0, i - 7):i] + articles[i:i + 64] for i in range(0, len(articles), 64)]
    batches.append(articles[:20] + articles[-30:])
    one, events = Deduplicator(state_dir=tmp_path / "one"), Deduplicator(state_dir=tmp_path / "events")
    by_decision, at_once = Summary(), Summary()
    written = python = 0
    try:
        for batch in batches:
            decisions = one.process_batch(batch, now=1.0)
            for article, d in zip(batch, decisions, strict=True):
                by_decision.count(article, d)
            eb = events.process_batch_events(batch, now=1.0)
            assert [item if type(item) is str else item.event_json() for item in eb.items] \
                == [d.event_json() for d in decisions]
            at_once.count_events(eb, batch)
            written += sum(type(item) is str for item in eb.items)
            python += sum(type(item) is not str for item in eb.items)
    finally:
        one.close()
        events.close()
    assert written > 300 and python > 50  # (both kinds of items, in the same batches)
    assert at_once == by_decision
    assert at_once.duplicates > 100 and at_once.repeated_ids == 50 + 7 * (len(batches) - 2)
