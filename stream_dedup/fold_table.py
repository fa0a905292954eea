"""Folding by table: Latin-script text folded a character at a time, in one compiled pass.

:func:`stream_dedup.folding.fold` runs NFKC, regular expressions, case folding and the diacritics
rule over the whole text, and a text still non-ASCII afterwards (curly quotes) is folded again to
see that it no longer changes: ~280 us for a 3 KB article with a few accented letters, and a
fingerprint folds each text twice (its tokens, then its identity sketch without case folding).
News in the other languages written in the Latin script (French, German, Spanish, Polish,
Vietnamese, ...) takes that path on every article.

For the Latin letters, common punctuation and a few symbols, folding is context-free: a character
folds the same whatever stands beside it (no combining mark to compose with, no look-alike letter
whose mapping depends on the script around it). So a table holds, for each such code point, the
UTF-8 bytes of its fold, and the kernel :func:`stream_dedup.kernels.fold_utf8` maps a text's UTF-8
through it in one pass. A text holding any other character (a combining mark, a Cyrillic or Greek
letter, CJK, an emoji) gets None and takes the full fold. The tables are built from :func:`fold`
itself on first use (~30 ms), so they follow the running Python's Unicode data;
``tests/engine/test_fold_table.py`` checks that every entry is context-free and that both paths
give the same token hashes and identity sketches.

Two tables for each ``diacritics`` setting:

* tokens: ``blank_non_word(fold(ch))``, the bytes the tokenizer scans (case folded, non-word
  characters blanked to a space), for characters whose fold holds no combining mark and no
  character of a script written without spaces (those are tokenized per character);
* identity: ``fold(ch, case=False)``, for characters whose fold is ASCII or common punctuation
  (the text the identity scan reads; anything else needs its reference path).
"""

from __future__ import annotations

import functools
import unicodedata

import numpy as np

from .folding import HOMOGLYPHS, fold
from .jit import trusted
from .kernels import fold_utf8
from .text import COMMON_NON_WORD, blank_non_word, has_no_boundary_script

#: the code points a table may hold: Latin-1 Supplement, Latin Extended-A and -B, Latin Extended
#: Additional, General Punctuation, currency symbols, letterlike symbols, the ideographic space, the
#: replacement character (a decoding scar: 974 of the shared stream's articles hold one)
RANGES = ((0x80, 0x250), (0x1E00, 0x1F00), (0x2000, 0x2070), (0x20A0, 0x20C1), (0x2100, 0x2150), (0x3000, 0x3001),
          (0xFFFD, 0xFFFE))
NOT_IN_TABLE = 255   # a length that marks a code point the table does not hold
MAX_GROWTH = 3       # bytes of a fold per byte of its character, at most (fold_utf8's output buffer)
_EXCLUDED_CATEGORIES = frozenset(("Mn", "Mc", "Me", "Cn", "Cs", "Co"))
_COMMON = frozenset(COMMON_NON_WORD)


def _context_may_matter(ch: str) -> bool:
    """A character whose fold could depend on its neighbours: a combining mark (or unassigned), a
    look-alike letter, or one that NFKC or case folding turns into either."""
    if unicodedata.category(ch) in _EXCLUDED_CATEGORIES or ch in HOMOGLYPHS:
        return True
    nfkc = unicodedata.normalize("NFKC", ch)
    return any(c in HOMOGLYPHS or unicodedata.combining(c) for c in nfkc + nfkc.casefold())


def _token_ok(folded: str) -> bool:
    return all(c.isascii() or not (unicodedata.combining(c) or c in HOMOGLYPHS or has_no_boundary_script(c))
               for c in folded)


def _identity_ok(folded: str) -> bool:
    return all(c.isascii() or c in _COMMON for c in folded)


@functools.cache
def tables(diacritics: bool) -> dict[str, dict[str, bytes]]:
    """``{"tokens": {ch: bytes}, "identity": {ch: bytes}}``: the folds of every character the
    tables hold (ASCII not included), as the module docstring says."""
    tokens: dict[str, bytes] = {}
    identity: dict[str, bytes] = {}
    for lo, hi in RANGES:
        for cp in range(lo, hi):
            ch = chr(cp)
            if _context_may_matter(ch):
                continue
            limit = MAX_GROWTH * len(ch.encode("utf-8"))
            folded = blank_non_word(fold(ch, diacritics))
            encoded = folded.encode("utf-8")
            if _token_ok(folded) and len(encoded) <= limit:
                tokens[ch] = encoded
            folded = fold(ch, diacritics, case=False)
            encoded = folded.encode("utf-8")
            if _identity_ok(folded) and len(encoded) <= limit:
                identity[ch] = encoded
    return {"tokens": tokens, "identity": identity}


@functools.cache
def _arrays(diacritics: bool, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ascii_map, lengths, offsets, pool) of one table, as :func:`fold_utf8` reads them."""
    ascii_map = np.arange(128, dtype=np.uint8)
    if kind == "tokens":
        ascii_map[65:91] += 32  # ASCII folds to lower case (fold's ``text.lower()``)
    lengths = np.full(0x10000, NOT_IN_TABLE, dtype=np.uint8)
    offsets = np.zeros(0x10000, dtype=np.uint32)
    pool = bytearray()
    for ch, encoded in tables(diacritics)[kind].items():
        lengths[ord(ch)], offsets[ord(ch)] = len(encoded), len(pool)
        pool += encoded
    return ascii_map, lengths, offsets, np.frombuffer(bytes(pool) or b"\0", dtype=np.uint8)


def fold_bytes(text: str, diacritics: bool, kind: str = "tokens") -> np.ndarray | None:
    """The UTF-8 bytes (uint8) of ``blank_non_word(fold(text, diacritics))`` (``kind="tokens"``) or
    of ``fold(text, diacritics, case=False)`` (``"identity"``), by table; None when ``text`` holds a
    character the table does not (fold it in full then). For non-ASCII text: ASCII needs no table."""
    ascii_map, lengths, offsets, pool = _arrays(diacritics, kind)
    ok, out = _fold_utf8(np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8),
                         ascii_map, lengths, offsets, pool)
    return out if ok else None


_fold_utf8 = trusted(fold_utf8)  # bytes as uint8, the tables' own arrays (jit.trusted)
