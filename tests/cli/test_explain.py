"""stream-dedup explain: the decision on B after A with every measure of the pair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stream_dedup.cli import main

STORY = ("The city council voted on Tuesday to close the old bridge over the river for repairs that are "
         "expected to last most of the summer, officials said, adding that buses would run a free shuttle "
         "between the two banks while the work is done and that cyclists could still use the footpath.")


def _write(path: Path, rid: str, text: str, indent: int | None = None) -> str:
    path.write_text(json.dumps({"id": rid, "text": text}, indent=indent))
    return str(path)


def _explain(capsys, *argv: str) -> dict:
    assert main(["explain", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_explain_a_copy_and_an_unrelated_text(tmp_path: Path, capsys) -> None:
    a = _write(tmp_path / "a.json", "a", STORY)
    b = _write(tmp_path / "b.json", "b", "By Lena Fischer, Reuters\n\n" + STORY, indent=2)
    out = _explain(capsys, a, b)
    assert out["decision"]["type"] == "duplicate-of" and out["decision"]["duplicate_of"] == "a"
    assert out["decision"]["method"] in out["rules_passed"] and out["jaccard"] >= 0.5
    assert set(out["containment"]) == {"new_in_earlier", "earlier_in_new"}
    c = _write(tmp_path / "c.json", "c", "A completely different story about the weather in the mountains "
                                          "this weekend, with snow expected above two thousand metres.")
    out = _explain(capsys, a, c)
    assert out["decision"]["type"] == "new" and out["rules_passed"] == []


def test_explain_takes_engine_flags(tmp_path: Path, capsys) -> None:
    a = _write(tmp_path / "a.json", "a", "Hungarian foreign minister says sanctions against Moscow failed")
    b = _write(tmp_path / "b.jsonl", "b", "Hungarian foreign minister says sanctions against Moscow worked")
    out = _explain(capsys, a, b)
    assert out["short_text"] == {"a": True, "b": True} and out["decision"]["type"] == "new"
    out = _explain(capsys, a, b, "--short-text-words", "0")
    assert out["decision"]["type"] == "duplicate-of" and "minhash" in out["rules_passed"]


def test_explain_shows_the_rewrite_rule(tmp_path: Path, capsys) -> None:
    a = _write(tmp_path / "a.json", "a", STORY)
    b = _write(tmp_path / "b.json", "b", "A completely different story about the weather in the mountains.")
    out = _explain(capsys, a, b)
    assert set(out["rewrite"]) == {"jaccard_band", "identity_pairs_shared", "share_of_smaller_sketch",
                                   "length_ratio", "word_jaccard"}
    assert out["rewrite"]["jaccard_band"] == [0.3, 0.5] and "rewrite" not in out["rules_passed"]
    assert 0.0 <= out["rewrite"]["word_jaccard"] < 0.75
    assert _explain(capsys, a, b, "--rewrite-word-jaccard", "0")["rewrite"]["word_jaccard"] is None


@pytest.mark.parametrize("second", ["same-id", "missing", "bad"])
def test_explain_usage_errors(tmp_path: Path, capsys, second: str) -> None:
    a = _write(tmp_path / "a.json", "a", STORY)
    b = {"same-id": a, "missing": str(tmp_path / "nope.json"), "bad": str(tmp_path / "bad.json")}[second]
    (tmp_path / "bad.json").write_text("not json")
    assert main(["explain", a, b]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stream-dedup explain: ") and err.count("\n") == 1
