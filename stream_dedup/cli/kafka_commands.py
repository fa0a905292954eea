"""The Kafka subcommands: ``worker`` (the Faust stream processor, :mod:`stream_dedup.service`),
``produce`` (a JSONL file to a topic) and ``tail`` (the messages of the output topics as JSON lines),
with the confluent-kafka clients that produce and tail share: imported only when they run."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from ..config import KAFKA_CLIENT_FIELDS, EngineConfig, ServiceConfig, add_arguments, env_name, load
from .errors import RunError, UsageError


def configure_worker_parser(p: argparse.ArgumentParser) -> None:
    """The arguments of ``worker`` (every worker and engine setting), and :func:`run_worker_command`."""
    add_arguments(p, ServiceConfig)
    add_arguments(p, EngineConfig)
    p.set_defaults(func=run_worker_command)


def configure_produce_parser(p: argparse.ArgumentParser) -> None:
    """The arguments of ``produce``, and :func:`run_produce` as the function that runs it."""
    p.add_argument("input", help="JSONL file, or - for stdin")
    p.add_argument("--topic", help="topic (default: the input topic, --input-topic)")
    p.add_argument("--input-topic", dest="input_topic", default=None, metavar="INPUT_TOPIC",
                   help="the worker's input topic, used when --topic is not given [env STREAM_DEDUP_INPUT_TOPIC] "
                        "(default: 'articles')")
    p.add_argument("--partitions", type=int, default=None,
                   help="partitions of the topic when it has to be created (default: 1); an existing topic "
                        "is left as it is")
    p.add_argument("--key-field", default="id", help="JSON field used as the message key (default: %(default)s)")
    p.add_argument("--rate", type=float, default=0.0, help="messages per second (default: as fast as possible)")
    p.add_argument("--limit", type=int, default=0, help="stop after this many messages (default: all)")
    p.add_argument("--connect-timeout", type=float, default=5.0,
                   help="seconds to wait for the broker before giving up (default: %(default)s)")
    add_arguments(p, ServiceConfig, only=KAFKA_CLIENT_FIELDS)
    p.set_defaults(func=run_produce)


def configure_tail_parser(p: argparse.ArgumentParser) -> None:
    """The arguments of ``tail``, and :func:`run_tail` as the function that runs it."""
    p.add_argument("topics", nargs="*", help="topics (default: the new, duplicates and DLQ topics)")
    for name in ("new_topic", "duplicates_topic", "dlq_topic"):
        f = ServiceConfig.__dataclass_fields__[name]
        p.add_argument("--" + name.replace("_", "-"), dest=name, default=None, metavar=name.upper(),
                       help=f"{f.metadata['help']} Read when no TOPIC is given. [env {env_name(f)}] "
                            f"(default: {f.default!r})")
    p.add_argument("--from-beginning", action="store_true", help="read the topics from their first message")
    p.add_argument("--max-messages", type=int, default=0, help="stop after this many messages (default: no limit)")
    p.add_argument("--idle-timeout", type=float, default=0.0,
                   help="stop after this many seconds without messages (default: never)")
    p.add_argument("--connect-timeout", type=float, default=5.0,
                   help="seconds to wait for the broker before giving up (default: %(default)s)")
    add_arguments(p, ServiceConfig, only=KAFKA_CLIENT_FIELDS)
    p.set_defaults(func=run_tail)


def _quiet_logger() -> logging.Logger:
    """A logger that drops librdkafka's per-retry connection lines (we print one line of our own)."""
    quiet = logging.getLogger("stream_dedup.kafka.connect")
    quiet.propagate = False
    quiet.setLevel(logging.CRITICAL + 1)
    return quiet


def _kafka_admin(service: ServiceConfig, timeout: float):
    """An AdminClient checked to reach the brokers within ``timeout`` seconds (else one line, exit 1)."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    from ..service.kafka_config import confluent_config

    if timeout <= 0:
        raise UsageError(f"--connect-timeout {timeout}: must be > 0")
    conf = confluent_config(service, **{"socket.connection.setup.timeout.ms": max(1000, int(timeout * 1000)),
                                        "log.connection.close": False})
    conf["logger"] = _quiet_logger()
    admin = AdminClient(conf)
    try:
        admin.list_topics(timeout=timeout)
    except confluent_kafka.KafkaException as err:
        raise RunError(f"cannot reach the Kafka broker at {service.bootstrap_servers} within {timeout:g} s "
                       f"({err.args[0].str() if err.args else err}); is it running? Set --bootstrap-servers "
                       f"or KAFKA_BOOTSTRAP_SERVERS") from None
    return admin


def _kafka_client(kind: str, service: ServiceConfig, **extra: object):
    """A confluent-kafka client whose logs go through Python logging (call after :func:`_kafka_admin`)."""
    import confluent_kafka

    from ..service.kafka_config import confluent_config

    conf = confluent_config(service, **extra)
    conf["logger"] = logging.getLogger("stream_dedup.kafka")
    return getattr(confluent_kafka, kind)(conf)


def _ensure_topic(admin, topic: str, partitions: int | None, timeout: float) -> str:
    """Create ``topic`` with ``partitions`` (default 1) unless it exists; say what was done."""
    import confluent_kafka
    from confluent_kafka.admin import NewTopic

    meta = admin.list_topics(timeout=timeout)
    if topic in meta.topics and not meta.topics[topic].error:
        have = len(meta.topics[topic].partitions)
        note = f" (--partitions {partitions} ignored: an existing topic is left as it is)" \
            if partitions and partitions != have else ""
        return f"topic {topic} exists with {have} partition{'s' * (have != 1)}{note}"
    want = partitions or 1
    future = admin.create_topics([NewTopic(topic, num_partitions=want, replication_factor=-1)],
                                 operation_timeout=timeout, request_timeout=max(timeout, 10))[topic]
    try:
        future.result(timeout=max(timeout, 10) + 5)
    except confluent_kafka.KafkaException as err:
        kerr = err.args[0] if err.args else None
        if kerr is not None and kerr.code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            return f"topic {topic} exists (created concurrently)"
        raise RunError(f"cannot create topic {topic}: {kerr.str() if kerr is not None else err}") from None
    return f"created topic {topic} with {want} partition{'s' * (want != 1)}"


def run_produce(args: argparse.Namespace) -> int:
    """Send a JSONL file to a topic, one message per line (bad lines too: they test the DLQ)."""
    service = load(ServiceConfig, args)
    topic = args.topic or service.input_topic
    if args.partitions is not None and args.partitions < 1:
        raise UsageError(f"--partitions {args.partitions}: must be at least 1")
    if args.rate < 0 or args.limit < 0:
        raise UsageError("--rate and --limit must be >= 0")
    if args.input != "-" and not Path(args.input).is_file():
        raise UsageError(f"no such input file: {args.input}")
    admin = _kafka_admin(service, args.connect_timeout)
    print(f"stream-dedup produce: {_ensure_topic(admin, topic, args.partitions, args.connect_timeout)}",
          file=sys.stderr)
    producer = _kafka_client("Producer", service, **{"linger.ms": 5, "enable.idempotence": True})
    failures: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    source = sys.stdin.buffer if args.input == "-" else open(args.input, "rb")  # noqa: SIM115
    sent = 0
    interval = 1.0 / args.rate if args.rate else 0.0
    next_at = time.monotonic()
    with source:
        for raw in source:
            raw = raw.rstrip(b"\r\n")
            if not raw.strip():
                continue
            key = None
            try:
                key = str(json.loads(raw)[args.key_field]).encode()
            except (ValueError, KeyError, TypeError, IndexError):
                pass
            while True:
                try:
                    producer.produce(topic, value=raw, key=key, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
            sent += 1
            if args.limit and sent >= args.limit:
                break
            if interval:
                next_at += interval
                time.sleep(max(0.0, next_at - time.monotonic()))
    producer.flush(60)
    print(f"produced {sent} messages to {topic}" + (f", {len(failures)} failed: {failures[0]}" if failures else ""),
          file=sys.stderr)
    return 1 if failures else 0


def run_tail(args: argparse.Namespace) -> int:
    """Print the messages of the output topics as JSON lines (value parsed when it is JSON)."""
    import uuid

    service = load(ServiceConfig, args)
    topics = args.topics or [service.new_topic, service.duplicates_topic, service.dlq_topic]
    _kafka_admin(service, args.connect_timeout)
    consumer = _kafka_client("Consumer", service, **{
        "group.id": f"stream-dedup-tail-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest"})
    consumer.subscribe(topics)
    seen = 0
    idle_since = time.monotonic()
    try:
        while not args.max_messages or seen < args.max_messages:
            msg = consumer.poll(0.5)
            if msg is None:
                if args.idle_timeout and time.monotonic() - idle_since > args.idle_timeout:
                    break
                continue
            if msg.error():
                print(f"stream-dedup tail: {msg.error()}", file=sys.stderr)
                continue
            idle_since = time.monotonic()
            value: object = msg.value()
            try:
                value = json.loads(msg.value())
            except (ValueError, TypeError):
                value = msg.value().decode("utf-8", "backslashreplace")
            headers = {k: v.decode("utf-8", "backslashreplace") for k, v in (msg.headers() or [])}
            print(json.dumps({"topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
                              "key": (msg.key() or b"").decode("utf-8", "backslashreplace"),
                              "headers": headers, "value": value}, ensure_ascii=False), flush=True)
            seen += 1
    finally:
        consumer.close()
    return 0


def run_worker_command(args: argparse.Namespace) -> int:
    from ..service import run_worker  # imports faust only when the worker runs

    return run_worker(load(ServiceConfig, args), load(EngineConfig, args))
