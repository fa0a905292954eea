"""CPU per record of consuming a topic: a Faust agent, aiokafka alone, confluent-kafka alone.

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092 .venv/bin/python bench/consume_cost.py [--records 30000] [--repeat 2]

Stage 1 of the worker consumes articles with Faust. This measures what that consumption costs
before any work is done on the records. It makes a 3-partition topic with ``--records`` records
of ~4.5 KB (a dev-stream-sized article) and reads it from the start ``--repeat`` times with each
consumer, each run a fresh process in a fresh group:

* ``faust``: an agent as stage 1 has it (``noack_take(200, within=0.005)``, each event acked,
  the worker's lean Monitor);
* ``aiokafka``: ``AIOKafkaConsumer.getmany(max_records=500)``, the client under Faust;
* ``confluent``: ``Consumer.consume(200)`` (librdkafka), the client of the decision stage.

The figure is the process's CPU time (``getrusage``, every thread) from the first record to the
last, divided by the records. Figures only. Uses ``$KAFKA_BOOTSTRAP_SERVERS`` or starts the test
broker with ``scripts/kafka.sh start`` (and stops it afterwards), as ``kafka_e2e.py`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from kafka_e2e import ensure_broker, produce  # noqa: E402

CONSUMERS = ("faust", "aiokafka", "confluent")


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def report(name: str, n: int, c0: float, t0: float) -> None:
    print(json.dumps({"consumer": name, "us_per_record": (cpu() - c0) / n * 1e6, "seconds": time.time() - t0}),
          flush=True)


def make_topic(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)
    text = "word " * 900
    produce(bootstrap, topic, [json.dumps({"id": f"r{i}", "text": text}).encode() for i in range(n)])


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    for fut in AdminClient({"bootstrap.servers": bootstrap}).delete_topics([topic], operation_timeout=30).values():
        try:
            fut.result()
        except Exception:  # noqa: BLE001 - best effort, as kafka_e2e's cleanup
            pass


def run_confluent(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    seen, c0, t0 = 0, 0.0, 0.0
    while seen < n:
        for m in c.consume(200, 0.05):
            if m.error() is None:
                if not seen:
                    c0, t0 = cpu(), time.time()
                m.value()
                seen += 1
    report("confluent", n, c0, t0)
    c.close()


def run_aiokafka(bootstrap: str, topic: str, n: int) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer

    async def main() -> None:
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=uuid.uuid4().hex,
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        seen, c0, t0 = 0, 0.0, 0.0
        while seen < n:
            for msgs in (await c.getmany(timeout_ms=100, max_records=500)).values():
                if msgs and not seen:
                    c0, t0 = cpu(), time.time()
                for m in msgs:
                    _ = m.value
                seen += len(msgs)
        report("aiokafka", n, c0, t0)
        await c.stop()

    asyncio.run(main())


def run_faust(bootstrap: str, topic: str, n: int) -> None:
    import tempfile

    import faust

    sys.path.insert(0, str(REPO))
    from stream_dedup.service.faust_app import _lean_monitor_class

    app = faust.App(uuid.uuid4().hex, broker=f"kafka://{bootstrap}", value_serializer="raw", key_serializer="raw",
                    store="memory://", web_enabled=False, autodiscover=False, consumer_auto_offset_reset="earliest",
                    topic_disable_leader=True, topic_allow_declare=False, stream_wait_empty=True,
                    Monitor=_lean_monitor_class(), datadir=tempfile.mkdtemp(prefix="consume-cost-"))
    state = {"seen": 0, "c0": 0.0, "t0": 0.0}

    @app.agent(app.topic(topic))
    async def agent(stream) -> None:  # noqa: ANN001 - a Faust stream
        async for events in stream.noack_take(200, within=0.005):
            if not state["seen"]:
                state["c0"], state["t0"] = cpu(), time.time()
            for ev in events:
                _ = ev.value
                await stream.ack(ev)
            state["seen"] += len(events)
            if state["seen"] >= n:
                report("faust", n, state["c0"], state["t0"])
                os._exit(0)  # the figure is printed; Faust's shutdown is not measured

    sys.argv = [sys.argv[0], "worker", "-l", "warn"]
    app.main()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=30_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    ap.add_argument("--run", choices=CONSUMERS, help=argparse.SUPPRESS)  # one consumer, in this process
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        {"faust": run_faust, "aiokafka": run_aiokafka, "confluent": run_confluent}[args.run](
            args.bootstrap, args.topic, args.records)
        return 0
    bootstrap, started = ensure_broker(args.bootstrap)
    topic = f"consume-cost-{uuid.uuid4().hex[:8]}"
    print(f"producing {args.records} records of ~4.5 KB to {topic} (3 partitions) ...", flush=True)
    results: dict[str, list[float]] = {c: [] for c in CONSUMERS}
    try:
        make_topic(bootstrap, topic, args.records)
        for _ in range(args.repeat):
            for consumer in CONSUMERS:
                out = subprocess.run([sys.executable, __file__, "--run", consumer, "--topic", topic, "--records",
                                      str(args.records), "--bootstrap", bootstrap],
                                     capture_output=True, text=True, timeout=600)
                # Faust's worker sends stdout through its logger: the figure may sit inside a log line
                found = re.findall(r'\{"consumer": .*?\}', out.stdout + out.stderr)
                if not found:
                    sys.exit(f"{consumer} printed no figure:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
                results[consumer].append(json.loads(found[-1])["us_per_record"])
    finally:
        delete_topic(bootstrap, topic)
        if started:
            subprocess.run(["bash", str(REPO / "scripts" / "kafka.sh"), "stop"], capture_output=True)
    print()
    print("| consumer | CPU µs per record, each run |")
    print("| --- | --- |")
    for consumer, values in results.items():
        print(f"| {consumer} | {', '.join(f'{v:.1f}' for v in values)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
