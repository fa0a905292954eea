"""ServiceConfig security -> Faust/aiokafka and confluent-kafka configs; secrets never logged."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import faust
import pytest

from stream_dedup.config import EngineConfig, ServiceConfig, redacted
from stream_dedup.service import kafka_config as kc

SECRET = "p4ss-w0rd-that-must-not-leak"


def _cafile() -> str:
    for candidate in (ssl.get_default_verify_paths().cafile, "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).exists():
            return candidate
    pytest.skip("no CA bundle on this machine")


def test_plaintext():
    svc = ServiceConfig(bootstrap_servers="a:9092, kafka://b:9093")
    assert kc.faust_credentials(svc) is None
    assert kc.faust_broker(svc) == ["kafka://a:9092", "kafka://b:9093"]
    conf = kc.confluent_config(svc)
    assert conf == {"bootstrap.servers": "a:9092,b:9093", "security.protocol": "PLAINTEXT"}


def test_ssl_with_ca_file():
    ca = _cafile()
    svc = ServiceConfig(security_protocol="SSL", ssl_cafile=ca)
    creds = kc.faust_credentials(svc)
    assert isinstance(creds, faust.SSLCredentials)
    assert isinstance(creds.context, ssl.SSLContext)
    assert creds.context.verify_mode == ssl.CERT_REQUIRED and creds.context.check_hostname
    conf = kc.confluent_config(svc)
    assert conf["security.protocol"] == "SSL"
    assert conf["ssl.ca.location"] == ca
    assert not any(k.startswith("sasl.") for k in conf)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_sasl_ssl(mechanism):
    ca = _cafile()
    svc = ServiceConfig(security_protocol="SASL_SSL", sasl_mechanism=mechanism, sasl_username="svc",
                        sasl_password=SECRET, ssl_cafile=ca)
    creds = kc.faust_credentials(svc)
    assert isinstance(creds, faust.SASLCredentials)
    assert creds.protocol.value == "SASL_SSL"
    assert creds.mechanism.value == mechanism
    assert creds.username == "svc" and creds.password == SECRET
    assert isinstance(creds.ssl_context, ssl.SSLContext)
    assert SECRET not in repr(creds)
    # what aiokafka finally receives
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    auth = credentials_to_aiokafka_auth(creds)
    assert auth["security_protocol"] == "SASL_SSL"
    assert auth["sasl_mechanism"] == mechanism
    assert auth["sasl_plain_username"] == "svc" and auth["sasl_plain_password"] == SECRET
    conf = kc.confluent_config(svc, **{"group.id": "g"})
    assert conf == {"bootstrap.servers": "127.0.0.1:9092", "security.protocol": "SASL_SSL",
                    "sasl.mechanism": mechanism, "sasl.username": "svc", "sasl.password": SECRET,
                    "ssl.ca.location": ca, "group.id": "g"}
    assert kc.redact_client_config(conf)["sasl.password"] == "***"


def test_sasl_ssl_without_ca_file_uses_system_trust_store():
    svc = ServiceConfig(security_protocol="sasl_ssl", sasl_mechanism="scram-sha-256", sasl_username="u",
                        sasl_password=SECRET)
    creds = kc.faust_credentials(svc)
    assert creds.protocol.value == "SASL_SSL" and creds.ssl_context is not None
    assert "ssl.ca.location" not in kc.confluent_config(svc)


def test_sasl_plaintext_defaults_to_plain():
    svc = ServiceConfig(security_protocol="SASL_PLAINTEXT", sasl_username="u", sasl_password=SECRET)
    creds = kc.faust_credentials(svc)
    assert creds.protocol.value == "SASL_PLAINTEXT" and creds.mechanism.value == "PLAIN"
    assert creds.ssl_context is None
    assert kc.confluent_config(svc)["sasl.mechanism"] == "PLAIN"


@pytest.mark.parametrize("kwargs, message", [
    ({"security_protocol": "TLS"}, "security_protocol"),
    ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI", "sasl_username": "u"}, "sasl_mechanism"),
    ({"security_protocol": "SASL_SSL"}, "sasl_username"),
    ({"bootstrap_servers": " "}, "bootstrap"),
])
def test_invalid_settings(kwargs, message):
    with pytest.raises(kc.KafkaConfigError, match=message):
        kc.validate(ServiceConfig(**kwargs))


def test_describe_and_redacted_never_contain_the_password():
    svc = ServiceConfig(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="svc",
                        sasl_password=SECRET, ssl_cafile="/x/ca.pem")
    text = kc.describe(svc)
    assert SECRET not in text and "sasl_password=***" in text and "sasl_username=svc" in text
    assert redacted(svc)["sasl_password"] == "***"
    assert SECRET not in repr(redacted(svc))


def test_worker_start_up_logs_never_contain_the_password(monkeypatch, caplog, tmp_path):
    """run_worker logs its whole configuration at start-up: the password must be masked."""
    import stream_dedup.service as service
    from stream_dedup.service import topics

    def no_broker(*args, **kwargs):
        raise topics.TopicError("no broker in this unit test")

    monkeypatch.setattr(topics, "ensure_topics", no_broker)
    svc = ServiceConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", sasl_username="svc",
                        sasl_password=SECRET, data_dir=str(tmp_path), log_level="DEBUG")
    with caplog.at_level(logging.DEBUG):
        assert service.run_worker(svc, EngineConfig()) == 1
    assert "service config" in caplog.text and "***" in caplog.text
    assert SECRET not in caplog.text


def test_invalid_security_settings_stop_the_worker(caplog, tmp_path):
    import stream_dedup.service as service

    svc = ServiceConfig(security_protocol="SASL_SSL", sasl_password=SECRET, data_dir=str(tmp_path))
    assert service.run_worker(svc, EngineConfig()) == 2
    assert SECRET not in caplog.text


def test_a_consumer_that_hangs_in_close_is_left_behind_in_time(caplog) -> None:
    """A client stuck outside its group hangs in close() (seen: a stage that never exited, so the
    worker never restarted it); the stage goes on without it after the timeout."""
    import threading
    import time

    from stream_dedup.service.kafka_config import close_consumer

    release = threading.Event()

    class Stuck:
        closed = False

        def close(self) -> None:
            release.wait(30)
            self.closed = True

    class Fine(Stuck):
        def close(self) -> None:
            self.closed = True

    fine = Fine()
    assert close_consumer(fine, "stage 1", timeout=5) and fine.closed
    started = time.monotonic()
    assert not close_consumer(Stuck(), "stage 1", timeout=0.3)
    assert time.monotonic() - started < 5
    assert "stage 1: the consumer did not close in 0 s" in caplog.text
    release.set()


def test_the_group_view_is_made_when_first_asked_for_and_closed_once(monkeypatch) -> None:
    from stream_dedup.service import kafka_config

    made: list[dict] = []

    class Client:
        closed = 0

        def __init__(self, conf: dict) -> None:
            made.append(conf)

        def close(self) -> None:
            Client.closed += 1

    monkeypatch.setattr(kafka_config, "Consumer", Client)
    view = kafka_config.GroupView({"bootstrap.servers": "b:9092"}, "app.decisions", "decision stage")
    view.close()  # never asked for: nothing made, nothing to close
    assert made == [] and Client.closed == 0
    client = view.client()
    assert view.client() is client and len(made) == 1  # one client, kept
    assert made[0]["group.id"] == "app.decisions" and "group.instance.id" not in made[0]  # no member: fences nobody
    assert made[0]["enable.auto.commit"] is False
    view.close()
    view.close()
    assert Client.closed == 1
