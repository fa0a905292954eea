"""stream_dedup.config: precedence flag > environment > default, durations, validation, secrets,
and the generated reference table."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from stream_dedup.config import (
    ENV_PREFIX,
    EngineConfig,
    ServiceConfig,
    add_arguments,
    env_name,
    flag_name,
    format_size,
    load,
    markdown_table,
    parse_duration,
    parse_size,
    redacted,
)

ALL_FIELDS = [(cls, f) for cls in (EngineConfig, ServiceConfig) for f in dataclasses.fields(cls)]


# ------------------------------------------------------------------------------------ precedence
def test_defaults_without_flags_or_environment() -> None:
    assert load(EngineConfig, {}, environ={}) == EngineConfig()
    assert load(ServiceConfig, None, environ={}) == ServiceConfig()
    assert EngineConfig().num_perm == 128 and EngineConfig().retention is None


def test_environment_over_default() -> None:
    env = {"STREAM_DEDUP_NUM_PERM": "64", "STREAM_DEDUP_JACCARD_THRESHOLD": "0.7", "STREAM_DEDUP_RETENTION": "7d",
           "STREAM_DEDUP_ID_FIELD": "doc_id"}
    config = load(EngineConfig, {}, environ=env)
    assert (config.num_perm, config.jaccard_threshold, config.retention, config.id_field) == (64, 0.7, 604800.0,
                                                                                              "doc_id")
    assert config.shingle_size == EngineConfig().shingle_size


def test_flag_over_environment() -> None:
    env = {"STREAM_DEDUP_NUM_PERM": "64", "STREAM_DEDUP_SHINGLE_SIZE": "3"}
    config = load(EngineConfig, {"num_perm": "256", "shingle_size": None}, environ=env)
    assert config.num_perm == 256      # flag wins
    assert config.shingle_size == 3    # unset flag (None) falls through to the environment


def test_precedence_through_argparse() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser, EngineConfig)
    add_arguments(parser, ServiceConfig)
    env = {"STREAM_DEDUP_NUM_PERM": "64", "KAFKA_BOOTSTRAP_SERVERS": "kafka:9092", "STREAM_DEDUP_RETENTION": "1h"}
    args = parser.parse_args(["--num-perm", "32", "--retention", "90m", "--input-topic", "in"])
    engine, service = load(EngineConfig, args, environ=env), load(ServiceConfig, args, environ=env)
    assert engine.num_perm == 32 and engine.retention == 5400.0
    assert service.bootstrap_servers == "kafka:9092" and service.input_topic == "in"
    defaults = parser.parse_args([])
    assert all(v is None for v in vars(defaults).values())  # unset flags never mask the environment
    assert load(EngineConfig, defaults, environ=env).num_perm == 64


def test_service_fields_with_their_own_environment_names() -> None:
    env = {"KAFKA_BOOTSTRAP_SERVERS": "b1:9092,b2:9092", "KAFKA_SASL_PASSWORD": "s3cret",
           "KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "STREAM_DEDUP_BOOTSTRAP_SERVERS": "ignored:1",
           "STREAM_DEDUP_BATCH_WAIT": "0.25", "STREAM_DEDUP_METRICS_PORT": "9999"}
    config = load(ServiceConfig, {}, environ=env)
    assert config.bootstrap_servers == "b1:9092,b2:9092"
    assert config.sasl_password == "s3cret" and config.security_protocol == "SASL_SSL"
    assert config.batch_wait == 0.25 and config.metrics_port == 9999


def test_environment_names_and_flags() -> None:
    for _, f in ALL_FIELDS:
        assert flag_name(f) == "--" + f.name.replace("_", "-")
        assert env_name(f) == (f.metadata.get("env") or ENV_PREFIX + f.name.upper())
    by_name = {f.name: f for _, f in ALL_FIELDS}
    assert env_name(by_name["num_perm"]) == "STREAM_DEDUP_NUM_PERM"
    assert env_name(by_name["bootstrap_servers"]) == "KAFKA_BOOTSTRAP_SERVERS"


def test_load_uses_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAM_DEDUP_SIMHASH_K", "2")
    assert load(EngineConfig).simhash_k == 2


@pytest.mark.parametrize(("env", "name"), [({"STREAM_DEDUP_NUM_PERM": "many"}, "STREAM_DEDUP_NUM_PERM"),
                                           ({"STREAM_DEDUP_JACCARD_THRESHOLD": "high"}, "--jaccard-threshold"),
                                           ({"STREAM_DEDUP_NUM_PERM": "1.5"}, "expected int")])
def test_unparsable_values_name_the_setting(env: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        load(EngineConfig, {}, environ=env)


def test_bad_duration_in_environment() -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        load(EngineConfig, {}, environ={"STREAM_DEDUP_RETENTION": "a week"})


# ------------------------------------------------------------------------------------- durations
@pytest.mark.parametrize(("text", "seconds"), [
    ("7d", 604800.0), ("12h", 43200.0), ("90m", 5400.0), ("30s", 30.0), ("3600", 3600.0), ("2w", 1209600.0),
    ("1.5h", 5400.0), (" 7D ", 604800.0), ("10 m", 600.0), (3600, 3600.0), (0.5, 0.5),
])
def test_parse_duration(text: str | int | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("text", "size"), [
    ("512MB", 512 << 20), ("2GB", 2 << 30), ("2 gb", 2 << 30), ("1.5G", 3 << 29), ("64mib", 64 << 20),
    ("1048576", 1 << 20), ("100k", 100 << 10), (4096, 4096)])
def test_parse_size(text: str | int, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("bad", ["", "lots", "2 PB", "-1GB", "1e9", "GB"])
def test_parse_size_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(bad)


def test_format_size_round_trips() -> None:
    for n in (2 << 30, 512 << 20, 1536 << 20, 100 << 10, 12345):
        assert parse_size(format_size(n)) == n
    assert (format_size(2 << 30), format_size(1536 << 20)) == ("2GB", "1536MB")


def test_memory_from_environment_and_flag() -> None:
    assert load(EngineConfig, {}, environ={"STREAM_DEDUP_MEMORY": "512MB"}).memory == 512 << 20
    assert load(EngineConfig, {"memory": "1GB"}, environ={"STREAM_DEDUP_MEMORY": "512MB"}).memory == 1 << 30
    with pytest.raises(ValueError, match="memory must be >= 32MB"):
        load(EngineConfig, {"memory": "16MB"}, environ={})


@pytest.mark.parametrize("off", [None, "", "  ", "0", "off", "OFF", "none", "never", 0, 0.0, -5])
def test_parse_duration_off(off: str | int | None) -> None:
    assert parse_duration(off) is None


@pytest.mark.parametrize("bad", ["7x", "d", "abc", "-5", "1h30m", "7 days", "1e3", "h7"])
def test_parse_duration_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(bad)


# ------------------------------------------------------------------------------------ validation
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_perm": 7}, "num_perm must be >= 8"),
    ({"shingle_size": 0}, "shingle_size must be >= 1"),
    ({"lsh_threshold": 1.5}, "lsh_threshold must be within [0, 1]"),
    ({"jaccard_threshold": 2}, "jaccard_threshold must be within [0, 1]"),
    ({"containment_threshold": -0.1}, "containment_threshold must be within [0, 1]"),
    ({"simhash_min_jaccard": 1.01}, "simhash_min_jaccard must be within [0, 1]"),
    ({"lsh_bands": 4}, "set both lsh_bands and lsh_rows"),
    ({"lsh_rows": 4}, "set both lsh_bands and lsh_rows"),
    ({"lsh_bands": 20, "lsh_rows": 7}, "lsh_bands * lsh_rows must be <= num_perm"),
    ({"simhash_k": 5, "simhash_blocks": 5}, "need 0 <= simhash_k < simhash_blocks <= 64"),
    ({"simhash_k": -1}, "need 0 <= simhash_k < simhash_blocks <= 64"),
    ({"simhash_k": 3, "simhash_blocks": 65}, "need 0 <= simhash_k < simhash_blocks <= 64"),
    ({"max_text_bytes": 0}, "max_text_bytes must be > 0"),
])
def test_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        EngineConfig(**kwargs)
    assert str(err.value).startswith("invalid engine configuration: ")
    assert message in str(err.value)


def test_validation_reports_every_error_at_once() -> None:
    with pytest.raises(ValueError) as err:
        EngineConfig(num_perm=4, shingle_size=0, max_text_bytes=-1)
    assert all(m in str(err.value) for m in ("num_perm", "shingle_size", "max_text_bytes"))


def test_valid_edges_accepted() -> None:
    EngineConfig(num_perm=8, shingle_size=1, lsh_threshold=0.0, jaccard_threshold=1.0, lsh_bands=2, lsh_rows=4,
                 simhash_k=0, simhash_blocks=1, max_text_bytes=1)


def test_validation_through_load() -> None:
    with pytest.raises(ValueError, match="jaccard_threshold"):
        load(EngineConfig, {"jaccard_threshold": "2"}, environ={})


def test_configs_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        EngineConfig().num_perm = 3  # type: ignore[misc]


# --------------------------------------------------------------------------------------- secrets
def test_redacted_masks_the_password() -> None:
    config = ServiceConfig(sasl_username="user", sasl_password="hunter2")
    out = redacted(config)
    assert out["sasl_password"] == "***"
    assert "hunter2" not in repr(out)
    assert out["sasl_username"] == "user"
    assert {k: v for k, v in out.items() if k != "sasl_password"} == \
        {k: v for k, v in dataclasses.asdict(config).items() if k != "sasl_password"}


def test_redacted_leaves_empty_secret_and_engine_config() -> None:
    assert redacted(ServiceConfig())["sasl_password"] == ""
    assert redacted(EngineConfig(retention=60)) == dataclasses.asdict(EngineConfig(retention=60))


def test_only_the_password_is_secret() -> None:
    assert [f.name for _, f in ALL_FIELDS if f.metadata.get("secret")] == ["sasl_password"]


# ------------------------------------------------------------------------------- reference table
def test_markdown_table_covers_every_field() -> None:
    table = markdown_table()
    lines = table.splitlines()
    assert lines[0] == "| flag | environment variable | default | meaning |"
    assert len(lines) == 2 + len(ALL_FIELDS)
    for (_, f), line in zip(ALL_FIELDS, lines[2:], strict=True):
        flag = "--" + f.name.replace("_", "-")
        assert line.startswith(f"| `{flag}` | `{env_name(f)}` |")
        assert f.metadata["help"] in line
        if f.default not in (None, ""):
            show = f.metadata.get("show")
            shown = show(f.default) if show else f.default
            assert f"`{shown}`" in line
            if show:  # the table shows the default as a user writes it, and it parses back
                assert f.metadata["parse"](shown) == f.default
    assert table.count("`--sasl-password`") == 1


def test_every_field_has_help_and_a_flag() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser, EngineConfig)
    add_arguments(parser, ServiceConfig)
    help_text = parser.format_help()
    for _, f in ALL_FIELDS:
        assert f.metadata["help"]
        assert flag_name(f) in help_text
        assert env_name(f) in help_text


def test_the_readme_holds_the_reference_table_as_the_code_prints_it() -> None:
    """The README's configuration table is ``stream-dedup config --markdown``'s, row for row."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert markdown_table() in readme, "README's configuration table is stale: paste `stream-dedup config --markdown`"
