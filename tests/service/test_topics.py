"""Signatures topic retention follows the engine retention (a catch-up must be able to replay)."""

from __future__ import annotations

from stream_dedup.config import EngineConfig
from stream_dedup.service.topics import DAY_MS, signatures_retention_ms


def test_signatures_retention():
    assert signatures_retention_ms(EngineConfig()) == -1
    assert signatures_retention_ms(EngineConfig(retention=7 * 86400.0)) == 8 * DAY_MS
