"""stream_dedup.bulk_histogram: a BulkHistogram given values in batches exposes what a
prometheus_client Histogram given the same values one by one exposes."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from stream_dedup.bulk_histogram import BulkHistogram
from stream_dedup.metrics import CANDIDATE_BUCKETS, LATENCY_BUCKETS, SIMILARITY_BUCKETS, Metrics

_CREATED = re.compile(rb"^(\w+_created) \S+$", re.M)


def _pair(buckets: tuple[float, ...]) -> tuple[Histogram, BulkHistogram, CollectorRegistry, CollectorRegistry]:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    return (Histogram("h_seconds", "A histogram.", buckets=buckets, registry=theirs),
            BulkHistogram("h_seconds", "A histogram.", buckets, registry=ours), theirs, ours)


def _exposed(registry: CollectorRegistry) -> bytes:
    """The text exposition, the ``_created`` timestamps (two clocks) masked."""
    return _CREATED.sub(rb"\1 <created>", generate_latest(registry))


VALUES = st.floats(min_value=-1.0, max_value=2000.0, allow_nan=False) | st.sampled_from(
    [0.0, 0.0005, 1.0, 0.1, 5.0, 250.0, 1000.0, 0.99, math.inf])


@settings(max_examples=300, deadline=None)
@given(buckets=st.sampled_from([LATENCY_BUCKETS, CANDIDATE_BUCKETS, SIMILARITY_BUCKETS]),
       batches=st.lists(st.lists(VALUES, max_size=40), max_size=6), singles=st.lists(VALUES, max_size=5))
def test_batches_expose_what_one_value_at_a_time_exposes(buckets: tuple[float, ...], batches: list[list[float]],
                                                         singles: list[float]) -> None:
    """Every bound hit exactly (a value equal to a bound is in that bound's bucket), values past the
    last bound, the sum added in the same order (the same float)."""
    theirs, ours, their_registry, our_registry = _pair(buckets)
    for batch in batches:
        for value in batch:
            theirs.observe(value)
        ours.observe_many(batch)
    for value in singles:
        theirs.observe(value)
        ours.observe(value)
    assert _exposed(our_registry) == _exposed(their_registry)
    assert ours.count == sum(len(b) for b in batches) + len(singles)


def test_a_nan_is_in_no_bucket_and_makes_the_sum_nan_as_there() -> None:
    theirs, ours, their_registry, our_registry = _pair(LATENCY_BUCKETS)
    for value in (0.01, math.nan, 3.0):
        theirs.observe(value)
    ours.observe_many([0.01, math.nan])
    ours.observe(3.0)
    assert _exposed(our_registry) == _exposed(their_registry) and b"h_seconds_sum NaN" in _exposed(our_registry)
    ours.observe(math.nan)
    assert ours.count == 2


def test_created_series_follow_prometheus_clients_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, _, registry = _pair(LATENCY_BUCKETS)
    assert b"h_seconds_created" in generate_latest(registry)
    monkeypatch.setenv("PROMETHEUS_DISABLE_CREATED_SERIES", "True")
    assert b"h_seconds_created" not in generate_latest(registry)


def test_bad_bounds_are_refused_and_a_name_twice_too() -> None:
    for bounds in ((), (2.0, 1.0), (-1.0, 1.0), (math.inf,)):
        with pytest.raises(ValueError, match="bucket"):
            BulkHistogram("h", "h", bounds, registry=None)
    registry = CollectorRegistry()
    BulkHistogram("h_seconds", "h", (1.0,), registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        Histogram("h_seconds", "h", registry=registry)


def test_the_decision_stages_histograms_take_batches() -> None:
    """The metrics the decision stage observes per article are bulk histograms, exposed under their names."""
    m = Metrics()
    for histogram in (m.processing_seconds, m.end_to_end_seconds, m.candidates, m.similarity):
        assert isinstance(histogram, BulkHistogram)
        histogram.observe_many([0.5, 1.0])
    text = generate_latest(m.registry)
    for name in ("stream_dedup_processing_seconds", "stream_dedup_end_to_end_latency_seconds",
                 "stream_dedup_candidates", "stream_dedup_similarity"):
        assert f"{name}_count 2.0".encode() in text and f'{name}_bucket{{le="1.0"}} 2.0'.encode() in text
