"""The progress record's format (the broker round trip is in tests/integration/test_progress_topic.py)."""

from __future__ import annotations

import pytest

from stream_dedup.service import progress


@pytest.mark.parametrize("offset", [0, 1, 2**40])
def test_encode_decode(offset):
    assert progress.decode(progress.encode(offset)) == offset


@pytest.mark.parametrize("value", [None, b"", b"not json", b"[1]", b'{"next_offset": -1}', b'{"next_offset": true}',
                                   b'{"next_offset": "5"}', b'{"next_offset": 1.5}', b"{}"])
def test_decode_refuses_what_is_not_a_position(value):
    assert progress.decode(value) is None


def test_a_begin_record_is_not_a_position():
    assert progress.decode(progress.encode_begin(12)) is None


def test_names():
    assert progress.progress_topic("articles.signatures") == "articles.signatures.progress"
    assert progress.progress_key("articles.signatures") == b"articles.signatures-0"
