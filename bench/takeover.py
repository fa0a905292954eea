"""Takeover after the decision-stage owner dies, with a warm standby and without (``--standby-follow``).

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092 flock /work/bench.lock .venv/bin/python bench/takeover.py \\
        [--records 30000] [--modes 1,0] [--session-timeout 6]

For each mode (the worker flag ``--standby-follow``): a fresh app (its own topics), two workers with
their own data dirs on a 3-partition input topic, and N records produced as fast as possible
(rounds of the shared stream, every word suffixed per round, so rounds never match: the index
grows by N articles). Once every record's event has been read (``read_committed``), the bench waits
until the standby's ``/readyz`` shows its index at the owner's committed offset (with following;
without it the standby's index stays empty) and SIGKILLs the owner. Then it produces 500 more
records and measures:

* **takeover s**: from the kill until the survivor's ``/readyz`` says its decision stage decides
  (it includes ``--session-timeout``: the dead owner keeps the partition that long);
* **replayed**: signature records the survivor's catch-up replayed first (``index at signature
  offset L, group committed C`` in its log: C - L - 1);
* **new records wait s**: from the kill until the last of the 500 new records has its event;
* **standby CPU s**: the standby worker's CPU (all its processes) from its start to the kill, the
  price of following (its stage 1 consumes its share of the input either way).

Figures only (no asserts).  Uses ``$KAFKA_BOOTSTRAP_SERVERS`` or starts the test broker.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kafka_e2e import DEFAULT_DATA, Reader, Worker, _cleanup, ensure_broker, produce, round_variant  # noqa: E402

TAKEOVER_LINE = re.compile(rb"index at signature offset (\w+), group committed (\w+)")
MORE = 500  # records produced after the kill


def stream(data: Path, n: int) -> list[bytes]:
    """``n`` records: rounds 1, 2, ... of the shared stream (no round matches another)."""
    lines = [ln.rstrip(b"\n") for ln in data.open("rb") if ln.strip()]
    return [round_variant(lines[i % len(lines)], 1 + i // len(lines)) for i in range(n)]


def owner_of(workers: list[Worker], timeout: float = 120.0) -> Worker:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        owners = [w for w in workers if w.readyz().get("decision_state") == "deciding"]
        if len(owners) == 1:
            return owners[0]
        time.sleep(0.3)
    sys.exit("no single decision-stage owner")


def takeover_line(log: Path) -> tuple[int, int] | None:
    """(index offset L, group committed C) of the survivor's last takeover (L = -1: an empty index)."""
    found = TAKEOVER_LINE.findall(log.read_bytes())
    if not found or found[-1][1] == b"None":
        return None
    last, committed = found[-1]
    return (-1 if last == b"None" else int(last)), int(committed)


def run_mode(bootstrap: str, admin, records: list[bytes], more: list[bytes], follow: str,
             session_timeout: str) -> dict:
    from confluent_kafka.admin import NewTopic

    prefix = f"takeover-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(f"{prefix}.articles", num_partitions=3, replication_factor=1)])[
        f"{prefix}.articles"].result(30)
    dirs = [tempfile.mkdtemp(prefix=f"takeover-w{i}-") for i in range(2)]
    flags = ["--standby-follow", follow, "--session-timeout", session_timeout, "--log-level", "INFO"]
    workers = [Worker(bootstrap, prefix, d, flags) for d in dirs]
    reader = Reader(bootstrap, [f"{prefix}.new", f"{prefix}.dup"])
    reader.start()
    try:
        for w in workers:
            w.wait_ready()
        t0 = time.monotonic()
        sent = produce(bootstrap, f"{prefix}.articles", records)
        got = reader.wait_for(set(sent), timeout=1800)
        decided_s = time.monotonic() - t0
        if len(got) < len(sent):
            sys.exit(f"only {len(got)} of {len(sent)} events")
        owner = owner_of(workers)
        standby = next(w for w in workers if w is not owner)
        waited = time.monotonic()
        while follow == "1" and time.monotonic() - waited < 1800:
            committed = owner.readyz().get("committed_offset")  # (read again: the owner may still commit)
            at = standby.readyz().get("index_checkpoint")
            if committed is not None and at is not None and at >= committed - 1:
                break
            time.sleep(0.5)
        follow_lag = time.monotonic() - waited
        standby_cpu = standby.cpu_seconds()
        owner.proc.send_signal(signal.SIGKILL)
        owner.proc.wait(30)
        killed = time.monotonic()
        sent_more = produce(bootstrap, f"{prefix}.articles", more)
        took_over = None
        while time.monotonic() - killed < 1800:
            if standby.readyz().get("decision_state") == "deciding":
                took_over = time.monotonic() - killed
                break
            time.sleep(0.2)
        reader.wait_for(set(sent_more), timeout=1800)
        waited_more = time.monotonic() - killed
        line = takeover_line(Path(standby.log.name))
        return {"mode": follow, "records": len(records), "decided_s": decided_s, "follow_lag_s": follow_lag,
                "standby_cpu_s": standby_cpu, "takeover_s": took_over,
                "replayed": None if line is None else line[1] - line[0] - 1, "new_wait_s": waited_more}
    finally:
        reader.stopped.set()
        for w in workers:
            if w.proc.poll() is None:
                w.stop()
        for d in dirs[1:]:
            shutil.rmtree(d, ignore_errors=True)
        _cleanup(admin, prefix, dirs[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=30_000)
    ap.add_argument("--modes", default="1,0", help="--standby-follow values to run, in order (default: 1,0)")
    ap.add_argument("--session-timeout", default="6", help="the workers' --session-timeout (default: 6 s)")
    ap.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    if not args.data.exists():
        sys.exit(f"{args.data} not found (the shared news stream)")
    print(f"building {args.records:,} + {MORE} records ...", file=sys.stderr, flush=True)
    everything = stream(args.data, args.records + MORE)
    records, more = everything[:args.records], everything[args.records:]
    bootstrap, started = ensure_broker(args.bootstrap)
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    rows = []
    try:
        for mode in args.modes.split(","):
            print(f"--standby-follow {mode}: {args.records:,} records, two workers ...", file=sys.stderr, flush=True)
            rows.append(run_mode(bootstrap, admin, records, more, mode.strip(), args.session_timeout))
    finally:
        if started:
            import subprocess

            subprocess.run(["bash", str(Path(__file__).resolve().parents[1] / "scripts" / "kafka.sh"), "stop"],
                           check=False)
    print("\n| --standby-follow | records in the index | all decided in | standby at the owner's offset after | "
          "standby CPU s | takeover s | replayed | 500 new records wait s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['mode']} | {r['records']:,} | {r['decided_s']:.1f} s | {r['follow_lag_s']:.1f} s | "
              f"{r['standby_cpu_s']:.1f} | {r['takeover_s']:.1f} | "
              f"{'?' if r['replayed'] is None else format(r['replayed'], ',')} | {r['new_wait_s']:.1f} |")
    print(f"(session timeout {args.session_timeout} s: the dead owner keeps signatures-0 that long)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
