"""Map :class:`~stream_dedup.config.ServiceConfig` to the configs of the two Kafka clients (and two
helpers both stages use with them: :func:`is_fatal`, :func:`consume_available`).

The worker talks to Kafka through two libraries:

* **confluent-kafka** for stage 1 (:func:`stage1_consumer_config`; the default
  ``--stage1-client confluent``), the decision stage (transactional consume -> produce:
  :func:`decisions_consumer_config`, :func:`transactional_producer_config`), the admin work
  (create topics, topic limits, broker probe) and the catch-up replay of the signatures topic;
* **Faust / aiokafka** for stage 1's consumer group with ``--stage1-client faust`` (its
  producers are librdkafka's).

Both get the same security settings from ``ServiceConfig``:

============================  ==============================  ===============================
ServiceConfig                 Faust (``broker_credentials``)   confluent-kafka
============================  ==============================  ===============================
security_protocol=PLAINTEXT   ``None``                         ``security.protocol=PLAINTEXT``
security_protocol=SSL         ``SSLCredentials(ctx)``          ``security.protocol=SSL``
security_protocol=SASL_*      ``SASLCredentials(...)``         ``sasl.mechanism/username/password``
ssl_cafile                    ``ssl.create_default_context(    ``ssl.ca.location``
                              cafile=...)``
============================  ==============================  ===============================

Nothing here logs; :func:`describe` gives a log-safe summary (the password is never in it).
"""

from __future__ import annotations

import logging
import ssl
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

from stream_dedup.config import ServiceConfig

if TYPE_CHECKING:  # Faust is imported only by --stage1-client faust
    import faust

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class KafkaConfigError(ValueError):
    """The Kafka security settings are inconsistent."""


def _protocol(service: ServiceConfig) -> str:
    protocol = (service.security_protocol or "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise KafkaConfigError(f"security_protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    return protocol


def _mechanism(service: ServiceConfig) -> str:
    mechanism = (service.sasl_mechanism or "PLAIN").strip().upper()
    if mechanism not in SASL_MECHANISMS:
        raise KafkaConfigError(f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}, got {mechanism!r}")
    return mechanism


def is_fatal(err: KafkaError) -> bool:
    """A fatal librdkafka error: the error callback reports it with code ``_FATAL`` and ``fatal()`` False."""
    return err.fatal() or err.code() == KafkaError._FATAL


def consume_available(consumer: Any, most: int, wait: float) -> list[Any]:
    """Up to ``most`` messages: those already fetched, else the first to arrive within ``wait`` s
    and what came with it (both stages' loops).

    ``Consumer.consume(n, timeout)`` returns only when it has ``n`` messages or the timeout is
    over, so asking for a batch with a timeout adds the whole timeout to every record's latency
    whenever fewer than ``n`` are waiting.  Asking for one message returns as soon as it arrives;
    what else has arrived by then is taken without waiting.
    """
    msgs = consumer.consume(most, timeout=0)
    if not msgs and wait > 0:
        msgs = consumer.consume(1, timeout=wait)
        if msgs and most > 1:
            msgs += consumer.consume(most - 1, timeout=0)
    return msgs


def group_view_config(client_conf: dict[str, Any], group: str) -> dict[str, Any]:
    """A consumer that never subscribes: it asks the broker for ``group``'s committed offsets and
    for end offsets on behalf of a stage's stall watches (:mod:`.stall`), so that they never
    depend on the consumer they watch (a stuck one may not answer). No instance id: it is no
    member of the group and cannot fence one."""
    return {**client_conf, "group.id": group, "enable.auto.commit": False, "enable.auto.offset.store": False}


class GroupView:
    """A stage's :func:`group_view_config` consumer, made when first asked for (most stages never
    need it: it serves the stall and rejoin watches and stage 1's merge), closed with the stage."""

    def __init__(self, client_conf: dict[str, Any], group: str, label: str, consumer: Any = None) -> None:
        self._conf, self._group, self.label = client_conf, group, label
        self._consumer = consumer  # (a test's stand-in)

    def client(self) -> Any:
        """The consumer (made now if not yet)."""
        if self._consumer is None:
            self._consumer = Consumer(group_view_config(self._conf, self._group))
        return self._consumer

    def close(self) -> None:
        """Close the consumer if it was made (within a second: it is no member of any group)."""
        if self._consumer is not None:
            close_consumer(self._consumer, f"{self.label} (group view)", 1.0)
            self._consumer = None


def committed_offset(consumer: Any, topic: str, timeout: float) -> int | None:
    """The committed offset of ``topic``-0 for ``consumer``'s group (None: nothing committed yet);
    raises :class:`KafkaException` when the broker does not answer within ``timeout`` s."""
    [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=timeout)
    if tp.error:
        raise KafkaException(tp.error)
    return None if tp.offset == OFFSET_INVALID or tp.offset < 0 else tp.offset


#: seconds a consumer's close() is given (it commits stored offsets and leaves the group)
CLOSE_SECONDS = 10.0


def close_consumer(consumer: Any, label: str, timeout: float = CLOSE_SECONDS) -> bool:
    """Close ``consumer`` within ``timeout`` s; False if it did not finish (it is left behind).

    A consumer stuck outside its group (librdkafka#3437) hangs in ``close()`` waiting for a group
    state that never comes; seen here: a stage 1 that gave up on rejoining never exited, so the
    worker never restarted it.  The close runs on a daemon thread and the stage's process exits
    without it (:func:`.stage_process.child_main` ends with ``os._exit``)."""
    done = threading.Event()

    def close() -> None:
        try:
            consumer.close()
        except Exception:  # noqa: BLE001 - a close that fails has nothing left to do
            logging.getLogger("stream_dedup.service").debug("%s: consumer close failed", label, exc_info=True)
        done.set()

    threading.Thread(target=close, name="consumer-close", daemon=True).start()
    if done.wait(timeout):
        return True
    logging.getLogger("stream_dedup.service").warning(
        "%s: the consumer did not close in %.0f s (a client stuck outside its group); leaving it", label, timeout)
    return False


#: the clients stage 1 can consume articles with (``--stage1-client``)
STAGE1_CLIENTS = ("confluent", "faust")


def validate(service: ServiceConfig) -> None:
    """Raise :class:`KafkaConfigError` for settings no client could use."""
    protocol = _protocol(service)
    if protocol.startswith("SASL"):
        _mechanism(service)
        if not service.sasl_username:
            raise KafkaConfigError(f"security_protocol={protocol} needs sasl_username (and sasl_password)")
    if not service.bootstrap_servers.strip():
        raise KafkaConfigError("bootstrap_servers is empty")
    if service.stage1_client not in STAGE1_CLIENTS:
        raise KafkaConfigError(f"stage1_client must be one of {', '.join(STAGE1_CLIENTS)}, not {service.stage1_client!r}")


def bootstrap_list(service: ServiceConfig) -> list[str]:
    """``"a:9092, b:9092"`` -> ``["a:9092", "b:9092"]`` (an optional ``kafka://`` prefix is dropped)."""
    out = []
    for part in service.bootstrap_servers.split(","):
        part = part.strip()
        if part.startswith("kafka://"):
            part = part[len("kafka://"):]
        if part:
            out.append(part)
    return out


def faust_broker(service: ServiceConfig) -> list[str]:
    """The ``broker`` argument of :class:`faust.App`: one ``kafka://host:port`` URL per server."""
    return [f"kafka://{hp}" for hp in bootstrap_list(service)]


def ssl_context(service: ServiceConfig) -> ssl.SSLContext:
    """A verifying TLS context: the CA file if given, otherwise the system trust store."""
    return ssl.create_default_context(purpose=ssl.Purpose.SERVER_AUTH, cafile=service.ssl_cafile or None)


def faust_credentials(service: ServiceConfig) -> faust.types.auth.CredentialsT | None:
    """The ``broker_credentials`` of :class:`faust.App` (``None`` for PLAINTEXT)."""
    import faust

    validate(service)
    protocol = _protocol(service)
    if protocol == "PLAINTEXT":
        return None
    if protocol == "SSL":
        return faust.SSLCredentials(ssl_context(service))
    creds = faust.SASLCredentials(
        username=service.sasl_username,
        password=service.sasl_password,
        mechanism=_mechanism(service),
        ssl_context=ssl_context(service) if protocol == "SASL_SSL" else None,
    )
    return creds


def confluent_config(service: ServiceConfig, **extra: Any) -> dict[str, Any]:
    """A librdkafka config dict (``bootstrap.servers`` + security) for Admin/Consumer/Producer."""
    validate(service)
    protocol = _protocol(service)
    conf: dict[str, Any] = {
        "bootstrap.servers": ",".join(bootstrap_list(service)),
        "security.protocol": protocol,
    }
    if protocol.startswith("SASL"):
        conf["sasl.mechanism"] = _mechanism(service)
        conf["sasl.username"] = service.sasl_username
        conf["sasl.password"] = service.sasl_password
    if protocol in ("SSL", "SASL_SSL") and service.ssl_cafile:
        conf["ssl.ca.location"] = service.ssl_cafile
    conf.update(extra)
    return conf


def redact_client_config(conf: dict[str, Any]) -> dict[str, Any]:
    """A copy of a librdkafka config that is safe to log."""
    return {k: ("***" if ("password" in k or "secret" in k) and v else v) for k, v in conf.items()}


def describe(service: ServiceConfig) -> str:
    """One log line about the Kafka connection; never contains the password."""
    protocol = _protocol(service)
    parts = [f"brokers={','.join(bootstrap_list(service))}", f"security_protocol={protocol}"]
    if protocol.startswith("SASL"):
        parts.append(f"sasl_mechanism={_mechanism(service)}")
        parts.append(f"sasl_username={service.sasl_username}")
        parts.append("sasl_password=" + ("***" if service.sasl_password else "(empty)"))
    if protocol in ("SSL", "SASL_SSL"):
        parts.append(f"ssl_cafile={service.ssl_cafile or '(system trust store)'}")
    return " ".join(parts)


def instance_id(service: ServiceConfig) -> str:
    """The worker's static membership id: ``--instance-id``, or one kept in ``<data-dir>/instance-id``.

    Kept with the data dir because the data dir is what makes a worker the same worker again
    (a StatefulSet pod keeps its volume); two workers never share one (the index is locked).
    """
    if service.instance_id:
        return service.instance_id
    path = Path(service.data_dir) / "instance-id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        import uuid

        path.parent.mkdir(parents=True, exist_ok=True)
        value = f"{service.app_id}-{uuid.uuid4().hex[:12]}"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(value + "\n")
        tmp.replace(path)
        return value


def service_client_config(service: ServiceConfig, **extra: Any) -> dict[str, Any]:
    """:func:`confluent_config` for the worker's own clients: librdkafka's log lines are off.

    Without a broker, librdkafka logs every reconnect attempt of every client (measured: 1,165
    lines in a minute); the worker reports each client error once per change of state through
    its ``error_cb`` and ``/readyz`` instead.  Every client sends small requests at once
    (``socket.nagle.disable``, as the Java clients always do; measured: the latency run's p99 fell).
    """
    return confluent_config(service, **{"log_level": 2, "socket.nagle.disable": True, **extra})


def _static_member(service: ServiceConfig, instance: str) -> dict[str, Any]:
    """The group-membership settings of both stages' consumers: static membership (a restarted
    worker gets its partitions back at once), the session timeout and a heartbeat within it."""
    return {
        "group.instance.id": instance,
        "session.timeout.ms": int(service.session_timeout * 1000),
        "heartbeat.interval.ms": max(500, min(3000, int(service.session_timeout * 1000 / 5))),
        "max.poll.interval.ms": 600_000,
    }


def stage1_consumer_config(service: ServiceConfig, client_conf: dict[str, Any], member: int = 0,
                           **callbacks: Any) -> dict[str, Any]:
    """Stage 1's consumer (``--stage1-client confluent``): the group ``<app_id>`` that Faust's stage 1 uses
    too (its committed offsets carry over), offsets stored by the stage once their signatures are
    acknowledged and committed by librdkafka every ``--commit-interval``."""
    return {
        **client_conf,
        "group.id": service.app_id,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": max(100, int(service.commit_interval * 1000)),
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "range",
        **_static_member(service, instance_id(service) + (f"-{member}" if member else "")),
        # a fetch parked on the broker returns when any owned partition has a record
        "fetch.wait.max.ms": 100,
        # records fetched ahead and not yet consumed, per partition: bounds the memory of a backlog
        "queued.max.messages.kbytes": 16384,
        **callbacks,
    }


def decisions_group(service: ServiceConfig) -> str:
    return f"{service.app_id}.decisions"


def transactional_id(service: ServiceConfig) -> str:
    return f"{service.app_id}.decisions.{service.signatures_topic}-0"


def decisions_consumer_config(service: ServiceConfig, client_conf: dict[str, Any], **callbacks: Any) -> dict[str, Any]:
    """The decision stage's consumer: read_committed, offsets committed by its transactions only."""
    return {
        **client_conf,
        "group.id": decisions_group(service),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "range",
        **_static_member(service, instance_id(service)),
        # one partition: a parked fetch returns as soon as a record arrives, so a long wait costs
        # no latency, while a short one makes an idle stage poll the broker (10 ms: 100 fetches/s)
        "fetch.wait.max.ms": 500,
        **callbacks,
    }


def transactional_producer_config(service: ServiceConfig, client_conf: dict[str, Any],
                                  **callbacks: Any) -> dict[str, Any]:
    """The decision stage's producer, with the stable ``transactional.id`` of signatures-0's owner."""
    return {**client_conf, "transactional.id": transactional_id(service),
            # events sent while the transaction is open, so that commit_transaction() finds them
            # acknowledged: measured at ~2,200/s (bench/kafka_e2e.py, warm broker), a commit took
            # 4.9 ms with 50 (everything sent at the commit), 3.6 with 5, 3.0 with 2, 2.9 with 1;
            # the decision stage alone 114 %, 121 %, 123 %, 121 % of the engine's decide rate
            "linger.ms": 2, "delivery.report.only.error": True,
            # right after a commit the coordinator answers CONCURRENT_TRANSACTIONS until the
            # markers are written; librdkafka's default 100 ms backoff made every
            # send_offsets_to_transaction take ~90 ms (measured), 5 ms makes it ~2 ms
            "retry.backoff.ms": 5, "retry.backoff.max.ms": 50, "message.max.bytes": 16 * 1024 * 1024,
            "queue.buffering.max.messages": max(100_000, 4 * int(service.batch_size)),
            "transaction.timeout.ms": 60_000, **callbacks}
