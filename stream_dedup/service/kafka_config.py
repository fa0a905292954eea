"""Map :class:`~stream_dedup.config.ServiceConfig` to the configs of the two Kafka clients.

The worker talks to Kafka through two libraries:

* **Faust / aiokafka** for stage 1's consumer group (the producers are librdkafka's);
* **confluent-kafka** for the decision stage (transactional consume -> produce), the admin work
  (create topics, topic limits, broker probe) and the catch-up replay of the signatures topic.

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

import ssl
from pathlib import Path
from typing import Any

import faust

from stream_dedup.config import ServiceConfig

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


def validate(service: ServiceConfig) -> None:
    """Raise :class:`KafkaConfigError` for settings no client could use."""
    protocol = _protocol(service)
    if protocol.startswith("SASL"):
        _mechanism(service)
        if not service.sasl_username:
            raise KafkaConfigError(f"security_protocol={protocol} needs sasl_username (and sasl_password)")
    if not service.bootstrap_servers.strip():
        raise KafkaConfigError("bootstrap_servers is empty")


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
    its ``error_cb`` and ``/readyz`` instead.
    """
    return confluent_config(service, **{"log_level": 2, **extra})

