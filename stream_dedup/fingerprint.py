"""Everything the index needs to know about one article, computed without any state.

text -> (HTML extraction) -> NFKC + casefold -> tokens -> word k-shingle hashes ->
MinHash signature (uint32[num_perm]), 64-bit SimHash, 128-bit exact hash, shingle count.

:class:`Fingerprint` has a compact, versioned byte form (:meth:`Fingerprint.to_bytes`) so a
fingerprint computed on one worker can be decided on by another.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from .config import EngineConfig
from .hashing import TokenHasher, exact_hash, shingle_hashes, sorted_unique
from .html_text import html_to_text
from .minhash import MinHasher
from .record import Article
from .simhash import simhash
from .text import normalize, tokenize

_WIRE_VERSION = 1
_HEADER = struct.Struct(">BHQI16s")  # version, num_perm, simhash, n_shingles, exact hash


@dataclass(frozen=True, eq=False)
class Fingerprint:
    minhash: np.ndarray      # uint32[num_perm], low 32 bits of each MinHash minimum
    simhash: int             # 64-bit SimHash
    exact: bytes             # 128-bit hash of the normalised text
    n_shingles: int          # number of distinct shingles (set size, for containment)

    def to_bytes(self) -> bytes:
        return _HEADER.pack(_WIRE_VERSION, self.minhash.shape[0], self.simhash, self.n_shingles,
                            self.exact) + self.minhash.astype(">u4").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> Fingerprint:
        if len(data) < _HEADER.size:
            raise ValueError("fingerprint bytes too short")
        version, num_perm, sim, n, exact = _HEADER.unpack_from(data)
        if version != _WIRE_VERSION:
            raise ValueError(f"unknown fingerprint version {version}")
        body = data[_HEADER.size:]
        if len(body) != 4 * num_perm:
            raise ValueError(f"fingerprint has {len(body)} signature bytes, expected {4 * num_perm}")
        return cls(np.frombuffer(body, dtype=">u4").astype(np.uint32), sim, exact, n)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Fingerprint) and self.simhash == other.simhash and self.exact == other.exact
                and self.n_shingles == other.n_shingles and np.array_equal(self.minhash, other.minhash))


class Fingerprinter:
    """Stateless apart from a token-hash memo; one per thread."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.tokens = TokenHasher(config.seed)
        self.minhasher = MinHasher(config.num_perm, config.seed)

    def tokens_of(self, text: str, is_html: bool = False) -> list[bytes]:
        if is_html:
            text = html_to_text(text)
        return tokenize(normalize(text))

    def fingerprint_tokens(self, tokens: list[bytes]) -> Fingerprint:
        shingles = shingle_hashes(self.tokens.hashes(tokens), self.config.shingle_size)
        unique = sorted_unique(shingles)
        sig = self.minhasher.signature32(unique >> np.uint64(32))
        return Fingerprint(minhash=sig, simhash=simhash(shingles), exact=exact_hash(tokens, self.config.seed),
                           n_shingles=int(unique.shape[0]))

    def fingerprint_text(self, text: str, is_html: bool = False) -> Fingerprint:
        return self.fingerprint_tokens(self.tokens_of(text, is_html))

    def fingerprint(self, article: Article) -> Fingerprint:
        return self.fingerprint_text(article.text, article.is_html)
