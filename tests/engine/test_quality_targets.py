"""The quality targets of the engine, on the whole shared stream, with the default configuration.

Targets: precision >= 0.995, recall >= 0.98, and recall >= 0.95 for every variant kind, scored
as in ../shared/data/README.md (a "duplicate-of X" decision is right when X is in the record's
truth cluster and an earlier record of that cluster exists).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from stream_dedup.config import EngineConfig
from stream_dedup.engine import Deduplicator
from stream_dedup.record import article_from_object

ROOT = Path(__file__).resolve().parents[2]


def _score():
    spec = importlib.util.spec_from_file_location("bench_quality", ROOT / "bench" / "quality.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.score


def test_default_configuration_meets_the_quality_targets(tmp_path: Path, shared_stream) -> None:
    records, truth = shared_stream(100_000)  # all of it
    assert len(records) == len(truth) > 7000
    config = EngineConfig()
    decisions = {}
    with Deduplicator(config, tmp_path) as dedup:
        for rec in records:
            article = article_from_object(rec, config)
            decisions[article.id] = dedup.process(article).to_event()
    s = _score()(None, truth, decisions)
    assert s["true_duplicates"] > 3000
    assert s["precision"] >= 0.995, s["false_positives"][:10]
    assert s["recall"] >= 0.98
    for kind, (right, true) in s["per_kind"].items():
        assert right / true >= 0.95, (kind, right, true)
