"""Text normalisation and tokenisation (what :mod:`stream_dedup.folding` does first is described there).

``normalize(text)`` applies Unicode NFKC (compatibility forms such as full-width letters and
ligatures fold to their plain equivalents) and case folding (``str.casefold``, stronger
than ``lower``: German ß -> ss, Greek final sigma, ...).

``tokenize(text)`` returns the word tokens of normalised text, as UTF-8 ``bytes`` (what gets
hashed): maximal runs of Unicode word characters (``\\w``: letters, digits, underscore of any script). Scripts written without spaces
between words (Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar) have no word boundaries, so
each of their characters becomes a token on its own; word k-shingles over such tokens are then
character k-grams, the standard fallback for those scripts. Korean (Hangul) is treated the same
way: it has spaces, but particles and endings are glued to the words, so a copy-edit changes whole
space-separated words where character k-grams change little. The rule is per token: a ``\\w+``
run holding any such character is split into single characters for its runs of those scripts,
and the Latin/digit runs inside it stay words (``iPhone发布会`` -> ``iphone 发 布 会``).

Pure-ASCII text (most of a news feed) takes a fast path with the same result: ``\\w`` on ASCII is
``[A-Za-z0-9_]``, so translating every other byte to a space and splitting gives the same tokens
four times faster than the regular expression. :func:`ascii_equivalent` widens that path to text
whose only non-ASCII characters are common punctuation (dashes, curly quotes, no-break space, ...).
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache

import numpy as np

from .jit import trusted
from .kernels import ascii_fold

_WORD = re.compile(r"\w+")
TOKENIZER_VERSION = 2  # 2: Hangul is tokenised per character (an index of version 1 is refused)
# Tokenised per character: Hangul (jamo, compatibility jamo, syllables), then the scripts without
# spaces between words: Thai, Lao, Myanmar, Khmer, CJK radicals/symbols, Hiragana, Katakana,
# Bopomofo, CJK unified ideographs (+ext A), compatibility ideographs, half-width Katakana, CJK
# extension planes.
_NO_BOUNDARY = (
    "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"
    "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u2e80-\u2fdf\u3005-\u3007\u3021-\u3029"
    "\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uff66-\uff9f\U00020000-\U0003134f"
)


@cache
def _no_boundary() -> tuple[re.Pattern, re.Pattern]:
    """(any no-boundary character, split into those characters and the runs between them): compiled
    on first use, since only non-ASCII text needs them (their large classes take ~20 ms to compile)."""
    return re.compile(f"[{_NO_BOUNDARY}]"), re.compile(f"[{_NO_BOUNDARY}]|[^{_NO_BOUNDARY}]+")




def blank_non_word(normalized: str) -> str:
    """Replace every non-ASCII character that is not a word character (``\\w``) by a space.

    After this, the word bytes of the UTF-8 encoding are exactly the ASCII letters, digits, ``_``
    and all bytes >= 0x80, so a byte scanner finds the same tokens as :func:`tokenize`.
    """
    # the distinct characters by set() (C speed): a findall of every non-ASCII character made a
    # string of each, ~600 us for a 3 KB Cyrillic article against ~40 us
    for ch in set(normalized):
        if not ch.isascii() and not _WORD.match(ch):
            normalized = normalized.replace(ch, " ")
    return normalized


@cache
def no_boundary_table() -> np.ndarray:
    """``table[cp]``: a character of the Basic Multilingual Plane tokenised on its own (the BMP
    ranges of ``_NO_BOUNDARY``; :func:`stream_dedup.kernels.token_hashes_split` knows the others)."""
    table = np.zeros(0x10000, dtype=np.bool_)
    for lo, hi in re.findall(r"(.)-(.)", _NO_BOUNDARY):
        if ord(lo) < 0x10000:
            table[ord(lo):ord(hi) + 1] = True
    return table


def has_no_boundary_script(text: str) -> bool:
    return not text.isascii() and _no_boundary()[0].search(text) is not None


def normalize(text: str) -> str:
    """NFKC + case folding."""
    return unicodedata.normalize("NFKC", text).casefold()


_ASCII_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_ASCII_TO_SPACE = bytes(c if c in _ASCII_WORD_BYTES else 32 for c in range(256))


def tokenize(normalized: str) -> list[bytes]:
    """UTF-8 word tokens of normalised text; one token per character in no-boundary scripts."""
    if normalized.isascii():
        return normalized.encode("ascii").translate(_ASCII_TO_SPACE).split()
    words = _WORD.findall(normalized)
    has_no_boundary, split_no_boundary = _no_boundary()
    if has_no_boundary.search(normalized):
        split: list[str] = []
        for tok in words:
            if has_no_boundary.search(tok):
                split.extend(split_no_boundary.findall(tok))
            else:
                split.append(tok)
        words = split
    return [w.encode("utf-8", "surrogatepass") for w in words]


def char_tokens(normalized: str) -> list[bytes]:
    """Characters as tokens (UTF-8): word characters kept, everything else one space between words."""
    words = tokenize(normalized) if normalized.isascii() else [w.encode("utf-8", "surrogatepass")
                                                              for w in _WORD.findall(normalized)]
    text = b" ".join(words).decode("utf-8", "surrogatepass")
    return [ch.encode("utf-8", "surrogatepass") for ch in text]


# Common non-ASCII punctuation of news text. Each is kept only if blanking it to a space cannot
# change the tokens: its NFKC form and the casefold of that hold no word character, and NFKC
# neither composes it with an ASCII neighbour nor decomposes it into one. The check (_blank_equivalent,
# ~10,000 NFKC calls) ran at every import; its answer is stored in COMMON_NON_WORD and a test re-runs it.
_COMMON_NON_WORD_CANDIDATES = (
    "\u00a0\u2010\u2011\u2012\u2013\u2014\u2015\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u2026\u2022"
    "\u00ab\u00bb\u00b7\u2032\u2033\u2039\u203a\ufffd\u00a9\u00ae\u00b0\u20ac\u00a3\u00a7\u00b6\u2122"
    "\u00bd\u00bc\u00b2\u2009\u200a\u202f\u2002\u2003\u3000"
)


def _blank_equivalent(ch: str) -> bool:
    folded = unicodedata.normalize("NFKC", ch).casefold()
    if _WORD.search(folded) or unicodedata.combining(ch):
        return False
    nfkc = unicodedata.normalize("NFKC", ch)
    return all(unicodedata.normalize("NFKC", a + ch) == a + nfkc and unicodedata.normalize("NFKC", ch + a) == nfkc + a
               for a in map(chr, range(128)))


#: the candidates that pass :func:`_blank_equivalent` (all but U+2122 ™, U+00BD ½, U+00BC ¼, U+00B2 ²)
COMMON_NON_WORD = tuple(
    "\u00a0\u2010\u2011\u2012\u2013\u2014\u2015\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u2026\u2022"
    "\u00ab\u00bb\u00b7\u2032\u2033\u2039\u203a\ufffd\u00a9\u00ae\u00b0\u20ac\u00a3\u00a7\u00b6"
    "\u2009\u200a\u202f\u2002\u2003\u3000"
)
#: ``COMMON_NON_WORD_TABLE[ord(ch)]`` for every character of the Basic Multilingual Plane
COMMON_NON_WORD_TABLE = np.zeros(0x10000, dtype=np.bool_)
COMMON_NON_WORD_TABLE[[ord(ch) for ch in COMMON_NON_WORD]] = True


def ascii_equivalent(text: str) -> bytes | None:
    """Lower-case ASCII bytes with the same tokens as ``normalize(text)``, or None.

    Text that is ASCII apart from :data:`COMMON_NON_WORD` characters gets them blanked to spaces;
    NFKC is then the identity and case folding is ASCII lower-casing.
    """
    if text.isascii():
        return text.encode("ascii").lower()
    ok, out = _ascii_fold(np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8), COMMON_NON_WORD_TABLE)
    return out.tobytes() if ok else None


_ascii_fold = trusted(ascii_fold)  # bytes as uint8, the table's own bool array (jit.trusted)
