"""End to end on the shared news stream: a 3-partition articles topic, one worker process,
both output topics read back and compared with the embedded engine on the same records."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

from stream_dedup.service.serialization import SignatureRecord

pytestmark = [pytest.mark.kafka, pytest.mark.shared_data]

N = int(os.environ.get("STREAM_DEDUP_E2E_RECORDS", "1500"))
PARTITIONS = 3


def score(decisions: dict[str, tuple[str, str | None]], order: list[str], cluster: dict[str, str]):
    """Precision / recall of duplicate decisions, per the shared data README."""
    seen_clusters: set[str] = set()
    true_dups = right = claimed = 0
    for aid in order:
        is_dup = cluster[aid] in seen_clusters
        seen_clusters.add(cluster[aid])
        true_dups += is_dup
        kind, of = decisions[aid]
        if kind == "duplicate-of":
            claimed += 1
            right += is_dup and cluster.get(of) == cluster[aid]
    return (right / claimed if claimed else 1.0), (right / true_dups if true_dups else 1.0)


@pytest.mark.parametrize("stage1_client", ["confluent", "faust"])
def test_news_stream_end_to_end_matches_embedded_engine(kio, kafka_topics, worker_topics, start_worker,
                                                        tmp_path, stage1_client):
    from stream_dedup.config import EngineConfig
    from stream_dedup.engine import Deduplicator
    from stream_dedup.record import parse_record

    lines, truth = kio.load_news(N)
    ids = [json.loads(line)["id"] for line in lines]
    cluster = {row["id"]: row["cluster"] for row in truth}
    t = worker_topics
    kafka_topics([t.input], partitions=PARTITIONS)
    w = start_worker(t, stage1_client=stage1_client)
    w.wait_ready(timeout=90)
    kio.produce(t.input, [(aid.encode(), line, None) for aid, line in zip(ids, lines, strict=True)])

    out = kio.consume_all([t.new, t.duplicates], until=lambda rs: len({r.key for r in rs}) >= len(ids),
                          timeout=300, idle=2.0)
    events = defaultdict(list)
    for r in out:
        events[r.key.decode()].append(r.json())
    missing = set(ids) - set(events)
    assert not missing, f"{len(missing)} ids without an event, e.g. {sorted(missing)[:5]}\n{w.log_tail()}"
    assert set(events) == set(ids)
    worker = {}
    for aid, evs in events.items():
        assert len({(e["type"], e.get("duplicate_of")) for e in evs}) == 1, evs
        worker[aid] = (evs[0]["type"], evs[0].get("duplicate_of"))
        assert worker[aid][1] != aid

    # the order in which the decision stage saw the articles = the signatures topic's order
    sigs = kio.consume_all([t.signatures], until=lambda rs: len(rs) >= len(ids), timeout=60, idle=0.5)
    decided_order = []
    for r in sigs:
        aid = SignatureRecord.decode(r.value).article_id
        if aid not in decided_order:
            decided_order.append(aid)
    assert set(decided_order) == set(ids)

    engine_config = EngineConfig()
    by_id = {aid: parse_record(line, engine_config) for aid, line in zip(ids, lines, strict=True)}

    def embedded(order: list[str], name: str) -> dict[str, tuple[str, str | None]]:
        with Deduplicator(engine_config, tmp_path / name) as d:
            return {aid: (dec.type, dec.duplicate_of)
                    for aid in order for dec in [d.process(by_id[aid])]}

    # 1) same order as the worker's decision stage -> the very same decisions
    same_order = embedded(decided_order, "embedded-same-order")
    diff = [(aid, worker[aid], same_order[aid]) for aid in decided_order if worker[aid] != same_order[aid]]
    assert len(diff) <= len(ids) // 500, f"{len(diff)} decisions differ from the embedded engine: {diff[:5]}"

    # 2) quality vs the embedded engine on the original arrival order (what `dedup` does)
    file_order = embedded(ids, "embedded-file-order")
    wp, wr = score(worker, decided_order, cluster)
    ep, er = score(file_order, ids, cluster)
    print(f"\nworker  precision={wp:.4f} recall={wr:.4f} (n={len(ids)}, {PARTITIONS} partitions)"
          f"\nembedded precision={ep:.4f} recall={er:.4f} (file order)")
    assert wp >= ep - 0.01 and wr >= er - 0.01
