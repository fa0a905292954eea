"""All configuration in one place.

Every setting is a field of :class:`EngineConfig` (the algorithm) or :class:`ServiceConfig`
(the Kafka worker).  Each field carries its environment variable, its CLI flag and its help
text in the dataclass metadata, so the CLI, the environment loader and the README table
(``stream-dedup config --markdown``) are all generated from this file and cannot drift.

Precedence: CLI flag > environment variable > default.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from .headline import flag_word_errors

ENV_PREFIX = "STREAM_DEDUP_"
MAX_SIMHASH_TABLES = 254  # stream_dedup.simhash_table.MAX_TABLES (a table number + 1 is one byte of a slot)

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: str | float | int | None) -> float | None:
    """Parse ``"7d"``, ``"12h"``, ``"90m"``, ``"30s"``, ``"3600"`` into seconds.

    ``None``, ``""``, ``"0"``, ``"none"`` and ``"off"`` mean "no retention" (``None``).
    """
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value) if value > 0 else None
    text = value.strip().lower()
    if text in ("", "0", "none", "off", "never"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smhdw]?)", text)
    if not m:
        raise ValueError(f"invalid duration {value!r}: use e.g. 30s, 90m, 12h, 7d, 2w")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2) or "s"]


MIN_MEMORY = 32 << 20  # the smallest --memory accepted
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_size(value: str | int) -> int:
    """``"512MB"``, ``"2GB"``, ``"1.5g"``, ``"268435456"`` -> bytes (binary units: 1 MB = 2^20 bytes)."""
    if isinstance(value, int):
        size = value
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"invalid size {value!r}: use e.g. 512MB, 2GB")
        size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    return size


def format_size(n: int) -> str:
    """Bytes as the shortest exact ``GB`` / ``MB`` / ``KB`` form (``2GB``, ``1536MB``)."""
    for unit, shift in (("GB", 30), ("MB", 20), ("KB", 10)):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _opt(default: Any, help: str, *, env: str | None = None, secret: bool = False,
         parse: Any = None, show: Any = None) -> Any:
    """A setting: ``parse`` turns a flag or environment value into the field's value, ``show`` the
    default back into the form a user writes (for the help and the README table)."""
    return field(default=default, metadata={"help": help, "env": env, "secret": secret, "parse": parse,
                                            "show": show})


def _shown(f: dataclasses.Field) -> Any:
    show = f.metadata.get("show")
    return show(f.default) if show is not None else f.default


@dataclass(frozen=True)
class EngineConfig:
    """Parameters of the near-duplicate engine (text -> features -> sketches -> index -> decision)."""

    num_perm: int = _opt(128, "MinHash permutations (signature length).")
    shingle_size: int = _opt(4, "Word k-shingle length (k); chosen by bench/quality.py.")
    char_shingles: int = _opt(
        0, "Use character k-grams of this length instead of word shingles (0 = word shingles).")
    fold_diacritics: int = _opt(
        1, "Fold Latin letters to their base letter before shingling (café = cafe, Łódź = lodz); 0 = keep "
           "diacritics. Other folding (NFKC, case, homoglyphs, invisible characters) is always on.")
    lsh_threshold: float = _opt(
        0.3, "Similarity at which LSH banding should start proposing candidates (b, r are tuned for it).")
    lsh_bands: int = _opt(0, "LSH bands b (0 = derive b, r from --lsh-threshold).")
    lsh_rows: int = _opt(0, "LSH rows per band r (0 = derive from --lsh-threshold).")
    jaccard_threshold: float = _opt(0.5, "Estimated Jaccard at or above which a candidate is a duplicate.")
    containment_threshold: float = _opt(
        0.8, "Estimated containment |A∩B|/|A| of the new article A in an earlier B that makes A a duplicate.")
    min_containment_shingles: int = _opt(
        20, "Containment is only trusted for articles with at least this many shingles.")
    containment_both_ways: int = _opt(
        1, "1 = also call the new article A a duplicate when an earlier B is contained in it (|A∩B|/|B| >= "
           "--containment-threshold: the original inside a longer page); 0 = only A in B.")
    min_contained_earlier_shingles: int = _opt(
        60, "An earlier article counts as contained in a new one only if it has at least this many shingles: "
            "shorter texts (a site's newsletter blurb stored as an article) recur inside many different pages.")
    passage_window: int = _opt(
        32, "Passage anchors for containment candidates (excerpts, the original inside a page): the smallest "
            "shingle hash of every window of this many word shingles is indexed (winnowing), so a shared run of "
            "window + shingle size - 1 words shares an anchor (0 = no anchors).")
    passage_min_shared: int = _opt(
        3, "A stored article sharing at least this many usable passage anchors with the new one is a candidate; "
           "its containment is then also measured on the anchors.")
    passage_common_docs: int = _opt(
        8, "A passage anchor held by this many indexed articles is boilerplate (site furniture, cookie banners, "
           "newsletter blurbs): its list is no longer extended and it counts neither as evidence nor in a "
           "containment.")
    short_text_words: int = _opt(
        10, "Texts of fewer words than this (distinct word shingles + k - 1) are short: they match only by "
            "exact normalised text or by --short-text-jaccard, never by containment or SimHash (0 = no rule).")
    short_text_jaccard: float = _opt(
        0.8, "Estimated Jaccard a short text needs with a candidate (1 = exact normalised match only).")
    headline_flags: int = _opt(
        1, "1 = strip a leading headline flag (BREAKING:, WATCH:, UPDATE 2-, Opinion |: 1-3 flag words, see README "
           "'Short texts') from a text that then has 3 to --short-text-words - 1 words, before fingerprinting; 0 = keep.")
    headline_flag_words: str = _opt(
        "", "More headline flag words for --headline-flags, comma-separated (e.g. SPORTS,MARKETS,WORLD): a feed's "
            "own section tags, stripped by the same rule as the built-in ones (letters, digits, _; any case).")
    identity_threshold: float = _opt(
        0.5, "A text match is not a duplicate when, among the contexts both articles give an identity token "
             "(number, capitalised name), fewer than this share hold a same token: a look-alike report, new, "
             "with template_of (0 = no check, and no identity sketch is computed: about 35 us less per article).")
    identity_min_tokens: int = _opt(
        4, "The identity check needs at least this many contexts in common (else it does not apply).")
    rewrite_jaccard: float = _opt(
        0.3, "The rewrite rule (same story loosely rewritten): a candidate with estimated Jaccard at or above this "
             "and below --jaccard-threshold, of about the same length, is a duplicate when its content words agree "
             "(--rewrite-word-jaccard; else its identity pairs, --rewrite-min-pairs); 0 = no rewrite rule.")
    rewrite_word_jaccard: float = _opt(
        0.75, "The rewrite rule's second signal: a candidate in its band is a duplicate when the content-word set "
              "Jaccard estimated from the 64-byte word bitmaps is at least this (0 = identity pairs instead, "
              "and no bitmap is computed or stored).")
    rewrite_min_pairs: int = _opt(
        8, "Identity pairs (of at most 48 per sketch) a candidate of the rewrite rule must share with the new article "
           "(and 70 per cent of the smaller sketch) when the word bitmaps cannot be compared.")
    simhash_k: int = _opt(3, "SimHash: fingerprints within this Hamming distance are near-duplicates.")
    simhash_blocks: int = _opt(5, "SimHash permuted tables: split 64 bits into this many blocks (> k).")
    simhash_min_jaccard: float = _opt(
        0.2, "A SimHash match must also have at least this estimated Jaccard (guards short texts).")
    index_below_similarity: float = _opt(
        0.95, "Duplicates at least this similar (estimated Jaccard) to their match are not added to the LSH "
             "buckets and SimHash tables: a later copy finds their match instead (1 = index every one).")
    max_text_bytes: int = _opt(2_000_000, "Records whose text/html is longer than this (UTF-8 bytes) are rejected.")
    retention: float | None = _opt(
        None, "Evict articles first seen longer ago than this (e.g. 7d, 12h; empty = keep forever).",
        parse=parse_duration)
    seed: int = _opt(1, "Seed of every hash function. Changing it invalidates an existing index.")
    memory: int = _opt(
        2 << 30, "Memory for the index (RocksDB block cache, bloom filters and index blocks, memtables: one "
        "budget), e.g. 512MB, 2GB. The LSH buckets, passage lists, SimHash tables and id and exact-hash tables are "
        "kept in memory outside it (and a cache of recent article records, 1/64 of it up to 64 MB): "
        "~1.1 GB per million articles, up to ~1.7 GB while a table grows (RSS 1.7 GB at 1,000,000 articles with "
        "2GB). With the default the rate does not collapse up to 1,000,000 articles (the median chunk of every "
        "tenth of the run at 83 percent of the first tenth's rate or more, README: Measured quality and speed); "
        "below the index's working set the rate falls as the index grows.",
        parse=parse_size, show=format_size)
    id_field: str = _opt("id", "Input field that holds the article id.")
    text_field: str = _opt("text", "Input field that holds plain text.")
    html_field: str = _opt("html", "Input field that holds HTML (used when the text field is absent).")
    title_field: str = _opt("title", "Input field that holds the title (optional; not used for matching).")

    def __post_init__(self) -> None:
        errors = []
        if self.num_perm < 8:
            errors.append("num_perm must be >= 8")
        if self.shingle_size < 1:
            errors.append("shingle_size must be >= 1")
        for name in ("fold_diacritics", "containment_both_ways", "headline_flags"):
            if getattr(self, name) not in (0, 1):
                errors.append(f"{name} must be 0 or 1")
        errors += flag_word_errors(self.headline_flag_words)
        if self.passage_window < 0:
            errors.append("passage_window must be >= 0")
        if self.passage_min_shared < 1:
            errors.append("passage_min_shared must be >= 1")
        if not 1 <= self.passage_common_docs <= 1024:
            errors.append("passage_common_docs must be within [1, 1024]")
        if self.short_text_words < 0:
            errors.append("short_text_words must be >= 0")
        if self.rewrite_min_pairs < 1:
            errors.append("rewrite_min_pairs must be >= 1")
        if self.char_shingles < 0:
            errors.append("char_shingles must be >= 0")
        for name in ("lsh_threshold", "jaccard_threshold", "containment_threshold", "simhash_min_jaccard",
                     "index_below_similarity", "short_text_jaccard", "identity_threshold", "rewrite_jaccard",
                     "rewrite_word_jaccard"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                errors.append(f"{name} must be within [0, 1]")
        if (self.lsh_bands > 0) != (self.lsh_rows > 0):
            errors.append("set both lsh_bands and lsh_rows, or neither")
        if self.lsh_bands and self.lsh_bands * self.lsh_rows > self.num_perm:
            errors.append("lsh_bands * lsh_rows must be <= num_perm")
        if not 0 <= self.simhash_k < self.simhash_blocks <= 64:
            errors.append("need 0 <= simhash_k < simhash_blocks <= 64")
        elif math.comb(self.simhash_blocks, self.simhash_k) > MAX_SIMHASH_TABLES:
            errors.append(f"simhash_blocks={self.simhash_blocks}, simhash_k={self.simhash_k} needs "
                          f"C({self.simhash_blocks},{self.simhash_k}) = "
                          f"{math.comb(self.simhash_blocks, self.simhash_k)} tables; at most "
                          f"{MAX_SIMHASH_TABLES} are supported")
        if self.memory < MIN_MEMORY:
            errors.append(f"memory must be >= {format_size(MIN_MEMORY)}")
        if self.max_text_bytes <= 0:
            errors.append("max_text_bytes must be > 0")
        if errors:
            raise ValueError("invalid engine configuration: " + "; ".join(errors))


@dataclass(frozen=True)
class ServiceConfig:
    """Settings of the Kafka worker (``stream-dedup worker``)."""

    bootstrap_servers: str = _opt(
        "127.0.0.1:9092", "Kafka bootstrap servers (comma separated).", env="KAFKA_BOOTSTRAP_SERVERS")
    app_id: str = _opt("stream-dedup", "App id: stage 1's consumer group id (the decision stage's is <app-id>.decisions) "
                       "and the prefix of the decision stage's transactional id.")
    input_topic: str = _opt("articles", "Topic the articles are read from.")
    new_topic: str = _opt("articles.new", "Topic that receives 'new' events.")
    duplicates_topic: str = _opt("articles.duplicates", "Topic that receives 'duplicate-of' events.")
    dlq_topic: str = _opt("articles.dlq", "Dead-letter topic for records that cannot be processed.")
    signatures_topic: str = _opt(
        "articles.signatures", "Internal single-partition topic feeding the ordered decision stage (and, with "
        "--order-wait-workers, its .progress topic: stage 1's progress records, read across workers).")
    data_dir: str = _opt("./data", "Directory for the worker's RocksDB state (the index) and its instance id.")
    metrics_port: int = _opt(9108, "Port of the HTTP server for /metrics, /healthz and /readyz.")
    metrics_host: str = _opt("0.0.0.0", "Address the metrics/health HTTP server binds to.")
    security_protocol: str = _opt(
        "PLAINTEXT", "Kafka security.protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.",
        env="KAFKA_SECURITY_PROTOCOL")
    sasl_mechanism: str = _opt(
        "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.", env="KAFKA_SASL_MECHANISM")
    sasl_username: str = _opt("", "SASL username.", env="KAFKA_SASL_USERNAME")
    sasl_password: str = _opt("", "SASL password (never logged).", env="KAFKA_SASL_PASSWORD", secret=True)
    ssl_cafile: str = _opt("", "CA bundle (PEM) to verify the brokers' certificates.", env="KAFKA_SSL_CAFILE")
    log_level: str = _opt("INFO", "Log level (DEBUG, INFO, WARNING, ERROR).")
    batch_size: int = _opt(
        200, "Worker: most records a stage handles before it awaits the broker's acknowledgements.")
    batch_wait: float = _opt(
        0.005, "Worker, --stage1-client faust: seconds Faust's stage 1 waits to fill a batch (bounds the latency "
        "it adds; the confluent stage 1 takes what has arrived and never waits to fill one).")
    commit_interval: float = _opt(
        1.0, "Worker: seconds between offset commits (only acknowledged work is ever committed).")
    session_timeout: float = _opt(
        30.0, "Worker: consumer-group session timeout in seconds (how soon a dead worker's partitions move).")
    instance_id: str = _opt(
        "", "Worker: static group membership id, so that a restarted worker gets its partitions back at "
        "once instead of after --session-timeout; empty = one generated and kept in <data-dir>/instance-id.")
    order_wait: float = _opt(
        0.3, "Worker: longest stage 1 holds a record to merge its input partitions in timestamp order while "
        "another partition has records still to come, or, for a record older than this (a backlog), while "
        "another partition has none (0 = no reordering).")
    order_wait_workers: float = _opt(
        5.0, "Worker: longest stage 1 holds a record while another worker's input partition is behind it "
        "(a restarted worker's backlog) or its owner has fallen silent (killed, cut off), so that records "
        "of different workers are decided in timestamp order too; only where a worker owns some but not "
        "all input partitions (0 = off; with --stage1-client confluent).")
    transaction_size: int = _opt(
        1000, "Worker: most signature records the decision stage decides in one Kafka transaction (fewer "
        "when fewer arrive: a transaction never stays open longer than --transaction-ms).")
    transaction_ms: float = _opt(
        10.0, "Worker: longest the decision stage collects records into one transaction before committing "
        "it, in milliseconds (bounds the latency it adds; longer = fewer, larger transactions).")
    receipt_sweep: float = _opt(
        60.0, "Worker: seconds between sweeps of the decision stage's delivery receipts (one per input record, "
        "kept until stage 1 can no longer send that record twice; 0 = keep them all).")
    lists_snapshot_every: float | None = _opt(
        600.0, "Worker, and dedup with --state: seconds between snapshots of the index's in-memory lists (LSH "
        "buckets, passage lists, "
        "SimHash tables), so that a restart after a crash loads the latest and files again only what changed "
        "since instead of building them from the whole index (at 1M articles: 0.5-0.9 s against 7.2 s); writing "
        "one pauses the decisions ~0.5 s per million articles (written past the page cache, synced in a thread), "
        "and the file takes 1.2-1.5 GB per million articles beside the index (empty or 0 = only at a clean stop).",
        parse=parse_duration)
    standby_follow: bool = _opt(
        True, "Worker: a decision stage that owns nothing (a standby) keeps its index current by applying the "
        "signature records the owner has committed, so that a takeover replays seconds of them, not the "
        "whole history (~5-7 min per million articles); costs the standby the owner's decide CPU.")
    standby_ready_behind: int = _opt(
        10000, "Worker: a following standby is not ready while its index is more than this many signature "
        "records behind the group's committed decisions (a takeover would replay them first), so that a "
        "rolling update or a drain waits for it before stopping the owner (0 = ready however far behind).")
    fingerprint_processes: int = _opt(
        1, "Worker: stage-1 processes (each consumes its share of the input partitions, parses, fingerprints "
        "and sends signatures); with --stage1-client faust, processes that parse and fingerprint beside Faust's "
        "event loop (0 = in the event loop).")
    stage1_client: str = _opt(
        "confluent", "Worker: the Kafka client stage 1 consumes articles with: 'confluent' (librdkafka, in "
        "--fingerprint-processes processes; ~2.5 us of CPU per record consumed) or 'faust' (a Faust agent; "
        "~160 us per record). Workers of one group must use the same one.")


C = TypeVar("C", EngineConfig, ServiceConfig)


def env_name(f: dataclasses.Field) -> str:
    return f.metadata.get("env") or ENV_PREFIX + f.name.upper()


def flag_name(f: dataclasses.Field) -> str:
    return "--" + f.name.replace("_", "-")


def _convert(f: dataclasses.Field, raw: Any) -> Any:
    parse = f.metadata.get("parse")
    if parse is not None:
        return parse(raw)
    if isinstance(raw, str):
        kind = type(f.default)
        if kind is bool:
            return raw.strip().lower() in ("1", "true", "yes", "on")
        if kind in (int, float):
            try:
                return kind(raw)
            except ValueError:
                raise ValueError(f"{env_name(f)}/{flag_name(f)}: expected {kind.__name__}, got {raw!r}") from None
    return raw


#: the ServiceConfig fields a plain Kafka client needs (``produce``, ``tail``): connection and security
KAFKA_CLIENT_FIELDS = ("bootstrap_servers", "security_protocol", "sasl_mechanism", "sasl_username",
                       "sasl_password", "ssl_cafile", "log_level")


def add_arguments(parser: argparse.ArgumentParser, cls: type, only: tuple[str, ...] | None = None) -> None:
    """Add one ``--flag`` per field of ``cls`` (or of the fields named in ``only``); unset flags stay
    ``None`` so env/defaults apply."""
    group = parser.add_argument_group(cls.__name__)
    for f in fields(cls):
        if only is not None and f.name not in only:
            continue
        default = _shown(f)
        shown = "" if f.metadata.get("secret") else f" (default: {default!r})"
        group.add_argument(flag_name(f), dest=f.name, default=None, metavar=f.name.upper(),
                           help=f"{f.metadata['help']} [env {env_name(f)}]{shown}")


def load(cls: type[C], args: argparse.Namespace | Mapping[str, Any] | None = None,
         environ: Mapping[str, str] | None = None) -> C:
    """Build ``cls`` from CLI values (``args``) over environment variables over defaults."""
    environ = os.environ if environ is None else environ
    given = vars(args) if isinstance(args, argparse.Namespace) else dict(args or {})
    values: dict[str, Any] = {}
    for f in fields(cls):
        if given.get(f.name) is not None:
            values[f.name] = _convert(f, given[f.name])
        elif env_name(f) in environ:
            values[f.name] = _convert(f, environ[env_name(f)])
    return cls(**values)


def redacted(config: Any) -> dict[str, Any]:
    """The config as a dict with secrets masked: the only form that may be logged."""
    out = {}
    for f in fields(config):
        value = getattr(config, f.name)
        out[f.name] = "***" if f.metadata.get("secret") and value else value
    return out


def markdown_table() -> str:
    """The configuration reference table of the README."""
    rows = ["| flag | environment variable | default | meaning |", "| --- | --- | --- | --- |"]
    for cls in (EngineConfig, ServiceConfig):
        for f in fields(cls):
            default = "" if f.default in (None, "") else f"`{_shown(f)}`"
            rows.append(f"| `{flag_name(f)}` | `{env_name(f)}` | {default} | {f.metadata['help']} |")
    return "\n".join(rows)
