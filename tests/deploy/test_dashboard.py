"""The Grafana dashboard shipped with the chart queries only metrics the service exports."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stream_dedup.metrics import exported_metric_names

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "stream-dedup"
DASHBOARD = CHART_DIR / "dashboards" / "stream-dedup.json"
METRIC_RE = re.compile(r"\bstream_dedup_[A-Za-z0-9_:]*")


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def all_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # collapsed rows nest their panels


def panel_exprs(panel: dict[str, Any]) -> list[str]:
    return [t["expr"] for t in panel.get("targets", []) if t.get("expr")]


def variable_queries(dashboard: dict[str, Any]) -> list[str]:
    out = []
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var.get("query")
        out.append(query.get("query", "") if isinstance(query, dict) else str(query or ""))
        out.append(var.get("definition", ""))
    return [q for q in out if q]


def compact(expr: str) -> str:
    return re.sub(r"\s+", "", expr)


def test_valid_json_with_identity(dashboard: dict[str, Any]) -> None:
    assert isinstance(dashboard["uid"], str) and re.fullmatch(r"[A-Za-z0-9_-]{1,40}", dashboard["uid"])
    assert dashboard["title"]
    assert isinstance(dashboard.get("schemaVersion"), int)
    # The provisioning sidecar rejects dashboards carrying a numeric database id.
    assert dashboard.get("id") is None


def test_every_queried_metric_is_exported(dashboard: dict[str, Any]) -> None:
    exported = exported_metric_names()
    queries = [e for p in all_panels(dashboard) for e in panel_exprs(p)] + variable_queries(dashboard)
    used = {name for q in queries for name in METRIC_RE.findall(q)}
    assert used, "no stream_dedup_ metric found in any query"
    unknown = sorted(used - exported)
    assert not unknown, f"dashboard queries metrics stream_dedup.metrics does not export: {unknown}"


def test_every_panel_has_a_query_and_unique_id(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in all_panels(dashboard)]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for panel in all_panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel.get("title"), panel
        assert panel_exprs(panel), f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target.get("refId")


def test_uses_a_datasource_variable(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    ds_vars = [name for name, v in variables.items() if v["type"] == "datasource" and v["query"] == "prometheus"]
    assert ds_vars, "no Prometheus datasource template variable"
    refs = {f"${name}" for name in ds_vars} | {f"${{{name}}}" for name in ds_vars}
    for panel in all_panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] in refs, f"panel {panel['title']!r} uses a fixed datasource"
        for target in panel["targets"]:
            assert target.get("datasource", panel["datasource"])["uid"] in refs
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"]["uid"] in refs
    # Every variable a query uses is defined.
    for panel in all_panels(dashboard):
        for expr in panel_exprs(panel):
            for name in re.findall(r"\$(?!__)\{?(\w+)", expr):
                assert name in variables, f"{panel['title']!r} uses undefined ${name}"


def _quantile(exprs: list[str], q: str, bucket: str) -> bool:
    return any(f"histogram_quantile({q}," in compact(e) and bucket in e for e in exprs)


# One entry per required view: (description, predicate over the exprs of ONE panel).
REQUIRED_VIEWS = {
    "articles/s by result": lambda ex: any(
        "rate(stream_dedup_articles_total" in compact(e) and "by(result)" in compact(e) for e in ex),
    "duplicate ratio": lambda ex: any(
        'result="duplicate"' in compact(e) and "/" in e and e.count("stream_dedup_articles_total") >= 2
        for e in ex),
    "processing latency p50 and p99": lambda ex: _quantile(ex, "0.5", "stream_dedup_processing_seconds_bucket")
    and _quantile(ex, "0.99", "stream_dedup_processing_seconds_bucket"),
    "end-to-end latency p99": lambda ex: _quantile(ex, "0.99", "stream_dedup_end_to_end_latency_seconds_bucket"),
    "candidates per article": lambda ex: any("stream_dedup_candidates_" in e for e in ex),
    "dead letters by reason": lambda ex: any(
        "stream_dedup_dead_letters_total" in e and "by(reason)" in compact(e) for e in ex),
    "consumer lag": lambda ex: any("stream_dedup_consumer_lag_messages" in e for e in ex),
    "index articles": lambda ex: any(re.search(r"stream_dedup_index_articles\b", e) for e in ex),
    "index size bytes": lambda ex: any("stream_dedup_index_size_bytes" in e for e in ex),
    "duplicates by method": lambda ex: any(
        "stream_dedup_duplicates_total" in e and "by(method)" in compact(e) for e in ex),
}


@pytest.mark.parametrize("view", sorted(REQUIRED_VIEWS))
def test_required_view_has_a_panel(dashboard: dict[str, Any], view: str) -> None:
    predicate = REQUIRED_VIEWS[view]
    panels = [p["title"] for p in all_panels(dashboard) if p["type"] != "row" and predicate(panel_exprs(p))]
    assert panels, f"no panel shows {view}"


def test_rates_use_counters_and_quantiles_use_buckets(dashboard: dict[str, Any]) -> None:
    """rate() only over counters/histogram series; histogram_quantile only over _bucket."""
    for panel in all_panels(dashboard):
        for expr in panel_exprs(panel):
            for name in re.findall(r"rate\((stream_dedup_\w+)", compact(expr)):
                assert name.endswith(("_total", "_bucket", "_sum", "_count")), f"rate() of gauge {name}"
            if "histogram_quantile(" in expr:
                assert "_bucket" in expr, expr
                assert re.search(r"by\([^)]*\ble\b", compact(expr)), f"quantile without 'by (le)': {expr}"


def test_configmap_renders_the_dashboard(render) -> None:
    docs = render("--set", "dashboard.enabled=true")
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    (content,) = cm["data"].values()
    assert json.loads(content) == json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert [d for d in render() if d["kind"] == "ConfigMap"] == []
