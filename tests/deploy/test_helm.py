"""The Helm chart in helm/stream-dedup: lint, render and check the manifests it produces.

Every test renders the chart with the real helm binary (see conftest.py) and inspects the
parsed YAML, so a broken template, a wrong mount or a probe on the wrong port fails here.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from stream_dedup import config

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "stream-dedup"
NAMESPACE = "dedup-test"  # the namespace conftest.render passes to helm template

SASL_SECRET = "kafka-credentials"
CA_SECRET = "kafka-ca-bundle"

# Everything optional switched on, SASL over TLS with credentials from existing Secrets.
FULL_VALUES: dict[str, Any] = {
    "replicas": 3,
    "kafka": {
        "bootstrapServers": "b-1.kafka.internal:9096,b-2.kafka.internal:9096",
        "securityProtocol": "SASL_SSL",
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "stream-dedup",
                 "existingSecret": SASL_SECRET, "passwordKey": "kafka-password"},
        "ssl": {"caSecret": CA_SECRET, "caKey": "ca.pem"},
    },
    "appId": "dedup-prod",
    "topics": {"input": "news.raw", "new": "news.unique", "duplicates": "news.dups",
               "dlq": "news.dlq", "signatures": "news.signatures"},
    "engine": {"numPerm": 256, "shingleSize": 4, "lshThreshold": 0.35, "jaccardThreshold": 0.6,
               "containmentThreshold": 0.85, "simhashK": 4, "simhashBlocks": 8, "maxTextBytes": 3000000, "seed": 7, "retention": "14d",
               "memory": "1GB"},
    "logLevel": "DEBUG",
    "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "pdb": {"enabled": True},
    "dashboard": {"enabled": True},
    "extraEnv": [{"name": "STREAM_DEDUP_MIN_CONTAINMENT_SHINGLES", "value": "30"}],
    "persistence": {"size": "50Gi", "storageClassName": "fast-ssd",
                    "retentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"}},
}

OPTIONAL_KINDS = {"serviceMonitor": "ServiceMonitor", "pdb": "PodDisruptionBudget", "dashboard": "ConfigMap"}

# Every environment variable the worker understands, derived from the settings themselves.
SETTINGS = {config.env_name(f): (cls, f) for cls in (config.EngineConfig, config.ServiceConfig)
            for f in dataclasses.fields(cls)}
SECRET_SETTINGS = {name for name, (_, f) in SETTINGS.items() if f.metadata.get("secret")}


@pytest.fixture(scope="module")
def full_values_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("values") / "full.yaml"
    path.write_text(yaml.safe_dump(FULL_VALUES))
    return path


@pytest.fixture(scope="module")
def default_docs(render) -> list[dict]:
    return render()


@pytest.fixture(scope="module")
def full_docs(render, full_values_file: Path) -> list[dict]:
    return render("-f", str(full_values_file))


@pytest.fixture(params=["default", "full"])
def docs(request, default_docs, full_docs) -> list[dict]:
    return default_docs if request.param == "default" else full_docs


# ------------------------------------------------------------------------------- helpers

def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[dict], kind: str) -> dict:
    found = of_kind(docs, kind)
    assert len(found) == 1, f"expected exactly one {kind}, got {len(found)}"
    return found[0]


def worker(docs: list[dict]) -> dict:
    containers = one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_entries(container: dict) -> list[dict]:
    return container.get("env") or []


def literal_env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in env_entries(container) if "value" in e}


def container_port(container: dict, port: int | str) -> int:
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    assert port in named, f"probe port {port!r} is not a named container port ({named})"
    return named[port]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# ------------------------------------------------------------------------------------ lint

@pytest.mark.parametrize("with_values", [False, True], ids=["defaults", "full-values"])
def test_lint_strict(helm, full_values_file: Path, with_values: bool) -> None:
    args = ["lint", "--strict", str(CHART_DIR)] + (["-f", str(full_values_file)] if with_values else [])
    proc = helm(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ------------------------------------------------------------------------------ resources

def test_default_render_has_only_core_resources(default_docs: list[dict]) -> None:
    kinds = sorted(d["kind"] for d in default_docs)
    assert kinds == ["Service", "Service", "ServiceAccount", "StatefulSet"]
    assert all(d["metadata"].get("namespace") == NAMESPACE for d in default_docs)


@pytest.mark.parametrize("flag", sorted(OPTIONAL_KINDS))
def test_optional_resources_appear_only_when_enabled(render, default_docs, full_docs, flag: str) -> None:
    kind = OPTIONAL_KINDS[flag]
    assert of_kind(default_docs, kind) == []
    assert len(of_kind(full_docs, kind)) == 1
    alone = render("--set", f"{flag}.enabled=true")
    assert len(of_kind(alone, kind)) == 1
    others = set(OPTIONAL_KINDS.values()) - {kind}
    assert not [d for d in alone if d["kind"] in others], f"{flag}.enabled=true rendered other optional kinds"


def test_chart_never_creates_secrets(docs: list[dict]) -> None:
    assert of_kind(docs, "Secret") == []


def test_headless_service_governs_statefulset(docs: list[dict]) -> None:
    sts = one(docs, "StatefulSet")
    services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
    governing = services.get(sts["spec"]["serviceName"])
    assert governing is not None, "StatefulSet.spec.serviceName names no rendered Service"
    assert governing["spec"]["clusterIP"] == "None"
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert matches(sts["spec"]["selector"]["matchLabels"], pod_labels)
    for svc in services.values():
        assert matches(svc["spec"]["selector"], pod_labels), svc["metadata"]["name"]
    metrics_services = [s for s in services.values() if s["spec"].get("clusterIP") != "None"]
    assert len(metrics_services) == 1


# ---------------------------------------------------------------------- storage and env

def test_pvc_mounted_at_data_dir(docs: list[dict]) -> None:
    sts = one(docs, "StatefulSet")
    claims = {c["metadata"]["name"]: c for c in sts["spec"]["volumeClaimTemplates"]}
    assert claims, "no volumeClaimTemplates: pods would not get their own volume"
    container = worker(docs)
    data_dir = literal_env(container)["STREAM_DEDUP_DATA_DIR"]
    mounts = [m for m in container["volumeMounts"] if m["name"] in claims]
    assert [m["mountPath"] for m in mounts] == [data_dir]
    assert not mounts[0].get("readOnly", False)
    pod_volumes = {v["name"] for v in sts["spec"]["template"]["spec"].get("volumes", [])}
    assert not pod_volumes & set(claims), "a pod volume shadows the volumeClaimTemplate"
    claim = claims[mounts[0]["name"]]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"]


def test_data_dir_follows_mount_path(render) -> None:
    docs = render("--set", "persistence.mountPath=/var/lib/stream-dedup")
    container = worker(docs)
    assert literal_env(container)["STREAM_DEDUP_DATA_DIR"] == "/var/lib/stream-dedup"
    assert "/var/lib/stream-dedup" in {m["mountPath"] for m in container["volumeMounts"]}


def test_every_env_var_is_a_real_setting(docs: list[dict]) -> None:
    names = [e["name"] for e in env_entries(worker(docs))]
    assert len(names) == len(set(names)), f"duplicate env vars: {names}"
    unknown = sorted(set(names) - set(SETTINGS))
    assert not unknown, f"chart sets env vars that are no setting of stream_dedup.config: {unknown}"


def test_values_reach_the_worker_as_settings(full_docs: list[dict]) -> None:
    """The literal env values parse into the settings the values asked for."""
    env = literal_env(worker(full_docs))
    engine = config.load(config.EngineConfig, environ=env)
    service = config.load(config.ServiceConfig, environ=env)
    v = FULL_VALUES
    assert (engine.num_perm, engine.shingle_size, engine.simhash_k, engine.simhash_blocks) == (256, 4, 4, 8)
    assert (engine.lsh_threshold, engine.jaccard_threshold, engine.containment_threshold) == (0.35, 0.6, 0.85)
    assert (engine.max_text_bytes, engine.seed, engine.retention) == (3_000_000, 7, 14 * 86400)
    assert engine.min_containment_shingles == 30
    assert engine.memory == 1 << 30
    assert service.bootstrap_servers == v["kafka"]["bootstrapServers"]
    assert service.app_id == "dedup-prod"
    assert (service.input_topic, service.new_topic, service.duplicates_topic, service.dlq_topic,
            service.signatures_topic) == ("news.raw", "news.unique", "news.dups", "news.dlq", "news.signatures")
    assert (service.security_protocol, service.sasl_mechanism, service.sasl_username) == (
        "SASL_SSL", "SCRAM-SHA-512", "stream-dedup")
    assert service.log_level == "DEBUG"
    assert service.metrics_port == 9108
    assert service.sasl_password == "", "the password must not be a literal env value"


def test_full_values_cover_every_engine_value() -> None:
    """So test_every_env_var_is_a_real_setting sees the env var of every engine value."""
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert set(FULL_VALUES["engine"]) == set(values["engine"])


def test_defaults_match_the_application_defaults(default_docs: list[dict]) -> None:
    """Unset engine values leave the application's defaults alone (retention unset = keep forever)."""
    env = literal_env(worker(default_docs))
    assert config.load(config.EngineConfig, environ=env) == config.EngineConfig()
    assert config.load(config.ServiceConfig, environ=env).metrics_port == 9108
    assert "STREAM_DEDUP_RETENTION" not in env
    assert "KAFKA_SASL_PASSWORD" not in {e["name"] for e in env_entries(worker(default_docs))}


# ---------------------------------------------------------------------------- Kafka auth

def test_password_comes_from_existing_secret(full_docs: list[dict]) -> None:
    entries = {e["name"]: e for e in env_entries(worker(full_docs))}
    password = entries["KAFKA_SASL_PASSWORD"]
    assert "value" not in password
    assert password["valueFrom"]["secretKeyRef"] == {"name": SASL_SECRET, "key": "kafka-password"}
    assert entries["KAFKA_SASL_USERNAME"]["value"] == "stream-dedup"


def test_no_env_var_holds_a_literal_secret(docs: list[dict]) -> None:
    for entry in env_entries(worker(docs)):
        secretish = entry["name"] in SECRET_SETTINGS or re.search(r"PASSWORD|SECRET|TOKEN", entry["name"])
        if secretish:
            assert "value" not in entry, f"{entry['name']} is a literal value"
            assert "secretKeyRef" in entry["valueFrom"], entry


def test_username_can_come_from_the_secret(render) -> None:
    docs = render("--set", "kafka.securityProtocol=SASL_PLAINTEXT", "--set", "kafka.sasl.mechanism=PLAIN",
                  "--set", f"kafka.sasl.existingSecret={SASL_SECRET}", "--set", "kafka.sasl.usernameKey=user")
    entries = {e["name"]: e for e in env_entries(worker(docs))}
    assert entries["KAFKA_SASL_USERNAME"]["valueFrom"]["secretKeyRef"] == {"name": SASL_SECRET, "key": "user"}
    assert entries["KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": SASL_SECRET, "key": "password"}
    assert "KAFKA_SSL_CAFILE" not in entries


def test_ca_file_is_mounted_from_existing_secret(full_docs: list[dict]) -> None:
    sts = one(full_docs, "StatefulSet")
    container = worker(full_docs)
    cafile = literal_env(container)["KAFKA_SSL_CAFILE"]
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    mount = next(m for m in container["volumeMounts"] if cafile.startswith(m["mountPath"].rstrip("/") + "/"))
    assert mount.get("readOnly") is True
    secret = volumes[mount["name"]]["secret"]
    assert secret["secretName"] == CA_SECRET
    relative = cafile[len(mount["mountPath"].rstrip("/")) + 1:]
    assert {"key": "ca.pem", "path": relative} in secret["items"]


def test_values_yaml_has_no_password() -> None:
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if re.search("password|secret", key, re.I):
                    assert key in {"passwordKey", "existingSecret", "caSecret", "imagePullSecrets"}, \
                        f"{path}.{key}"
                    assert key != "passwordKey" or value == "password"
                walk(value, f"{path}.{key}")

    walk(values, "values")


# ----------------------------------------------------------------------- probes, security

@pytest.mark.parametrize("port", [None, 9200])
def test_probes_hit_health_endpoints_on_metrics_port(render, port: int | None) -> None:
    docs = render(*(["--set", f"metrics.port={port}"] if port else []))
    container = worker(docs)
    metrics_port = int(literal_env(container)["STREAM_DEDUP_METRICS_PORT"])
    assert metrics_port == (port or 9108)
    expected = {"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"}
    for probe, path in expected.items():
        get = container[probe]["httpGet"]
        assert get["path"] == path, probe
        assert container_port(container, get["port"]) == metrics_port, probe
    for svc in of_kind(docs, "Service"):
        (svc_port,) = svc["spec"]["ports"]
        assert svc_port["port"] == metrics_port
        assert container_port(container, svc_port["targetPort"]) == metrics_port


def test_service_monitor_scrapes_the_metrics_service(full_docs: list[dict]) -> None:
    monitor = one(full_docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    selected = [s for s in of_kind(full_docs, "Service")
                if matches(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
    assert len(selected) == 1, "the ServiceMonitor must select exactly the (non-headless) metrics service"
    assert selected[0]["spec"].get("clusterIP") != "None"
    port_names = {p["name"] for p in selected[0]["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in port_names
        assert endpoint["path"] == "/metrics"
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]


def test_pdb_selects_the_pods(full_docs: list[dict]) -> None:
    pdb = one(full_docs, "PodDisruptionBudget")
    pod_labels = one(full_docs, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert matches(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    assert ("maxUnavailable" in pdb["spec"]) != ("minAvailable" in pdb["spec"])


def test_security_context(docs: list[dict]) -> None:
    pod = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["fsGroup"] == 10001
    container = worker(docs)
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc.get("runAsUser", 10001) == 10001
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert not sc["capabilities"].get("add")
    assert not sc.get("privileged", False)
    # A read-only root filesystem needs a writable /tmp.
    tmp = next(m for m in container["volumeMounts"] if m["mountPath"] == "/tmp")
    volume = next(v for v in pod["volumes"] if v["name"] == tmp["name"])
    assert "emptyDir" in volume
    assert pod["automountServiceAccountToken"] is False


def test_resources_and_image(docs: list[dict]) -> None:
    container = worker(docs)
    assert container["resources"]["requests"]["cpu"]
    assert container["resources"]["limits"]["memory"]
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert container["image"] == f"stream-dedup:{chart['appVersion']}"
    assert container.get("args") == ["worker"]
    assert "command" not in container, "the image's ENTRYPOINT (stream-dedup) must be kept"


def test_full_values_wire_replicas_and_storage(full_docs: list[dict]) -> None:
    sts = one(full_docs, "StatefulSet")
    assert sts["spec"]["replicas"] == 3
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Delete", "whenScaled": "Retain"}


# ---------------------------------------------------------------------------- validation

@pytest.mark.parametrize("bad", [
    "replicas=-1",
    "replicas=two",
    "engine.numPerm=abc",
    "engine.numPerm=4",
    "engine.jaccardThreshold=1.5",
    "engine.lshThreshold=-0.1",
    "engine.retention=forever",
    "engine.memory=lots",
    "kafka.securityProtocol=SASL",
    "kafka.sasl.mechanism=GSSAPI",
    "kafka.sasl.password=hunter2",
    "metrics.port=70000",
    "image.digest=latest",
    "extraEnv[0].name=KAFKA_SASL_PASSWORD,extraEnv[0].value=hunter2",
    "noSuchValue=1",
])
def test_schema_rejects_bad_values(helm, bad: str) -> None:
    proc = helm("template", "sd", str(CHART_DIR), "--set", bad)
    assert proc.returncode != 0, f"--set {bad} was accepted"
    assert "values don't meet the specifications of the schema" in proc.stderr or "at '/" in proc.stderr, \
        proc.stderr


@pytest.mark.parametrize("bad, message", [
    (["kafka.securityProtocol=SASL_SSL", "kafka.sasl.mechanism=PLAIN", "kafka.sasl.username=u"],
     "existingSecret"),
    (["kafka.securityProtocol=SASL_SSL", f"kafka.sasl.existingSecret={SASL_SECRET}", "kafka.sasl.username=u"],
     "mechanism"),
    ([f"kafka.ssl.caSecret={CA_SECRET}"], "caSecret"),
    (["engine.simhashK=6", "engine.simhashBlocks=6"], "simhashK"),
])
def test_inconsistent_values_fail_with_a_message(helm, bad: list[str], message: str) -> None:
    args = [arg for item in bad for arg in ("--set", item)]
    proc = helm("template", "sd", str(CHART_DIR), *args)
    assert proc.returncode != 0, f"{bad} was accepted"
    assert message in proc.stderr


@pytest.mark.parametrize("good", [
    ["--set", "replicas=0"],
    ["--set", "engine.retention=12h"],
    ["--set", "engine.lshThreshold=0.35,engine.jaccardThreshold=1"],
    ["--set", "kafka.securityProtocol=SSL"],
    ["--set-string", "extraEnv[0].name=STREAM_DEDUP_MIN_CONTAINMENT_SHINGLES,extraEnv[0].value=30"],
], ids=lambda args: args[1])
def test_schema_accepts_good_values(render, good: list[str]) -> None:
    """Guards the rejection tests: valid values of the same kind render."""
    assert one(render(*good), "StatefulSet")


# --------------------------------------------------------------------------- documentation

def test_replicas_vs_partitions_is_documented() -> None:
    values_text = (CHART_DIR / "values.yaml").read_text()
    replicas_comment = values_text.split("\nreplicas:")[0].rsplit("\n\n", 1)[-1]
    assert re.search(r"partition count", replicas_comment, re.I)
    assert re.search(r"sit idle", replicas_comment)
    assert re.search(r"decision stage.*one", replicas_comment, re.S)
    notes = (CHART_DIR / "templates" / "NOTES.txt").read_text()
    assert "sit idle" in notes and "partition" in notes
    assert "/metrics" in notes
