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

ASCII text, and text that is ASCII apart from common punctuation, takes a compiled byte scan
(:func:`identity_pairs_ascii`); other text the Python reference (:func:`identity_pairs_reference`),
which gives the same pairs on ASCII text (a test checks it).
"""

from __future__ import annotations

import re

import numpy as np
from numba import njit

from .folding import fold
from .hashing import token_hash
from .kernels import _fmix, _murmur3_64_padded
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
    """The items of ``text`` (folded), each with 0 (a word), 1 (a name) or 2 (a number)."""
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
            items.append((fold(w), int(name)))
        i += 1
    return items


def identity_pairs_reference(text: str) -> np.ndarray:
    """The identity sketch through :func:`identity_items` (any text)."""
    hashes = [(token_hash(t.encode("utf-8", "surrogatepass"), IDENTITY_SEED), ident) for t, ident in identity_items(text)]
    pairs = {_pair(hashes[k - 2][0] if k >= 2 else 0, hashes[k - 1][0] if k >= 1 else 0, h, ident == 2)
             for k, (h, ident) in enumerate(hashes) if ident}
    return _select(np.array(sorted(pairs), dtype=np.uint32))


def _select(pairs: np.ndarray) -> np.ndarray:
    """The ``IDENTITY_K`` smallest distinct pairs of each kind, sorted."""
    u = np.unique(pairs)
    number = (u & 0x8000) != 0
    return np.sort(np.concatenate((u[number][:IDENTITY_K], u[~number][:IDENTITY_K])))


@njit(cache=True, inline="always")
def _is_word_byte(c):
    return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122) or c == 95


@njit(cache=True)
def identity_pairs_ascii(buf, seed):
    """:func:`identity_pairs_reference` as a byte scan of ASCII-compatible UTF-8 (bytes >= 0x80 are
    separators, as the common punctuation they encode is); unsorted, with repeats."""
    n = buf.shape[0]
    low = np.zeros(n + 16, dtype=np.uint8)
    for i in range(n):
        c = buf[i]
        low[i] = c + 32 if 65 <= c <= 90 else c
    out = np.empty(n // 2 + 1, dtype=np.uint32)
    m = 0
    prev1 = np.uint64(0)
    prev2 = np.uint64(0)
    golden = np.uint64(0x9E3779B97F4A7C15)
    i = 0
    while i < n:
        if not _is_word_byte(buf[i]):
            i += 1
            continue
        s = i
        digits = True
        while i < n and _is_word_byte(buf[i]):
            if not (48 <= buf[i] <= 57):
                digits = False
            i += 1
        ident = digits
        if digits:  # join digit runs across one . , : / (the next run all digits)
            while i + 1 < n and (buf[i] == 46 or buf[i] == 44 or buf[i] == 58 or buf[i] == 47) \
                    and 48 <= buf[i + 1] <= 57:
                j = i + 1
                while j < n and 48 <= buf[j] <= 57:
                    j += 1
                if j < n and _is_word_byte(buf[j]):
                    break
                i = j
        elif 65 <= buf[s] <= 90 and s >= 2 and buf[s - 1] == 32:
            p = buf[s - 2]
            ident = (97 <= p <= 122) or (48 <= p <= 57) or p == 44 or p == 59 or p == 58
        h = _murmur3_64_padded(low, s, i, seed)
        if ident:
            ctx = _fmix(prev2 * golden + prev1)
            kind = np.uint64(0x8000) if digits else np.uint64(0)
            out[m] = np.uint32(((ctx >> np.uint64(48)) << np.uint64(16)) | kind | (h & np.uint64(0x7FFF)))
            m += 1
        prev2 = prev1
        prev1 = h
    return out[:m]


def identity_sketch(text: str) -> np.ndarray:
    """Sorted uint32 pairs: the ``IDENTITY_K`` smallest distinct (context, identity token) pairs."""
    if text.isascii() or ascii_equivalent(text) is not None:
        pairs = identity_pairs_ascii(np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8),
                                     IDENTITY_SEED)
        return _select(pairs) if pairs.shape[0] else _EMPTY
    return identity_pairs_reference(text)


def _counts(a: np.ndarray, b: np.ndarray) -> tuple[int, int]:
    """(contexts common to both, of which with a same token) for pairs of one kind."""
    full = 1 << 16
    tau = min(int(a[-1]) >> 16 if a.shape[0] >= IDENTITY_K else full,
              int(b[-1]) >> 16 if b.shape[0] >= IDENTITY_K else full)
    if tau < full:  # a full sample may have cut its last context's tokens short: compare below it
        a, b = a[(a >> 16) < tau], b[(b >> 16) < tau]
    common = np.intersect1d(a >> 16, b >> 16).shape[0]
    same = np.unique(np.intersect1d(a, b, assume_unique=True) >> 16).shape[0]
    return common, same


def agreement(a: np.ndarray, b: np.ndarray, min_contexts: int = 1) -> float | None:
    """Share of the contexts common to both sketches where both have a same token: the lower of
    that share over all identity tokens (with at least ``min_contexts`` common contexts) and over
    numbers alone (with at least ``MIN_NUMBER_CONTEXTS``: a template may keep its names and change
    only its figures); None when neither has enough."""
    na, nb = (a & 0x8000) != 0, (b & 0x8000) != 0
    cn, sn = _counts(a[na], b[nb])
    cw, sw = _counts(a[~na], b[~nb])
    shares = []
    if cn + cw >= min_contexts:
        shares.append((sn + sw) / (cn + cw))
    if cn >= MIN_NUMBER_CONTEXTS:
        shares.append(sn / cn)
    return min(shares) if shares else None
