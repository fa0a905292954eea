"""Identity tokens in context: what makes two look-alike reports different news.

Earnings reports, sports results, weather and market summaries are written from templates: two
reports share 80-95 % of their words and differ in their numbers, amounts, dates and names. Word
shingles call them near-duplicates. Here the text is read as a stream of *items*:

* a **number**: a run of ASCII digits, joined with the next runs across single ``.``, ``,``, ``:``
  or ``/`` (``3.5``, ``1,200``, ``10:30``, ``2017/02/03``); a word that merely holds digits
  (``20th``, ``G20``) is a word;
* a **word**: any other ``\\w+`` run. A word is a **name** when it starts with a capital letter
  inside a sentence, i.e. after a lower-case ASCII letter, digit, comma, colon or semicolon and a
  space (names, places, organisations, months, weekdays; the first word of a sentence is skipped,
  because any word is capitalised there).

Numbers and names are the *identity tokens*. Each is recorded with its **context**, the two items
before it, as one 32-bit *pair*: 16 bits of a hash of the context, one bit "is a number", then 15
bits of a hash of the token (items folded like the text, :func:`stream_dedup.folding.fold`). A fingerprint keeps the
``IDENTITY_K`` smallest distinct pairs of numbers and as many of names (a bottom-k sample of
contexts per kind, sorted).

**Agreement** (:func:`agreement`): among the contexts both articles have (on the hash range both
samples cover completely), the share where they also have a same token; computed over all identity
tokens and over numbers alone (from ``MIN_NUMBER_CONTEXTS`` common contexts), and the lower of
the two counts (the same company's next quarterly report keeps its names and changes its figures). A template filled with
other figures and names has the same contexts with other tokens: agreement near 0. A trimmed copy,
a copy with a byline, dateline and footer (new contexts, which are not compared), or a correction
that changes one figure of twenty: agreement near 1.

**The rule** (see :mod:`stream_dedup.engine`): a candidate that passes the text rules is not a
duplicate when at least ``identity_min_tokens`` contexts are shared and the agreement is below
``identity_threshold``: the article is ``new`` and its event names the look-alike in
``template_of``.

The text is read after folding all but its case (invisible characters, NFKC, look-alike letters,
Latin diacritics). Text that is then ASCII, or ASCII apart from common punctuation, takes a
compiled byte scan (:func:`identity_pairs_ascii`); other text the Python reference
(:func:`identity_pairs_reference`), which gives the same pairs on ASCII text (a test checks it).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import numpy as np

from .fold_table import (
    CACHE_HEAD,
    cache_path,
    fold_bytes,
    fold_identity_text,
    read_cached_file,
    write_cached_file,
)
from .folding import fold
from .hashing import token_hash
from .jit import compiling, inline, kernel, trusted
from .kernels import _fmix, _murmur3_64_at

if compiling():  # (numba intrinsics: defined only when the kernels are compiled)
    from .addresses import address_of, load_u8
from .text import ascii_equivalent

IDENTITY_K = 24  # pairs kept per kind (numbers, names): a sketch holds at most 48
MIN_NUMBER_CONTEXTS = 2
IDENTITY_SEED = 0x1D7E
_EMPTY = np.zeros(0, dtype=np.uint32)
_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_WORD = re.compile(r"\w+")
_NUMBER_JOINERS = ".,:/"
_BEFORE_NAME = "abcdefghijklmnopqrstuvwxyz0123456789,;:"


def _fmix_py(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & _M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & _M64
    return k ^ (k >> 33)


def _pair(prev2: int, prev1: int, token: int, number: bool) -> int:
    ctx = _fmix_py((prev2 * _GOLDEN + prev1) & _M64)
    return ((ctx >> 48) << 16) | (number << 15) | (token & 0x7FFF)


def _ascii_digits(w: str) -> bool:
    return w.isascii() and w.isdigit()


def identity_items(text: str) -> list[tuple[str, int]]:
    """The items of ``text`` (not folded yet), each with 0 (a word), 1 (a name) or 2 (a number)."""
    runs = [(m.start(), m.end(), m.group()) for m in _WORD.finditer(text)]
    items: list[tuple[str, bool]] = []
    i = 0
    while i < len(runs):
        s, e, w = runs[i]
        if _ascii_digits(w):
            while (i + 1 < len(runs) and runs[i + 1][0] == e + 1 and text[e] in _NUMBER_JOINERS
                   and _ascii_digits(runs[i + 1][2])):
                i += 1
                e = runs[i][1]
            items.append((text[s:e], 2))
        else:
            name = w[0].isupper() and s >= 2 and text[s - 1] == " " and text[s - 2] in _BEFORE_NAME
            items.append((w, int(name)))
        i += 1
    return items


def identity_pairs_reference(text: str) -> np.ndarray:
    """The identity sketch through :func:`identity_items` (any text)."""
    items = identity_items(text)
    kinds = [kind for _, kind in items]
    return _pairs([w for w, _ in items].__getitem__, kinds, [k for k, kind in enumerate(kinds) if kind])


@functools.cache
def _bmp_tables() -> tuple[np.ndarray, np.ndarray]:
    """(is_word, is_upper) of every code point of the Basic Multilingual Plane: a ``\\w`` character
    (the regex :func:`identity_items` reads runs with), and ``str.isupper`` (a name's first letter).
    Read on first use from a file beside :mod:`stream_dedup.fold_table`'s tables, stamped as they
    are (the Unicode data, Python, this module's source): 0.5-0.7 ms in a fresh process; where
    there is none, built (:func:`_build_bmp_tables`: 13-20 ms of the first non-ASCII text's sketch,
    in every process that met one) and written for the next process."""
    path = cache_path("bmp")
    data = read_cached_file(path)
    if data is not None and len(data) == CACHE_HEAD + 2 * 0x10000:
        tables = np.frombuffer(data, dtype=np.bool_, offset=CACHE_HEAD).reshape(2, 0x10000)
        return tables[0], tables[1]
    is_word, is_upper = _build_bmp_tables()
    write_cached_file(path, 2 * 0x10000, [is_word.tobytes(), is_upper.tobytes()])
    return is_word, is_upper


def _build_bmp_tables() -> tuple[np.ndarray, np.ndarray]:
    """:func:`_bmp_tables` from the running Python's Unicode data: ``re``'s ``\\w`` is
    ``str.isalnum()`` or ``_`` (``_sre``'s ``UNICODE_ISALNUM``; ``tests/engine/test_identity.py``
    checks it against the regex), read by ``map`` over one string of every code point (a
    ``fullmatch`` per character took 18-35 ms)."""
    chars = "".join(map(chr, range(0x10000)))
    is_word = np.fromiter(map(str.isalnum, chars), dtype=np.bool_, count=0x10000)
    is_word[ord("_")] = True
    is_upper = np.fromiter(map(str.isupper, chars), dtype=np.bool_, count=0x10000)
    return is_word, is_upper


@inline
def _word_run(values, word, i):
    """(end, all ASCII digits) of the run of word characters (``word[values[j]]``) from ``i``: the
    item scan of both identity kernels, over UTF-8 bytes or over code points."""
    digits = True
    while i < values.shape[0] and word[values[i]]:
        if not (48 <= values[i] <= 57):
            digits = False
        i += 1
    return i, digits


@inline
def _byte_run(address, n, word_address, i):
    """:func:`_word_run` over the ``n`` bytes at ``address``, ``word`` the bool table at ``word_address``
    (:func:`stream_dedup.addresses.address_of`: no array argument in a call made for every token)."""
    digits = True
    while i < n:
        c = load_u8(address, i)
        if not load_u8(word_address, c):
            break
        if not (48 <= c <= 57):
            digits = False
        i += 1
    return i, digits


@kernel
def identity_spans(cps, is_word, is_upper):
    """:func:`identity_items` as (start, end, kind) arrays over the code points ``cps`` (uint32, all
    below 0x10000): the ``\\w`` runs, runs of ASCII digits joined across one ``. , : /`` into a
    number (kind 2), a run starting with a capital after a space after an ASCII lower-case letter,
    digit, ``,``, ``;`` or ``:`` a name (1), any other run a word (0)."""
    n = cps.shape[0]
    run_start = np.empty(n // 2 + 1, dtype=np.int64)
    run_end = np.empty(n // 2 + 1, dtype=np.int64)
    digits = np.empty(n // 2 + 1, dtype=np.bool_)
    m = 0
    i = 0
    while i < n:
        if not is_word[cps[i]]:
            i += 1
            continue
        s = i
        i, d = _word_run(cps, is_word, i)
        run_start[m] = s
        run_end[m] = i
        digits[m] = d
        m += 1
    starts = np.empty(m, dtype=np.int64)
    ends = np.empty(m, dtype=np.int64)
    kinds = np.empty(m, dtype=np.int64)
    j = 0
    k = 0
    while j < m:
        s = run_start[j]
        e = run_end[j]
        if digits[j]:
            while j + 1 < m and run_start[j + 1] == e + 1 and digits[j + 1] \
                    and (cps[e] == 46 or cps[e] == 44 or cps[e] == 58 or cps[e] == 47):
                j += 1
                e = run_end[j]
            kind = 2
        else:
            kind = 0
            if is_upper[cps[s]] and s >= 2 and cps[s - 1] == 32:
                b = cps[s - 2]
                if (97 <= b <= 122) or (48 <= b <= 57) or b == 44 or b == 59 or b == 58:
                    kind = 1
        starts[k] = s
        ends[k] = e
        kinds[k] = kind
        k += 1
        j += 1
    return starts[:k], ends[:k], kinds[:k]


def identity_pairs_unicode(text: str) -> np.ndarray:
    """:func:`identity_pairs_reference` with the items found by the compiled :func:`identity_spans`
    (text of the Basic Multilingual Plane; other text by the reference): the same pairs (tested),
    ~4x faster on a Cyrillic article, where the item scan in Python cost ~70 % of the sketch."""
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    if not cps.shape[0] or int(cps.max()) >= 0x10000:
        return identity_pairs_reference(text)
    is_word, is_upper = _bmp_tables()
    starts, ends, kinds = _identity_spans(cps, is_word, is_upper)
    first, last = starts.tolist(), ends.tolist()
    return _pairs(lambda k: text[first[k]:last[k]], kinds.tolist(), np.flatnonzero(kinds).tolist())


#: token -> hash of its fold, kept across articles (names and figures recur in a feed; a non-ASCII
#: token's fold costs ~5 us): emptied when it reaches _MEMO_MAX entries
_token_hashes: dict[str, int] = {}
_MEMO_MAX = 1 << 17


def _pairs(token_at: Callable[[int], str], kinds: list[int], identity: list[int]) -> np.ndarray:
    """The selected pairs of the items (``token_at(k)``: the text of item ``k``) with their
    ``kinds`` (0 word, 1 name, 2 number); ``identity``: the items of kind 1 or 2, in order. Only
    those and the two items before each are read and hashed."""
    memo = _token_hashes
    if len(memo) >= _MEMO_MAX:
        memo.clear()

    def h(k: int) -> int:  # hashed only where needed: identity tokens and the two items before each
        if k < 0:
            return 0
        tok = token_at(k)
        v = memo.get(tok)
        if v is None:
            v = memo[tok] = token_hash(fold(tok).encode("utf-8", "surrogatepass"), IDENTITY_SEED)
        return v
    pairs = [_pair(h(k - 2), h(k - 1), h(k), kinds[k] == 2) for k in identity]
    return _select(np.array(pairs, dtype=np.uint32))


@kernel
def _select_kernel(pairs, k):
    """The ``k`` smallest distinct pairs of each kind (number bit set or not), sorted."""
    ordered = np.sort(pairs)
    out = np.empty(min(ordered.shape[0], 2 * k), dtype=np.uint32)
    m = numbers = names = 0
    for t in range(ordered.shape[0]):
        x = ordered[t]
        if t > 0 and x == ordered[t - 1]:
            continue
        if x & 0x8000:
            if numbers < k:
                out[m] = x
                m += 1
                numbers += 1
        elif names < k:
            out[m] = x
            m += 1
            names += 1
    return out[:m]


def _select(pairs: np.ndarray) -> np.ndarray:
    """The ``IDENTITY_K`` smallest distinct pairs of each kind, sorted."""
    return _select_kernel(pairs.astype(np.uint32, copy=False), IDENTITY_K) if pairs.shape[0] else _EMPTY


def _word_byte_table() -> np.ndarray:
    """``table[c]``: byte ``c`` is part of a word (ASCII letters, digits, ``_``); bytes >= 0x80 are
    separators here, as the common punctuation they encode is (a table lookup scans ~40 % faster
    than the comparisons)."""
    table = np.zeros(256, dtype=np.bool_)
    for lo, hi in ((48, 57), (65, 90), (97, 122), (95, 95)):
        table[lo:hi + 1] = True
    return table


WORD_BYTES = _word_byte_table()


@kernel
def identity_sketch_ascii(buf, word, seed, k):
    """:func:`identity_sketch` of ASCII-compatible UTF-8 in one compiled call: the scan, then the
    selection of the ``k`` smallest distinct pairs of each kind."""
    return _select_kernel(identity_pairs_ascii(buf, word, seed), k)


@inline
def _joins_numbers(c):
    """Whether byte ``c`` joins two digit runs into one number: ``. , : /``."""
    return c == 46 or c == 44 or c == 58 or c == 47


@inline
def _is_name(address, s):
    """Whether the word starting at byte ``s`` of the buffer at ``address`` (:func:`stream_dedup.addresses.address_of`)
    is a name: a capital after a space that follows a lower-case ASCII letter, a digit, ``,``, ``;``
    or ``:`` (inside a sentence)."""
    c = load_u8(address, s)
    if not (65 <= c <= 90 and s >= 2 and load_u8(address, s - 1) == 32):
        return False
    p = load_u8(address, s - 2)
    return (97 <= p <= 122) or (48 <= p <= 57) or p == 44 or p == 59 or p == 58


@inline
def _packed_pair(h, prev1, prev2, number):
    """The 32-bit pair of an identity token hashed ``h`` after items hashed ``prev1`` (the one
    before) and ``prev2`` (0: none): 16 bits of the context, the number bit, 15 bits of the token."""
    ctx = _fmix(prev2 * np.uint64(0x9E3779B97F4A7C15) + prev1)
    kind = np.uint64(0x8000) if number else np.uint64(0)
    return np.uint32(((ctx >> np.uint64(48)) << np.uint64(16)) | kind | (h & np.uint64(0x7FFF)))


@kernel
def identity_pairs_ascii(buf, word, seed):
    """:func:`identity_pairs_reference` as a byte scan of ASCII-compatible UTF-8 (``word``:
    :data:`WORD_BYTES`); unsorted, with repeats."""
    n = buf.shape[0]
    low = np.zeros(n + 16, dtype=np.uint8)
    for i in range(n):
        c = buf[i]
        low[i] = c + 32 if 65 <= c <= 90 else c
    out = np.empty(n // 2 + 1, dtype=np.uint32)
    m = 0
    s1 = e1 = s2 = e2 = -1  # the two items before (start, end; -1 = none): hashed only when needed
    i = 0
    while i < n:
        if not word[buf[i]]:
            i += 1
            continue
        s = i
        i, digits = _byte_run(address_of(buf), n, address_of(word), i)
        if digits:  # join digit runs across one . , : / (the next run all digits)
            while i + 1 < n and _joins_numbers(buf[i]) and 48 <= buf[i + 1] <= 57:
                j = i + 1
                while j < n and 48 <= buf[j] <= 57:
                    j += 1
                if j < n and word[buf[j]]:
                    break
                i = j
        if digits or _is_name(address_of(buf), s):
            h = _murmur3_64_at(address_of(low), s, i, seed)
            prev1 = _murmur3_64_at(address_of(low), s1, e1, seed) if s1 >= 0 else np.uint64(0)
            prev2 = _murmur3_64_at(address_of(low), s2, e2, seed) if s2 >= 0 else np.uint64(0)
            out[m] = _packed_pair(h, prev1, prev2, digits)
            m += 1
        s2, e2 = s1, e1
        s1, e1 = s, i
    return out[:m]


@inline
def _all_digits(address, start, end):
    """Whether bytes ``start:end`` of the buffer at ``address`` are all ASCII digits."""
    for j in range(start, end):
        c = load_u8(address, j)
        if not (48 <= c <= 57):
            return False
    return True


@inline
def identity_pairs_runs(buf, low, starts, ends, seed):
    """:func:`identity_pairs_ascii` of ASCII ``buf`` from its word runs as the token scan found
    them (:func:`stream_dedup.kernels.token_runs_utf8`: ``starts``/``ends``, and ``low``, ``buf``
    lower-cased and zero-padded), for a word-byte table that agrees with :data:`WORD_BYTES` on
    ASCII: the same items and pairs without a second pass over the bytes.

    An item is a run, or digit runs joined across one ``. , : /`` (the separator is not a word
    byte, so the next run starts right after it: joined when it is all digits, as the byte scan
    joins them). A hash is kept with the item it was computed for: the item before an identity
    token is often one itself, and is then not hashed again.
    """
    runs = starts.shape[0]
    out = np.empty(runs + 1, dtype=np.uint32)
    m = 0
    s1 = e1 = s2 = e2 = -1  # the two items before (start, end; -1 = none)
    h1 = h2 = np.uint64(0)
    known1 = known2 = False  # whether h1 / h2 hold their item's hash
    r = 0
    while r < runs:
        s = starts[r]
        i = ends[r]
        r += 1
        digits = _all_digits(address_of(buf), s, i)
        if digits:  # join the next runs across one . , : / while they are all digits
            while r < runs and starts[r] == i + 1 and _joins_numbers(buf[i]) and 48 <= buf[i + 1] <= 57 \
                    and _all_digits(address_of(buf), starts[r], ends[r]):
                i = ends[r]
                r += 1
        ident = digits or _is_name(address_of(buf), s)
        h = np.uint64(0)
        if ident:
            h = _murmur3_64_at(address_of(low), s, i, seed)
            if s1 >= 0 and not known1:
                h1 = _murmur3_64_at(address_of(low), s1, e1, seed)
            if s2 >= 0 and not known2:
                h2 = _murmur3_64_at(address_of(low), s2, e2, seed)
            out[m] = _packed_pair(h, h1 if s1 >= 0 else np.uint64(0), h2 if s2 >= 0 else np.uint64(0), digits)
            m += 1
            known1 = known2 = True  # (both hashed now, where they exist)
        s2, e2, h2, known2 = s1, e1, h1, known1
        s1, e1, h1, known1 = s, i, h, ident
    return out[:m]


def identity_sketch(text: str, diacritics: bool = True) -> np.ndarray:
    """Sorted uint32 pairs: the ``IDENTITY_K`` smallest distinct (context, identity token) pairs of each kind.

    Non-ASCII text is folded first, all but its case (``fold(text, diacritics, case=False)``), so
    that text which is then ASCII apart from common punctuation takes the compiled ASCII scan too;
    other text takes the compiled Unicode scan (:func:`identity_pairs_unicode`). Text in the scripts
    :mod:`stream_dedup.fold_table` holds (Latin, CJK, Hangul) is folded by table (one compiled pass,
    the same text as the general fold), the rest by :func:`~stream_dedup.folding.fold`.
    """
    if text.isascii():
        return _identity_sketch_ascii(np.frombuffer(text.encode("ascii"), dtype=np.uint8), WORD_BYTES,
                                      IDENTITY_SEED, IDENTITY_K)
    folded = fold_bytes(text, diacritics, "identity")
    if folded is not None:
        return _identity_sketch_ascii(folded, WORD_BYTES, IDENTITY_SEED, IDENTITY_K)
    by_table = fold_identity_text(text, diacritics)  # CJK, Hangul, ß, Ł: folded by table all the same
    if by_table is not None:  # (a fold the "identity" table lacks: neither ASCII nor common punctuation)
        return identity_pairs_unicode(by_table)
    text = fold(text, diacritics, case=False)
    if text.isascii() or ascii_equivalent(text) is not None:
        return _identity_sketch_ascii(np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8),
                                      WORD_BYTES, IDENTITY_SEED, IDENTITY_K)
    return identity_pairs_unicode(text)


@kernel
def _kind_counts(a, b, flag, k):
    """(contexts common to both sketches, of which with a same token) over the pairs of one kind
    (``flag`` = 0x8000 numbers, 0 names), on the context range both samples cover completely."""
    fa = a[(a & 0x8000) == flag]
    fb = b[(b & 0x8000) == flag]
    tau = 1 << 16
    if fa.shape[0] >= k:  # a full sample may have cut its last context's tokens short: compare below it
        tau = min(tau, int(fa[-1] >> 16))
    if fb.shape[0] >= k:
        tau = min(tau, int(fb[-1] >> 16))
    i = j = common = same = 0
    while i < fa.shape[0] and j < fb.shape[0]:
        ca, cb = int(fa[i] >> 16), int(fb[j] >> 16)
        if ca >= tau or cb >= tau:
            break
        if ca < cb:
            i += 1
        elif ca > cb:
            j += 1
        else:
            ie, je = i, j
            while ie < fa.shape[0] and int(fa[ie] >> 16) == ca:
                ie += 1
            while je < fb.shape[0] and int(fb[je] >> 16) == ca:
                je += 1
            common += 1
            p, q = i, j
            while p < ie and q < je:
                if fa[p] == fb[q]:
                    same += 1
                    break
                if fa[p] < fb[q]:
                    p += 1
                else:
                    q += 1
            i, j = ie, je
    return common, same


def agreement(a: np.ndarray, b: np.ndarray, min_contexts: int = 1) -> float | None:
    """Share of the contexts common to both sketches where both have a same token: the lower of
    that share over all identity tokens (with at least ``min_contexts`` common contexts) and over
    numbers alone (with at least ``MIN_NUMBER_CONTEXTS``: a template may keep its names and change
    only its figures); None when neither has enough."""
    cn, sn = _kind_counts_of(a, b, 0x8000, IDENTITY_K)
    cw, sw = _kind_counts_of(a, b, 0, IDENTITY_K)
    shares = []
    if cn + cw >= min_contexts:
        shares.append((sn + sw) / (cn + cw))
    if cn >= MIN_NUMBER_CONTEXTS:
        shares.append(sn / cn)
    return min(shares) if shares else None


# the hot calls (jit.trusted): buffers of np.frombuffer(bytes, uint8); sketches uint32, the
# engine's own (a Fingerprint's, or a stored record's read back as native uint32)
_identity_sketch_ascii = trusted(identity_sketch_ascii)
_identity_spans = trusted(identity_spans)  # np.frombuffer of UTF-32 as uint32, the tables' own bool arrays
_kind_counts_of = trusted(_kind_counts)
