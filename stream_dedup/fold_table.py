"""Folding by table: text folded a character at a time, in one compiled pass (Latin, CJK, Hangul).

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
through it in one pass. CJK punctuation, kana, ideographs and Hangul syllables fold to themselves
and are held too (:data:`SELF_FOLDING_BLOCKS`, loaded when a text first needs them). A text holding
any other character (a combining mark, a Cyrillic or Greek letter, an emoji) gets None and takes
the full fold. The tables are built from :func:`fold` itself (~10-25 ms; the blocks ~30-80 ms more),
so they follow the running Python's Unicode data; ``tests/engine/test_fold_table.py`` checks that
every entry is context-free and that both paths give the same token hashes and identity sketches.
A process reads the arrays it folds with from a file beside this module (``_fold_tables/``, written
by the first process that built them) while its stamp (a hash
of the sources that define the folds, the Unicode data version and Python's) matches: ~0.1 ms
instead of building them at every start (:func:`_arrays`); a file that cannot be read or written
is built in memory, as before. :mod:`stream_dedup.identity` keeps its per-code-point tables there
too (:func:`read_cached_file`, :func:`write_cached_file`).

The tables, for each ``diacritics`` setting:

* tokens: ``blank_non_word(fold(ch))``, the bytes the tokenizer scans (case folded, non-word
  characters blanked to a space), for characters whose fold holds no combining mark; a text
  holding a character of a script written without spaces is reported, so that its tokens are
  split per character (:func:`fold_tokens`);
* identity: ``fold(ch, case=False)``, for characters whose fold is ASCII or common punctuation
  (the text the compiled ASCII identity scan reads);
* identity_any: ``fold(ch, case=False)`` whatever it is (CJK stays CJK, ``ß`` stays ``ß`` with the
  case kept), for the identity's Unicode scan (:func:`fold_identity_text`).
"""

from __future__ import annotations

import functools
import os
import re
import sys
import unicodedata
from pathlib import Path

import numpy as np

from .folding import HOMOGLYPHS, INVISIBLE, fold
from .jit import trusted
from .kernels import fold_utf8
from .text import COMMON_NON_WORD, blank_non_word, has_no_boundary_script, no_boundary_table

#: the code points a table may hold: Latin-1 Supplement, Latin Extended-A and -B, Latin Extended
#: Additional, General Punctuation, currency symbols, letterlike symbols, the ideographic space,
#: full-width ASCII forms and signs (``，`` ``：`` ``（``, in CJK text), the replacement character (a
#: decoding scar: 974 of the shared stream's articles hold one)
RANGES = ((0x80, 0x250), (0x1E00, 0x1F00), (0x2000, 0x2070), (0x20A0, 0x20C1), (0x2100, 0x2150), (0x3000, 0x3001),
          (0xFF01, 0xFF5F), (0xFFE0, 0xFFE7), (0xFFFD, 0xFFFE))
#: blocks of characters that fold to themselves (NFKC and case folding leave them unchanged: checked
#: per character in the small blocks, a block at a time at C speed in the large ones), tokenised one
#: character each: CJK symbols and punctuation, Hiragana and Katakana, CJK unified ideographs
#: (+ extension A), Hangul syllables.
#: Hangul compatibility jamo and half-width Katakana are not here: NFKC composes them with neighbours.
SELF_FOLDING_BLOCKS = ((0x3001, 0x3040), (0x3041, 0x3100), (0x3400, 0x4DC0), (0x4E00, 0xA000), (0xAC00, 0xD7A4))
NOT_IN_TABLE = 255   # a length that marks a code point the table does not hold
MAX_GROWTH = 3       # bytes of a fold per byte of its character, at most (fold_utf8's output buffer)
_EXCLUDED_CATEGORIES = frozenset(("Mn", "Mc", "Me", "Cn", "Cs", "Co"))
_COMMON = frozenset(COMMON_NON_WORD)
_WORD_CHAR = re.compile(r"\w")


def _context_may_matter(ch: str) -> bool:
    """A character whose fold could depend on its neighbours: a combining mark (or unassigned), a
    look-alike letter, or one that NFKC or case folding turns into either."""
    if unicodedata.category(ch) in _EXCLUDED_CATEGORIES or ch in HOMOGLYPHS:
        return True
    nfkc = unicodedata.normalize("NFKC", ch)
    return any(c in HOMOGLYPHS or unicodedata.combining(c) for c in nfkc + nfkc.casefold())


def _context_free_output(folded: str) -> bool:
    """No combining mark or look-alike letter in a fold (they would interact with neighbours)."""
    return not any(unicodedata.combining(c) or c in HOMOGLYPHS for c in folded)


def _token_ok(folded: str) -> bool:
    """A context-free fold with no character of a script written without spaces (those come from
    :data:`SELF_FOLDING_BLOCKS`, tokenised one each)."""
    return _context_free_output(folded) and not has_no_boundary_script(folded)


def _identity_ok(folded: str) -> bool:
    return all(c.isascii() or c in _COMMON for c in folded)


@functools.cache
def tables(diacritics: bool) -> dict[str, dict[str, bytes]]:
    """``{"tokens": {ch: bytes}, "identity": {ch: bytes}, "identity_any": {ch: bytes}}``: the folds
    of every character of :data:`RANGES` the tables hold (ASCII not included), as the module
    docstring says."""
    tokens: dict[str, bytes] = {}
    identity: dict[str, bytes] = {}
    identity_any: dict[str, bytes] = {}  # (the fold of text that then needs the identity's Unicode scan)
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
            if len(encoded) <= limit and _context_free_output(folded):
                identity_any[ch] = encoded
                if _identity_ok(folded):
                    identity[ch] = encoded
    return {"tokens": tokens, "identity": identity, "identity_any": identity_any}


@functools.cache
def tables_with_blocks(diacritics: bool) -> dict[str, dict[str, bytes]]:
    """:func:`tables` and the tokens entries of :data:`SELF_FOLDING_BLOCKS` (built when a text first
    needs them: ~80 ms that a Latin-script feed never pays). Not identity entries: not ASCII; that
    text takes the compiled Unicode scan of :mod:`stream_dedup.identity`."""
    latin = tables(diacritics)
    blocks = _self_folding()
    return {"tokens": {**latin["tokens"], **blocks}, "identity": latin["identity"],
            "identity_any": {**latin["identity_any"], **{ch: ch.encode("utf-8") for ch in blocks}}}


def _self_folding() -> dict[str, bytes]:
    """The characters of :data:`SELF_FOLDING_BLOCKS` (assigned, no combining mark, no look-alike,
    not invisible) that NFKC and case folding leave unchanged, each with its tokens entry: itself,
    or a space for a non-word character (``、`` ``。``). Small blocks are checked a character at a
    time, the large ones a block at a time at C speed (a block that some character changes is left
    out whole): ~40 ms for the ~39,000 characters, against ~1 s through :func:`fold` one by one.
    No character kept composes with a neighbour under NFKC (none is a combining character)."""
    out: dict[str, bytes] = {}
    for lo, hi in SELF_FOLDING_BLOCKS:
        chars = [ch for ch in map(chr, range(lo, hi)) if unicodedata.category(ch) not in _EXCLUDED_CATEGORIES
                 and ch not in HOMOGLYPHS and ch not in INVISIBLE]
        if hi - lo <= 512:
            chars = [ch for ch in chars if unicodedata.normalize("NFKC", ch) == ch == ch.casefold()]
        else:
            text = "\n".join(chars)
            if unicodedata.normalize("NFKC", text) != text or text.casefold() != text:
                continue
        words = set(_WORD_CHAR.findall("\n".join(chars)))
        out.update((ch, ch.encode("utf-8") if ch in words else b" ") for ch in chars)
    return out


#: where the tables' arrays are kept between processes (:func:`_arrays`)
CACHE_DIR = Path(__file__).parent / "_fold_tables"
#: the modules whose code makes the tables kept there (their sources are in the cache files' stamp)
_FOLD_SOURCES = ("fold_table.py", "folding.py", "text.py", "identity.py")
CACHE_HEAD = 16  # bytes before the arrays in a cache file: the pool's length, then the stamp's first 8 bytes


@functools.cache
def cache_stamp() -> str:
    """A hash of the sources that define the folds, the Unicode data and the Python version: a cache
    file is read only under the stamp it was written with."""
    try:
        from _sha256 import sha256  # (CPython's own; hashlib loads OpenSSL, a few ms of a start)
    except ImportError:
        from hashlib import sha256
    h = sha256(f"{unicodedata.unidata_version} {sys.version_info[:2]}".encode())
    for name in _FOLD_SOURCES:
        h.update((Path(__file__).parent / name).read_bytes())
    return h.hexdigest()[:16]


def cache_path(name: str) -> Path:
    """The cache file ``name`` under the current stamp (files of other stamps are removed)."""
    return CACHE_DIR / f"{cache_stamp()}-{name}.bin"


def cache_file(diacritics: bool, kind: str, blocks: bool) -> Path:
    return cache_path(f"{int(diacritics)}-{kind}-{int(blocks)}")


@functools.cache
def _arrays(diacritics: bool, kind: str, blocks: bool = False) -> tuple[np.ndarray, ...]:
    """(ascii_map, lengths, offsets, pool, flags) of one table (with the blocks' entries or not),
    as :func:`fold_utf8` reads them (``flags``: the characters tokenised one each,
    :func:`stream_dedup.text.no_boundary_table`): read from its cache file, else built (and the
    file written for the next process, where it can be)."""
    path = cache_file(diacritics, kind, blocks)
    arrays = _read_cached(path)
    if arrays is None:
        arrays = _build_arrays(diacritics, kind, blocks)
        _write_cached(path, arrays)
    return arrays


def read_cached_file(path: Path) -> bytearray | None:
    """A cache file's bytes (:data:`CACHE_HEAD` bytes, then the writer's: see :func:`write_cached_file`),
    writable (a read-only array is another type to the kernels); None if it is missing or of
    another stamp (a cut file: the caller checks its length)."""
    try:
        data = bytearray(path.read_bytes())
    except OSError:
        return None
    if len(data) < CACHE_HEAD or data[8:16] != bytes.fromhex(cache_stamp())[:8]:
        return None
    return data


def write_cached_file(path: Path, head: int, parts: list[bytes]) -> None:
    """Write a cache file: ``head`` (8 bytes), the stamp's first 8 bytes, then ``parts``; atomically
    (a reader sees the whole file or none), and remove the files of other stamps. Where the
    directory cannot be written, nothing is (the next process builds its tables again)."""
    try:
        CACHE_DIR.mkdir(exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(b"".join((head.to_bytes(8, "little"), bytes.fromhex(cache_stamp())[:8], *parts)))
        os.replace(tmp, path)
        for old in CACHE_DIR.glob("*.bin"):
            if not old.name.startswith(cache_stamp()):
                old.unlink(missing_ok=True)
    except OSError:
        pass


def _read_cached(path: Path) -> tuple[np.ndarray, ...] | None:
    """The arrays of a cache file; None if it is missing, of another stamp or cut short."""
    data = read_cached_file(path)
    if data is None:
        return None
    pool_length = int.from_bytes(data[:8], "little")
    if len(data) != CACHE_HEAD + 128 + 0x10000 * 5 + pool_length:
        return None
    at = CACHE_HEAD
    ascii_map = np.frombuffer(data, dtype=np.uint8, count=128, offset=at)
    lengths = np.frombuffer(data, dtype=np.uint8, count=0x10000, offset=at + 128)
    offsets = np.frombuffer(data, dtype="<u4", count=0x10000, offset=at + 128 + 0x10000).astype(np.uint32)
    pool = np.frombuffer(data, dtype=np.uint8, count=pool_length, offset=at + 128 + 0x10000 * 5)
    return ascii_map, lengths, offsets, pool, no_boundary_table()


def _write_cached(path: Path, arrays: tuple[np.ndarray, ...]) -> None:
    """Write ``arrays`` to ``path`` (:func:`write_cached_file`, the pool's length the head)."""
    ascii_map, lengths, offsets, pool, _ = arrays
    write_cached_file(path, pool.shape[0], [ascii_map.tobytes(), lengths.tobytes(), offsets.astype("<u4").tobytes(),
                                            pool.tobytes()])


def _build_arrays(diacritics: bool, kind: str, blocks: bool) -> tuple[np.ndarray, ...]:
    """:func:`_arrays` built from :func:`tables` (or :func:`tables_with_blocks`)."""
    ascii_map = np.arange(128, dtype=np.uint8)
    if kind == "tokens":
        ascii_map[65:91] += 32  # ASCII folds to lower case (fold's ``text.lower()``)
    lengths = np.full(0x10000, NOT_IN_TABLE, dtype=np.uint8)
    offsets = np.zeros(0x10000, dtype=np.uint32)
    pool = bytearray()
    for ch, encoded in (tables_with_blocks if blocks else tables)(diacritics)[kind].items():
        lengths[ord(ch)], offsets[ord(ch)] = len(encoded), len(pool)
        pool += encoded
    return ascii_map, lengths, offsets, np.frombuffer(bytes(pool) or b"\0", dtype=np.uint8), no_boundary_table()


def fold_tokens(text: str, diacritics: bool) -> tuple[np.ndarray, bool] | None:
    """The UTF-8 bytes (uint8) of ``blank_non_word(fold(text, diacritics))`` by table, and whether
    they hold a character tokenised on its own (CJK, Hangul: split the tokens then); None when
    ``text`` holds a character the table does not (fold it in full then)."""
    global _blocks_needed
    buf = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    ok, out, split = _fold_utf8(buf, *_arrays(diacritics, "tokens", _blocks_needed))
    if not ok and not _blocks_needed:  # the first text the Latin table does not hold: the blocks from now on
        _blocks_needed = True
        ok, out, split = _fold_utf8(buf, *_arrays(diacritics, "tokens", True))
    return (out, bool(split)) if ok else None


def token_tables(diacritics: bool) -> tuple[np.ndarray, ...]:
    """The arrays :func:`fold_tokens` folds with now (the blocks' entries too once a text needed
    them), for a kernel that folds tokens itself (:mod:`stream_dedup.fingerprint_kernel`)."""
    return _arrays(diacritics, "tokens", _blocks_needed)


def identity_tables(diacritics: bool) -> tuple[np.ndarray, ...]:
    """The arrays of :func:`fold_bytes` with ``kind="identity"``, for such a kernel."""
    return _arrays(diacritics, "identity", False)


def fold_identity_text(text: str, diacritics: bool) -> str | None:
    """``fold(text, diacritics, case=False)`` by table for text in the scripts the tables hold
    (Latin, CJK, Hangul, ...), whatever its fold (``ß`` and ``Ł`` keep theirs, CJK stays CJK); None
    when ``text`` holds a character the table does not."""
    out = fold_bytes(text, diacritics, "identity_any")
    return None if out is None else out.tobytes().decode("utf-8", "surrogatepass")


def fold_bytes(text: str, diacritics: bool, kind: str = "tokens") -> np.ndarray | None:
    """The UTF-8 bytes (uint8) of ``blank_non_word(fold(text, diacritics))`` (``kind="tokens"``) or
    of ``fold(text, diacritics, case=False)`` when that is ASCII or common punctuation
    (``"identity"``; any fold of the scripts held: ``"identity_any"``), by table; None when
    ``text`` holds a character the table does not (fold it in full then). For non-ASCII text:
    ASCII needs no table."""
    if kind == "tokens":
        folded = fold_tokens(text, diacritics)
        return None if folded is None else folded[0]
    ok, out, _ = _fold_utf8(np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8),
                            *_arrays(diacritics, kind, kind == "identity_any"))
    return out if ok else None


_fold_utf8 = trusted(fold_utf8)  # bytes as uint8, the tables' own arrays (jit.trusted)
_blocks_needed = False  # a text held a character of SELF_FOLDING_BLOCKS (or another the Latin table lacks)
