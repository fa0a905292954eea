"""Text folding before tokenisation: the spellings that hide a copy are made equal.

``fold(text, diacritics=True)`` is applied to every text before it is tokenised, in this order:

1. **Invisible characters** are removed (not turned into spaces, so a word they split is whole
   again): zero-width space/joiners (U+200B-U+200D), word joiner (U+2060), BOM (U+FEFF),
   soft hyphen (U+00AD), Mongolian vowel separator (U+180E).
2. **NFKC**: compatibility forms fold to their plain letters (full-width ``Ａ`` -> ``A``,
   ligatures ``ﬁ`` -> ``fi``, circled digits, ...).
3. **Homoglyphs**: Cyrillic and Greek letters that look like Latin ones (``а е о р с у х і ј ѕ``,
   ``Α Β Ε Η Ι Κ Μ Ν Ο Ρ Τ Υ Χ ο ν``, ...; :data:`HOMOGLYPHS`) become those Latin letters, per
   token (a ``\\w+`` run): only where the whole token then reads as Latin, and only if the token
   already holds a Latin letter (``Mоscow`` with a Cyrillic ``о``) or the text as a whole is
   mostly Latin (a token of nothing but look-alikes inside English text). A real Russian or Greek
   word (``сор``, ``ΣΊΣΥΦΟΣ`` hold letters with no Latin look-alike, or stand in Cyrillic/Greek
   text) is left alone. Mapping happens before case folding because upper and lower case look
   alike differently (Greek ``Η`` is ``H``, ``η`` is ``n``).
4. **Case folding** (``str.casefold``: ``ß`` -> ``ss``, final sigma, ...).
5. **Diacritics** (``diacritics=True``, the default; ``--fold-diacritics 0`` turns it off):
   combining marks are removed from *Latin* letters only (``café`` -> ``cafe``, ``Łódź`` ->
   ``lodz``, ``ø`` -> ``o``, ``đ`` -> ``d``, ``æ`` -> ``ae``); Greek, Cyrillic, Arabic, Devanagari, ... keep
   theirs, because there a mark changes the letter.

Pure-ASCII text is returned after ASCII lower-casing only (every step above is the identity on
ASCII), and the fingerprinter does not even call this for text that is ASCII apart from common
punctuation (see :func:`stream_dedup.text.ascii_equivalent`).

``FOLDING_VERSION`` names this behaviour in the index settings: an index built by another
version is refused, because the same text would no longer give the same tokens.
"""

from __future__ import annotations

import re
import unicodedata

FOLDING_VERSION = 1

INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e"

#: Cyrillic / Greek (and a few Latin IPA) letters that render like a Latin letter, after NFKC
HOMOGLYPHS = {
    # Cyrillic capitals and small letters
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C", "Т": "T",
    "Х": "X", "У": "Y", "І": "I", "Ј": "J", "Ѕ": "S", "Ԁ": "D", "Ԛ": "Q", "Ԝ": "W", "Һ": "H", "Ӏ": "I",
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "і": "i", "ј": "j", "ѕ": "s",
    "ԁ": "d", "ԛ": "q", "ԝ": "w", "һ": "h", "ӏ": "l", "ѵ": "v", "ѡ": "w",
    # Greek capitals and small letters
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
    "ο": "o", "ν": "v", "ρ": "p", "ι": "i", "κ": "k", "υ": "u", "α": "a", "τ": "t", "χ": "x",
    # Latin letters outside ASCII that read as ASCII ones (IPA, dotless i)
    "ɡ": "g", "ɑ": "a", "ı": "i", "ȷ": "j",
}
_HOMOGLYPH_TABLE = str.maketrans(HOMOGLYPHS)


def _is_latin(ch: str) -> bool:
    return ch < "\u0250" or "\u1e00" <= ch <= "\u1eff" or "\u2c60" <= ch <= "\u2c7f" or "\ua720" <= ch <= "\ua7ff"


def _reads_latin(token: str) -> bool:
    """Every letter of ``token`` is Latin or a homoglyph (digits and ``_`` are ASCII, so Latin)."""
    return all(_is_latin(ch) or ch in HOMOGLYPHS for ch in token)


_H = "".join(HOMOGLYPHS)
_LOOKALIKE_TOKEN = re.compile(rf"\b\w*[{_H}]\w*")
# a token holding a Latin letter (in non-Latin text, only such tokens with a look-alike are mapped)
_LATIN_LETTER = "a-zA-Z\u00c0-\u024f\u1e00-\u1eff"
_LATIN_TOKEN = re.compile(rf"\b\w*[{_LATIN_LETTER}]\w*")
_ANY_LATIN = re.compile(f"[{_LATIN_LETTER}]")
_ASCII_LETTERS = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _letter_counts(text: str) -> tuple[int, int]:
    """(ASCII letters, non-ASCII characters): "mostly Latin" is the first larger (look-alikes, accented
    letters and curly quotes count as non-ASCII; a cheap, C-speed proxy for the script of the text)."""
    ascii_bytes = text.encode("ascii", "ignore")
    return len(ascii_bytes) - len(ascii_bytes.translate(None, _ASCII_LETTERS)), len(text) - len(ascii_bytes)


def _fix(m: re.Match) -> str:
    tok = m.group(0)
    return tok.translate(_HOMOGLYPH_TABLE) if _reads_latin(tok) else tok


def map_homoglyphs(text: str) -> str:
    """Rule 3 of the module docstring, on NFKC text (before case folding)."""
    latin, non_ascii = _letter_counts(text)
    if latin == 0 and not _ANY_LATIN.search(text):
        return text
    return (_LOOKALIKE_TOKEN if latin > non_ascii else _LATIN_TOKEN).sub(_fix, text)


# Latin letters without a canonical decomposition that still carry a "diacritic" (stroke, bar, ...)
_LATIN_EXTRA = {"ø": "o", "đ": "d", "ł": "l", "ħ": "h", "ŧ": "t", "ƀ": "b", "ɨ": "i", "ƶ": "z", "ǥ": "g",
                "ɍ": "r", "ð": "d", "ŀ": "l", "æ": "ae", "œ": "oe", "þ": "th"}


def _latin_strip_table() -> dict[str, str]:
    table: dict[str, str] = {}
    for cp in list(range(0xC0, 0x250)) + list(range(0x1E00, 0x1F00)):
        ch = chr(cp)
        if not ch.isalpha():
            continue
        base = "".join(c for c in unicodedata.normalize("NFD", ch) if not unicodedata.combining(c))
        base = unicodedata.normalize("NFC", base)
        if base != ch and base:
            table[ch] = base
    table.update(_LATIN_EXTRA)
    return table


_LATIN_STRIP = _latin_strip_table()
_LATIN_STRIP_KEYS = frozenset(_LATIN_STRIP)
_MARKS = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff"
_MARK_SET = frozenset(ch for lo, hi in ((0x300, 0x36f), (0x1ab0, 0x1aff), (0x1dc0, 0x1dff), (0x20d0, 0x20ff))
                      for ch in map(chr, range(lo, hi + 1)))
# a Latin letter followed by combining marks NFKC could not compose onto it (e.g. q + combining acute)
_LATIN_WITH_MARKS = re.compile(f"([A-Za-z\u00c0-\u024f\u1e00-\u1eff])[{_MARKS}]+")


_LATIN_MARKED = re.compile(f"[{_MARKS}" + "".join(sorted(_LATIN_STRIP)) + "]")


def strip_latin_diacritics(text: str) -> str:
    """Rule 5 of the module docstring on NFKC + casefolded text.

    Python's regex engine and ``str.translate`` are slow per character on non-ASCII strings, so one
    regex scan finds the few marked characters present and only those are replaced (``str.replace``
    is a fast scan); text of other scripts costs that one scan.
    """
    present = set(_LATIN_MARKED.findall(text))
    if not present:
        return text
    if present & _MARK_SET:
        text = _LATIN_WITH_MARKS.sub(r"\1", text)
    for ch in present & _LATIN_STRIP_KEYS:
        text = text.replace(ch, _LATIN_STRIP[ch])
    return text


_HAS_HOMOGLYPH = re.compile(f"[{_H}]")


def fold(text: str, diacritics: bool = True, case: bool = True) -> str:
    """Invisible characters out, NFKC, homoglyphs, case folding, Latin diacritics (module docstring).

    ``case=False`` skips case folding (for :mod:`stream_dedup.identity`, which reads capitals).
    Idempotent: a step can make work for an earlier one (case folding U+1C82 gives a Cyrillic
    look-alike, stripping "ǣ" gives "æ", which folds to "ae"), so text that is still non-ASCII is
    folded again until it no longer changes (a test checks every code point).
    """
    if text.isascii():
        return text.lower() if case else text
    text = _fold_once(text, diacritics, case)
    for _ in range(4):
        if text.isascii():
            break
        again = _fold_once(text, diacritics, case)
        if again == text:
            break
        text = again
    return text


def _fold_once(text: str, diacritics: bool, case: bool) -> str:
    for ch in INVISIBLE:
        if ch in text:  # a substring search per character: far cheaper than a regex scan
            text = text.replace(ch, "")
    text = unicodedata.normalize("NFKC", text)
    if _HAS_HOMOGLYPH.search(text):
        text = map_homoglyphs(text)
    if case:
        text = text.casefold()
        if _HAS_HOMOGLYPH.search(text):  # case folding can make one (U+1C82 narrow o -> Cyrillic о)
            text = map_homoglyphs(text)
    if diacritics and not text.isascii():
        text = strip_latin_diacritics(text)
    return text
