"""The worker's /metrics merges its own families with each stage process's: a stage's samples win
on the same name and labels, each stage contributes only the families it owns, and merging never
changes the families a stage sent (they are served again until its next snapshot)."""

from __future__ import annotations

from prometheus_client.samples import Sample

from stream_dedup.metrics import Metrics
from stream_dedup.service.stage_process import DECISIONS, FINGERPRINT, StageProcess, merge_families


def _lag(families) -> dict[tuple[str, str], float]:
    [family] = [f for f in families if f.name == "stream_dedup_consumer_lag_messages"]
    return {(s.labels["topic"], s.labels["partition"]): s.value for s in family.samples}


def _stage(kind: str, metrics: Metrics) -> StageProcess:
    proc = StageProcess.__new__(StageProcess)
    proc.kind, proc.conn, proc.status, proc.families = kind, None, {}, list(metrics.registry.collect())
    return proc


def test_two_stages_and_the_worker_merge_without_changing_what_the_stages_sent() -> None:
    own, decisions, stage1 = Metrics(), Metrics(), Metrics()
    own.ready.set(1)
    decisions.consumer_lag.labels("articles.signatures", "0").set(7)
    decisions.index_articles.set(1000)
    decisions.ready.set(0)  # the worker owns readiness: never taken from a stage
    stage1.consumer_lag.labels("articles", "0").set(3)
    stage1.consumer_lag.labels("articles", "1").set(4)
    stage1.order_held.set(5)
    stage1.index_articles.set(0)  # stage 1 has no index: its zero must not hide the decision stage's

    procs = [_stage(DECISIONS, decisions), _stage(FINGERPRINT, stage1)]
    sent = [[list(f.samples) for f in p.families] for p in procs]
    for _ in range(2):  # a second scrape sees the same
        families = list(own.registry.collect())
        for p in procs:
            families = merge_families(families, p.collect())
        assert _lag(families) == {("articles.signatures", "0"): 7, ("articles", "0"): 3, ("articles", "1"): 4}
        value = {f.name: f.samples[0].value for f in families if len(f.samples) == 1}
        assert value["stream_dedup_index_articles"] == 1000
        assert value["stream_dedup_order_buffer_records"] == 5
        assert value["stream_dedup_ready"] == 1
    assert [[list(f.samples) for f in p.families] for p in procs] == sent


def test_a_stage_sample_wins_over_the_workers_own() -> None:
    own, child = Metrics(), Metrics()
    own.consumer_lag.labels("articles", "0").set(1)
    child.consumer_lag.labels("articles", "0").set(9)
    merged = merge_families(list(own.registry.collect()), _stage(FINGERPRINT, child).collect())
    assert _lag(merged) == {("articles", "0"): 9}
    assert all(isinstance(s, Sample) for f in merged for s in f.samples)
