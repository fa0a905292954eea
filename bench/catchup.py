"""How fast a new owner of the decision stage catches its index up (issue 11: failover, rebalance).

    python bench/catchup.py [--rounds 3] [--repeat 2] [--modes one,untold,batched] [--bootstrap HOST:PORT] [--data FILE]

When ``signatures-0`` moves to a worker whose index is behind (a new pod, a lost volume, a
standby that was down), the worker replays the signatures topic from its index checkpoint up to
the group's committed offset before it decides anything new (:mod:`stream_dedup.service.catchup`).
This benchmark writes the signature records of ``--rounds`` rounds of the shared news stream
(every word suffixed per round, so rounds never match; 3 rounds = 22,293 records) to a fresh
one-partition topic of a real broker, then replays it into fresh indexes with the worker's own
``catchup.replay``, alternating, ``--repeat`` times each:

* ``one by one`` (``one``): ``Decider.apply_only`` per record (the catch-up before this benchmark);
* ``batched, untold`` (``untold``): ``Decider.apply_records`` per fetched chunk (engine batches),
  the index not told how many records are coming (the worker before 44d3542);
* ``batched`` (``batched``): the same, the index told how many are left once 1,000 are applied
  (``catchup.replay(expect=Deduplicator.expect)``: what the worker does).

Prints records/s of each and their ratios, and checks that all leave the same index (every
article's stored decision). Figures only. Uses ``$KAFKA_BOOTSTRAP_SERVERS`` or starts the test
broker with ``scripts/kafka.sh start`` (and stops it afterwards).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from kafka_e2e import DEFAULT_DATA, ensure_broker, round_variant, signature_records  # noqa: E402


def fill_topic(bootstrap: str, admin, topic: str, sigs: list[tuple[str, bytes]]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for aid, value in sigs:
        while True:
            try:
                p.produce(topic, key=aid.encode(), value=value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0


def replay_once(bootstrap: str, topic: str, n: int, batched: bool, ids: list[str], told: bool = True
                ) -> tuple[float, dict]:
    """(records/s, {article id: stored decision}) of one catch-up of ``n`` records into a fresh index."""
    from stream_dedup.config import EngineConfig, ServiceConfig
    from stream_dedup.service import catchup
    from stream_dedup.service.decisions import DecisionStage

    data_dir = tempfile.mkdtemp(prefix="bench-catchup-")
    svc = ServiceConfig(bootstrap_servers=bootstrap, data_dir=data_dir, app_id=f"bench-{uuid.uuid4().hex[:6]}",
                        input_topic="unused", signatures_topic=topic)
    stage = DecisionStage(svc, EngineConfig())
    try:
        d = stage.decider
        if batched:
            apply = d.apply_records
        else:
            def apply(records: list[tuple[int, bytes]]) -> None:
                for offset, value in records:
                    d.apply_only(offset, value)
        t0 = time.perf_counter()
        applied = catchup.replay(stage.client_conf, topic, 0, 0, n, apply,
                                 expect=stage.dedup.expect if batched and told else None)
        rate = applied / (time.perf_counter() - t0)
        assert applied == n, (applied, n)
        decisions = {}
        for aid in ids:
            dec = stage.dedup.decision_of(aid)
            decisions[aid] = None if dec is None else (dec.type, dec.duplicate_of, dec.matched_id)
        return rate, decisions
    finally:
        stage.dedup.close()
        stage.consumer.close()
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--modes", default="one,untold,batched", help="which catch-ups, in this order (see above)")
    args = ap.parse_args()
    names = {"one": "one by one", "untold": "batched, untold", "batched": "batched"}
    modes = [names[m] for m in args.modes.split(",")]
    if not args.data.exists():
        sys.exit(f"{args.data} not found (the shared news stream)")
    lines = [ln.rstrip(b"\n") for ln in args.data.open("rb") if ln.strip()]
    print(f"signature records of {args.rounds} round(s) of {len(lines):,} records ...", flush=True)
    sigs = signature_records([round_variant(line, r) for r in range(args.rounds) for line in lines])
    ids = [aid for aid, _ in sigs]

    bootstrap, started = ensure_broker(args.bootstrap)
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"bench-catchup-{uuid.uuid4().hex[:8]}"
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    try:
        fill_topic(bootstrap, admin, topic, sigs)
        reference = None
        for r in range(args.repeat):
            for mode in (modes if r % 2 == 0 else modes[::-1]):
                rate, decisions = replay_once(bootstrap, topic, len(sigs), mode != "one by one", ids,
                                              told=mode == "batched")
                rates[mode].append(rate)
                print(f"  {mode}: {rate:,.0f} records/s", flush=True)
                if reference is None:
                    reference = decisions
                elif decisions != reference:
                    print(f"  DIFFERENT index after the {mode} catch-up", flush=True)
                    return 1
    finally:
        admin.delete_topics([topic])
        if started:
            import subprocess

            subprocess.run(["bash", str(REPO / "scripts" / "kafka.sh"), "stop"], check=False)
    median = {mode: statistics.median(r) for mode, r in rates.items()}
    labels = {"one by one": "one by one (`apply_only`)", "batched, untold": "batched (`apply_records`), untold",
              "batched": "batched, told how many are left (the worker's)"}
    print(f"\n| catch-up of {len(sigs):,} signature records | records/s (median of {args.repeat}) | runs |")
    print("| --- | ---: | --- |")
    for mode in modes:
        print(f"| {labels[mode]} | {median[mode]:,.0f} | {' / '.join(f'{x:,.0f}' for x in rates[mode])} |")
    for a, b in (("batched", "batched, untold"), ("batched", "one by one"), ("batched, untold", "one by one")):
        if a in median and b in median:
            print(f"| {a} / {b} | {median[a] / median[b]:.2f}× | |")
    print("all leave the same index (every article's stored decision)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
