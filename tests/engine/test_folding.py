"""stream_dedup.folding: invisible characters, NFKC, homoglyphs, case, Latin diacritics; and the
per-script tokenisation rule (Chinese, Japanese, Thai, Korean: character k-grams)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_dedup.config import EngineConfig
from stream_dedup.engine import Deduplicator
from stream_dedup.fingerprint import Fingerprinter
from stream_dedup.folding import fold
from stream_dedup.record import Article
from stream_dedup.text import tokenize


@pytest.mark.parametrize(("raw", "expected"), [
    ("Café au lait", "cafe au lait"),
    ("Łódź, Kraków, Zürich, Ærø", "lodz, krakow, zurich, aero"),
    ("Nguyễn Tấn Dũng", "nguyen tan dung"),
    ("q\u0301", "q"),                                   # a mark NFKC cannot compose
    ("Mоs\u0441ow", "moscow"),                           # Cyrillic о and с inside a Latin word
    ("ΒΒC Νews", "bbc news"),                           # Greek capital Beta, Nu
    ("Ｐｒｅｓｉｄｅｎｔ", "president"),                   # full-width forms
    ("pre\u200bsi\u00addent\u2060ial", "presidential"),   # zero-width space, soft hyphen, word joiner
    ("ΣΊΣΥΦΟΣ", "σίσυφοσ"),                             # a Greek word stays Greek (Σ has no look-alike)
    ("Москва сор", "москва сор"),                       # Russian text: not mapped
    ("Ελληνικά ά", "ελληνικά ά"),                       # Greek accents are kept
    ("plain ascii TEXT", "plain ascii text"),
])
def test_fold(raw: str, expected: str) -> None:
    assert fold(raw) == expected


def test_a_wholly_lookalike_word_is_mapped_in_latin_text_only() -> None:
    assert fold("the \u0441\u043e\u0440 of the report") == "the cop of the report"  # "сор" in English
    assert fold("\u0441\u043e\u0440 \u043c\u043e\u0441\u043a\u0432\u0430") == "сор москва"


def test_diacritics_can_be_kept() -> None:
    assert fold("Café Łódź", diacritics=False) == "café łódź"
    assert fold("Mоs\u0441ow", diacritics=False) == "moscow"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_fold_is_idempotent(text: str) -> None:
    once = fold(text)
    assert fold(once) == once


def test_fold_is_idempotent_on_every_code_point() -> None:
    """Each step can make work for an earlier one (U+1C82 case-folds to a Cyrillic look-alike,
    "ǣ" strips to "æ"): every code point, inside a Latin word, folds to a fixed point."""
    bad = []
    for cp in range(0x80, 0x30000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        for text in (chr(cp), f"x{chr(cp)}y"):
            once = fold(text)
            if fold(once) != once:
                bad.append(hex(cp))
    assert not bad, bad[:20]


def _same_fingerprint(a: str, b: str, config: EngineConfig | None = None) -> bool:
    fpr = Fingerprinter(config or EngineConfig())
    fa, fb = fpr.fingerprint_text(a), fpr.fingerprint_text(b)
    assert fa == fpr.fingerprint_reference(a) and fb == fpr.fingerprint_reference(b)
    # the text part; the identity sketch reads capitals (a name is a capitalised word), so it may differ
    return (fa.exact, fa.simhash, fa.n_shingles, fa.minhash.tolist()) == (fb.exact, fb.simhash, fb.n_shingles,
                                                                           fb.minhash.tolist())


def test_folded_spellings_fingerprint_alike() -> None:
    plain = "The cafe in Lodz said the president would visit Moscow on Monday to sign the accord."
    assert _same_fingerprint(plain, "The café in Łódź said the président would visit Mоscow on Monday "
                                    "to sign the ac\u200bcord.")
    assert _same_fingerprint(plain, "ＴＨＥ CAFE IN LODZ said the pre\u00adsident would visit MOSCOW on "
                                    "Monday to sign the accord.")
    # the other side: diacritic folding off, é stays a different letter
    assert not _same_fingerprint(plain, plain.replace("cafe", "café"), EngineConfig(fold_diacritics=0))


@pytest.mark.parametrize(("text", "expected"), [
    ("美国总统周一访问北京", list("美国总统周一访问北京")),                    # Chinese
    ("東京でiPhoneを発表", ["東", "京", "で", "iphone", "を", "発", "表"]),      # Japanese + Latin run
    ("นายกรัฐมนตรีเดินทาง", [c for c in "นายกรัฐมนตรีเดินทาง" if c.isalpha()]),   # Thai (vowel marks are not \w)
    ("서울에서 회의를", ["서", "울", "에", "서", "회", "의", "를"]),             # Korean
])
def test_per_script_tokens(text: str, expected: list[str]) -> None:
    assert tokenize(fold(text)) == [t.encode() for t in expected]


STORIES = {
    "zh": ("国家统计局周一发布数据显示今年前三季度国内生产总值同比增长百分之六点九经济运行保持在合理区间",
           "台风今晚在沿海地区登陆气象部门发布红色预警提醒居民减少外出注意防范强降雨引发的山洪灾害"),
    "ja": ("政府は月曜日に新しい経済対策を発表し中小企業への支援を拡大する方針を明らかにしました",
           "気象庁によると大型の台風が週末に関東地方に接近する見込みで交通機関への影響が懸念されています"),
    "th": ("รัฐบาลประกาศมาตรการกระตุ้นเศรษฐกิจใหม่เพื่อช่วยเหลือผู้ประกอบการรายย่อยทั่วประเทศในปีนี้",
           "กรมอุตุนิยมวิทยาเตือนประชาชนให้ระวังฝนตกหนักและน้ำท่วมฉับพลันในภาคเหนือช่วงสุดสัปดาห์นี้"),
    "ko": ("정부는 월요일 중소기업 지원을 확대하는 새로운 경제 대책을 발표했다고 밝혔습니다",
           "기상청은 대형 태풍이 주말에 남부 지방에 접근할 것으로 예상된다며 주의를 당부했습니다"),
}


@pytest.mark.parametrize("lang", sorted(STORIES))
def test_scripts_without_word_spaces_find_copies_not_other_stories(tmp_path, lang: str) -> None:
    story, other = STORIES[lang]
    with Deduplicator(EngineConfig(), tmp_path) as dedup:
        assert dedup.process(Article(id="a", text=story)).type == "new"
        # a copy with a short addition at the end is a duplicate ...
        copy = dedup.process(Article(id="b", text=story + "。记者" if lang == "zh" else story + " (AP)"))
        assert copy.is_duplicate and copy.duplicate_of == "a"
        # ... another story in the same script is not
        assert dedup.process(Article(id="c", text=other)).type == "new"


def test_an_index_of_another_folding_is_refused(tmp_path) -> None:
    with Deduplicator(EngineConfig(), tmp_path):
        pass
    with pytest.raises(ValueError, match="different settings"):
        Deduplicator(EngineConfig(fold_diacritics=0), tmp_path)
