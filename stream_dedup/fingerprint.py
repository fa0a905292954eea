"""Everything the index needs to know about one article, computed without any state.

text -> (HTML extraction) -> folding (:mod:`stream_dedup.folding`) -> tokens -> token hashes -> word k-shingle hashes
-> MinHash signature (uint32[num_perm]), 64-bit SimHash, 128-bit exact hash, distinct shingle count,
passage anchors (:mod:`stream_dedup.passages`), the content-word bitmap (:mod:`stream_dedup.rewrite`);
and from the unfolded text, the identity sketch (:mod:`stream_dedup.identity`).

:class:`Fingerprint` has a compact, versioned byte form (:meth:`Fingerprint.to_bytes`) so a
fingerprint computed on one worker can be decided on by another.

:meth:`Fingerprinter.fingerprint_text` runs the compiled kernels (:mod:`stream_dedup.kernels`), in
one call for the text the fold tables hold (:mod:`stream_dedup.fingerprint_kernel`);
:meth:`Fingerprinter.fingerprint_reference` computes the same value step by step with the plain
Python/numpy functions (tests assert they agree bit for bit).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from . import fingerprint_kernel, kernels
from .config import EngineConfig
from .fold_table import fold_tokens, identity_tables, token_tables
from .folding import fold
from .hashing import TokenHasher, exact_hash, shingle_hashes, sorted_unique
from .headline import flag_words, strip_flag
from .identity import IDENTITY_K, IDENTITY_SEED, identity_pairs_reference, identity_sketch
from .identity import WORD_BYTES as IDENTITY_WORD_BYTES
from .jit import trusted
from .minhash import MinHasher, signature_numpy
from .passages import MAX_ANCHORS, NO_ANCHORS, winnow, winnow_reference
from .record import Article
from .rewrite import NO_WORDS, WORD_SHIFT, stop_hashes, word_bitmap, word_bitmap_reference
from .simhash import simhash_numpy
from .text import blank_non_word, char_tokens, has_no_boundary_script, no_boundary_table, tokenize

# 2: text folding (stream_dedup.folding) and Hangul per character, and the identity sketch after
# the signature; a version-1 fingerprint was computed from other tokens, so it is refused.
# 3: passage anchors (u16 count, then uint64 BE each) after the identity sketch
# 4: the content-word bitmap (u16 length, then its bytes) after the passage anchors
_WIRE_VERSION = 4
_HEADER = struct.Struct(">BHQI16s")  # version, num_perm, simhash, n_shingles, exact hash
_COUNT = struct.Struct(">H")          # identity sketch length (after the signature), then uint32 BE each
_M32 = np.uint64(0xFFFFFFFF)
_NO_IDENTITY = np.zeros(0, dtype=np.uint32)
# the hot kernel calls (jit.trusted): bytes as uint8, the token hashes a kernel's uint64 output (or
# TokenHasher's uint64 array), the MinHash parameters MinHasher's own
_token_hashes_utf8, _sketch, _winnow = trusted(kernels.token_hashes_utf8), trusted(kernels.sketch), trusted(winnow)
_token_hashes_split = trusted(kernels.token_hashes_split)  # the same, and the table's own bool array
_fingerprint_folded = trusted(fingerprint_kernel.fingerprint_folded)  # the same, and the fold tables' own arrays


def html_to_text(html: str) -> str:
    """:func:`stream_dedup.html_text.html_to_text`, imported on first use: lxml and ``html.parser``
    (~15 ms of start-up) are loaded only by a run that has HTML input."""
    from .html_text import html_to_text as extract

    return extract(html)


class WireLayout(NamedTuple):
    """Where the parts of a fingerprint's byte form are (:func:`wire_layout`): its header's values,
    then the byte at which each array starts and its length (big-endian uint32 signature values and
    identity sketch, uint64 passage anchors, the content-word bitmap's bytes: the last ``w``)."""
    num_perm: int
    simhash: int
    n_shingles: int
    exact: bytes
    sig_at: int
    identity_at: int
    k: int
    anchors_at: int
    a: int
    w: int


def wire_layout(data: bytes) -> WireLayout:
    """The layout of a fingerprint's byte form (:meth:`Fingerprint.to_bytes`), its lengths checked:
    after the header, the signature, then the identity sketch, the passage anchors and the
    content-word bitmap, each after its uint16 count. A ValueError says what is wrong with bytes of
    another form."""
    if len(data) < _HEADER.size:
        raise ValueError("fingerprint bytes too short")
    version, num_perm, sim, n, exact = _HEADER.unpack_from(data)
    if version != _WIRE_VERSION:
        raise ValueError(f"unknown fingerprint version {version} (this engine reads version {_WIRE_VERSION}: "
                         "stage-1 workers and the decision stage must run the same release)")
    sig_end = _HEADER.size + 4 * num_perm
    if len(data) < sig_end + _COUNT.size:
        raise ValueError(f"fingerprint has {len(data) - _HEADER.size} bytes after its header, expected at "
                         f"least {4 * num_perm + _COUNT.size}")
    (k,) = _COUNT.unpack_from(data, sig_end)
    anchors_at = sig_end + _COUNT.size + 4 * k
    if len(data) < anchors_at + _COUNT.size:
        raise ValueError(f"fingerprint has {len(data)} bytes, expected at least {anchors_at + _COUNT.size}")
    (a,) = _COUNT.unpack_from(data, anchors_at)
    words_at = anchors_at + _COUNT.size + 8 * a
    if len(data) < words_at + _COUNT.size:
        raise ValueError(f"fingerprint has {len(data)} bytes, expected at least {words_at + _COUNT.size}")
    (w,) = _COUNT.unpack_from(data, words_at)
    if len(data) != words_at + _COUNT.size + w:
        raise ValueError(f"fingerprint has {len(data)} bytes, expected {words_at + _COUNT.size + w}")
    return WireLayout(num_perm, sim, n, exact, _HEADER.size, sig_end + _COUNT.size, k, anchors_at + _COUNT.size, a, w)


# slots, not frozen: one is built per article on the hot path (frozen costs ~0.1 us per field); read-only by convention
@dataclass(slots=True, eq=False)
class Fingerprint:
    minhash: np.ndarray      # uint32[num_perm], low 32 bits of each MinHash minimum
    simhash: int             # 64-bit SimHash
    exact: bytes             # 128-bit hash of the normalised text
    n_shingles: int          # number of distinct shingles (set size, for containment)
    identity: np.ndarray = field(default_factory=lambda: _NO_IDENTITY)  # sorted uint32 (stream_dedup.identity)
    anchors: np.ndarray = field(default_factory=lambda: NO_ANCHORS)     # sorted uint64 (stream_dedup.passages)
    words: bytes = NO_WORDS  # content-word bitmap (stream_dedup.rewrite), empty when not computed

    def to_bytes(self) -> bytes:
        return b"".join((_HEADER.pack(_WIRE_VERSION, self.minhash.shape[0], self.simhash, self.n_shingles, self.exact),
                         self.minhash.astype(">u4").tobytes(), _COUNT.pack(self.identity.shape[0]),
                         self.identity.astype(">u4").tobytes(), _COUNT.pack(self.anchors.shape[0]),
                         self.anchors.astype(">u8").tobytes(), _COUNT.pack(len(self.words)), self.words))

    @classmethod
    def from_bytes(cls, data: bytes) -> Fingerprint:
        at = wire_layout(data)
        sig = np.frombuffer(data, dtype=">u4", count=at.num_perm, offset=at.sig_at).astype(np.uint32)
        identity = np.frombuffer(data, dtype=">u4", count=at.k, offset=at.identity_at).astype(np.uint32)
        anchors = np.frombuffer(data, dtype=">u8", count=at.a, offset=at.anchors_at).astype(np.uint64)
        return cls(sig, at.simhash, at.exact, at.n_shingles, identity, anchors, bytes(data[len(data) - at.w:]))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Fingerprint) and self.simhash == other.simhash and self.exact == other.exact
                and self.n_shingles == other.n_shingles and np.array_equal(self.minhash, other.minhash)
                and np.array_equal(self.identity, other.identity) and np.array_equal(self.anchors, other.anchors)
                and self.words == other.words)

    __hash__ = None  # type: ignore[assignment]


class Fingerprinter:
    """Stateless apart from a token-hash memo (used for no-boundary scripts); one per thread."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.tokens = TokenHasher(config.seed)
        self.minhasher = MinHasher(config.num_perm, config.seed)
        self.stop = stop_hashes(self.token_hashes)
        self.flag_words = flag_words(config.headline_flag_words)  # --headline-flag-words

    def plain_text(self, text: str, is_html: bool = False) -> str:
        """The folded text that is tokenised (:func:`stream_dedup.folding.fold`)."""
        return fold(html_to_text(text) if is_html else text, bool(self.config.fold_diacritics))

    @property
    def shingle_size(self) -> int:
        return self.config.char_shingles or self.config.shingle_size

    def token_hashes(self, text: str, is_html: bool = False) -> np.ndarray:
        """64-bit MurmurHash3 of every token (see :func:`stream_dedup.text.tokenize`).

        With ``char_shingles`` set, the tokens are the characters of the normalised text with
        non-word characters blanked and runs of spaces folded to one, so k-shingles are
        character k-grams.
        """
        if self.config.char_shingles:
            return self.tokens.hashes(char_tokens(self.plain_text(text, is_html)))
        if is_html:
            text = html_to_text(text)
        if text.isascii():  # folding is lower() on ASCII: skip it
            return _token_hashes_utf8(np.frombuffer(text.encode("ascii").lower(), dtype=np.uint8), kernels.WORD_BYTES,
                                      self.config.seed)
        folded = fold_tokens(text, bool(self.config.fold_diacritics))  # Latin script, CJK, Hangul: by table
        if folded is not None:
            buf, split = folded
            if split:  # characters tokenised one each
                return _token_hashes_split(buf, kernels.WORD_BYTES, no_boundary_table(), self.config.seed)
            return _token_hashes_utf8(buf, kernels.WORD_BYTES, self.config.seed)
        norm = fold(text, bool(self.config.fold_diacritics))
        if norm.isascii():
            buf = norm.encode("ascii")
        else:
            norm = blank_non_word(norm)
            buf = norm.encode("utf-8", "surrogatepass")
            if has_no_boundary_script(norm):  # per-character tokens (CJK, Thai, Korean, ...)
                return _token_hashes_split(np.frombuffer(buf, dtype=np.uint8), kernels.WORD_BYTES,
                                           no_boundary_table(), self.config.seed)
        return _token_hashes_utf8(np.frombuffer(buf, dtype=np.uint8), kernels.WORD_BYTES, self.config.seed)

    def fingerprint_text(self, text: str, is_html: bool = False) -> Fingerprint:
        if is_html:
            text = html_to_text(text)
        text = self.unflagged(text)
        if not self.config.char_shingles:  # the text the fold tables hold: one compiled call
            fp = self._fused(text)
            if fp is not None:
                return fp
        return self._chained(text)

    def fingerprint_many(self, texts: Sequence[tuple[str, bool]]) -> list[Fingerprint]:
        """:meth:`fingerprint_text` of each ``(text, is_html)``, the texts the fold tables hold in one
        compiled call for all of them (:mod:`stream_dedup.fingerprint_batch`): the same
        fingerprints, without a kernel call's ~3 us of argument and result boxing per text. The
        fingerprints' arrays are views of the batch's."""
        from .fingerprint_batch import FingerprintBatch

        return FingerprintBatch.of(self, texts).fingerprints()

    def _fused(self, text: str) -> Fingerprint | None:
        """:meth:`_chained` in one compiled call (:mod:`stream_dedup.fingerprint_kernel`), or None
        for text the fold tables do not hold."""
        status, n, mins, sim, th, anchors, words, identity = _fingerprint_folded(
            np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8), text.isascii(), *self.kernel_settings())
        if status == fingerprint_kernel.TOKENS_NOT_FOLDED:
            return None
        return Fingerprint(minhash=mins.astype(np.uint32), simhash=int(sim), exact=exact_hash(th, self.config.seed),
                           n_shingles=int(n), anchors=anchors, words=words.tobytes() if words.shape[0] else NO_WORDS,
                           identity=identity if status == fingerprint_kernel.DONE else self._identity(text))

    def kernel_settings(self) -> tuple:
        """The arguments of :mod:`stream_dedup.fingerprint_kernel`'s kernels after the text: the fold
        tables (read at each call: the tokens' table takes the blocks' entries once a text needs
        them) and this fingerprinter's settings, in the kernels' order."""
        c, m = self.config, self.minhasher
        diacritics = bool(c.fold_diacritics)
        return (*token_tables(diacritics), *identity_tables(diacritics), kernels.WORD_BYTES, c.seed, self.shingle_size,
                m._a_lo, m._a_hi, m.b, c.passage_window, MAX_ANCHORS, self.stop, WORD_SHIFT, self.keeps_words,
                c.identity_threshold > 0, IDENTITY_WORD_BYTES, IDENTITY_SEED, IDENTITY_K)

    def _chained(self, text: str) -> Fingerprint:
        """The fingerprint of ``text`` (HTML extracted, headline flag stripped) by one kernel call per step."""
        th = self.token_hashes(text)
        m = self.minhasher
        n, mins, sim = _sketch(th, self.shingle_size, m._a_lo, m._a_hi, m.b)
        return Fingerprint(minhash=mins.astype(np.uint32), simhash=int(sim),  # astype keeps the low 32 bits
                           exact=exact_hash(th, self.config.seed), n_shingles=int(n),
                           identity=self._identity(text), anchors=self._anchors(th), words=self._words(th))

    def unflagged(self, text: str) -> str:
        """``text`` without a headline flag (``BREAKING:``) when it is short (:mod:`stream_dedup.headline`)."""
        c = self.config
        if c.headline_flags and not c.char_shingles:
            return strip_flag(text, c.short_text_words, self.flag_words)
        return text

    def _anchors(self, token_hashes: np.ndarray) -> np.ndarray:
        """Passage anchors (:mod:`stream_dedup.passages`), none when ``passage_window`` is 0."""
        if self.config.passage_window > 0:
            return _winnow(token_hashes, self.shingle_size, self.config.passage_window)[:MAX_ANCHORS]
        return NO_ANCHORS

    @property
    def keeps_words(self) -> bool:
        """Whether the content-word bitmap is computed: for word tokens, with the rewrite rule on."""
        c = self.config
        return not c.char_shingles and c.rewrite_jaccard > 0 and c.rewrite_word_jaccard > 0

    def _words(self, token_hashes: np.ndarray) -> bytes:
        """The content-word bitmap (:mod:`stream_dedup.rewrite`), empty when it is not used."""
        return word_bitmap(token_hashes, self.stop) if self.keeps_words else NO_WORDS

    def _identity(self, text: str) -> np.ndarray:
        """The identity sketch, or an empty one when the identity check is off (it costs ~35 us)."""
        if self.config.identity_threshold > 0:
            return identity_sketch(text, bool(self.config.fold_diacritics))
        return _NO_IDENTITY

    def fingerprint(self, article: Article) -> Fingerprint:
        return self.fingerprint_text(article.text, article.is_html)

    def fingerprint_reference(self, text: str, is_html: bool = False) -> Fingerprint:
        """The same fingerprint through the uncompiled reference functions (slow; for tests)."""
        text = self.unflagged(html_to_text(text) if is_html else text)
        norm = self.plain_text(text)
        tokens = char_tokens(norm) if self.config.char_shingles else tokenize(norm)
        th = TokenHasher(self.config.seed).hashes(tokens)
        shingles = shingle_hashes(th, self.shingle_size)
        unique = sorted_unique(shingles)
        mins = signature_numpy(unique >> np.uint64(32), self.minhasher.a, self.minhasher.b)
        return Fingerprint(minhash=(mins & _M32).astype(np.uint32), simhash=simhash_numpy(shingles),
                           exact=exact_hash(th, self.config.seed), n_shingles=int(unique.shape[0]),
                           identity=identity_pairs_reference(fold(text,
                                                                   bool(self.config.fold_diacritics), case=False))
                           if self.config.identity_threshold > 0 else _NO_IDENTITY,
                           anchors=winnow_reference(shingles, self.config.passage_window)[:MAX_ANCHORS],
                           words=word_bitmap_reference(th, self.stop) if self.keeps_words else NO_WORDS)
