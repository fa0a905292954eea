"""The fingerprints of a batch of texts as a few arrays: one compiled call computes them, one pickle
carries them to another process.

:func:`~stream_dedup.fingerprint_kernel.fingerprint_many` fingerprints every text the fold tables
hold in one call (the per-call cost of a kernel, ~3 us of argument and result boxing, was a fifth
of a short item's fingerprint) and returns the batch's values as arrays: the MinHash minima as rows
of one ``uint32[n, num_perm]``, and the anchors, content-word bitmaps and identity sketches each
concatenated with where each text's end, and the exact hashes
(:func:`~stream_dedup.hashing.exact_hash`, computed in the call). :class:`FingerprintBatch` keeps
them so, and the whole fingerprint of the texts the call leaves to the chain of kernels
(:meth:`Fingerprinter._chained <stream_dedup.fingerprint.Fingerprinter._chained>`: a character
no fold table holds; an identity text that does not fold to ASCII). :meth:`FingerprintBatch.fingerprints`
gives one :class:`~stream_dedup.fingerprint.Fingerprint` per text, its arrays views of the batch's:
the same values as :meth:`Fingerprinter.fingerprint_text <stream_dedup.fingerprint.Fingerprinter.fingerprint_text>`
(``tests/engine/test_fingerprint.py``). The ``dedup`` command's fingerprint processes send a
batch back so (:mod:`stream_dedup.fingerprint_pool`): one pickle of a few arrays, where a
fingerprint's bytes each (:meth:`Fingerprint.from_bytes <stream_dedup.fingerprint.Fingerprint.from_bytes>`)
cost the deciding process ~4 us a record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from . import fingerprint_kernel
from .fingerprint import Fingerprint, Fingerprinter, html_to_text, wire_layout
from .jit import trusted
from .rewrite import NO_WORDS

if TYPE_CHECKING:
    from .batch import BatchKeys

__all__ = ["FingerprintBatch"]

_fingerprint_many = trusted(fingerprint_kernel.fingerprint_many)  # bytes as uint8, the fold tables' own arrays


@dataclass(slots=True)
class FingerprintBatch:
    """The fingerprints of ``n`` texts (see the module doc): row ``i`` of ``minhash``, ``simhash[i]``,
    ``exact[i]``, ``n_shingles[i]``, and ``ends[i]`` = where text ``i``'s anchors, words and identity
    end in ``anchors``, ``words`` and ``identity`` (they start where text ``i - 1``'s end);
    ``whole[i]``: the fingerprint of a text computed otherwise (its row unused)."""
    minhash: np.ndarray           # uint32[n, num_perm]
    simhash: np.ndarray           # uint64[n]
    exact: bytes                  # 16 bytes per text, end to end
    n_shingles: np.ndarray        # int64[n]
    ends: np.ndarray              # int64[n, 3]: [anchors, words, identity] ends per text
    anchors: np.ndarray           # uint64, all texts'
    words: bytes                  # all texts' content-word bitmaps
    identity: np.ndarray          # uint32, all texts'
    whole: dict[int, Fingerprint] = field(default_factory=dict)
    #: what deciding on the rows needs besides (stream_dedup.batch.BatchKeys), if made with them
    keys: BatchKeys | None = None

    @classmethod
    def of(cls, fingerprinter: Fingerprinter, texts: Sequence[tuple[str, bool]]) -> FingerprintBatch:
        """The fingerprints of ``(text, is_html)`` pairs, as :meth:`Fingerprinter.fingerprint_text` computes them."""
        fpr, c = fingerprinter, fingerprinter.config
        if c.char_shingles or not texts:  # (character shingles: the chain of kernels, a text at a time)
            return cls.of_fingerprints([fpr.fingerprint_text(text, is_html) for text, is_html in texts])
        plain = [fpr.unflagged(html_to_text(text) if is_html else text) for text, is_html in texts]
        encoded = [text.encode("utf-8", "surrogatepass") for text in plain]
        starts = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=starts[1:])
        status, counts, sims, mins, exacts, ends, anchors, words, identity = _fingerprint_many(
            np.frombuffer(b"".join(encoded), dtype=np.uint8), starts,
            np.array([text.isascii() for text in plain], dtype=np.bool_), *fpr.kernel_settings())
        # (the exact hashes' h1, h2 little-endian: exact_hash's 16 bytes)
        batch = cls(minhash=mins, simhash=sims.astype(np.uint64, copy=False), n_shingles=counts.astype(np.int64),
                    ends=ends.astype(np.int64, copy=False), exact=exacts.astype("<u8", copy=False).tobytes(),
                    anchors=anchors, words=words.tobytes(), identity=identity)
        for i in np.flatnonzero(status != fingerprint_kernel.DONE).tolist():
            if status[i] == fingerprint_kernel.TOKENS_NOT_FOLDED:
                batch.whole[i] = fpr._chained(plain[i])
            else:  # the identity sketch in Python, the rest the call's
                fp = batch.fingerprint(i)
                fp.identity = fpr._identity(plain[i])
                batch.whole[i] = fp
        return batch

    @classmethod
    def from_wire(cls, forms: Sequence[bytes]) -> FingerprintBatch:
        """The fingerprints of byte forms (:meth:`Fingerprint.to_bytes <stream_dedup.fingerprint.Fingerprint.to_bytes>`:
        the worker's signature records) as one batch, without a :class:`Fingerprint` each: row
        ``i`` is :meth:`Fingerprint.from_bytes` of ``forms[i]`` (a ValueError as it raises for a
        bad form; also for forms of different signature lengths)."""
        if not forms:
            return cls.of_fingerprints([])
        sims, counts, exacts = [], [], []
        signatures, identities, anchors, words = [], [], [], []
        a_end, w_end, i_end = [], [], []
        a_at = w_at = i_at = 0
        num_perm0 = None
        for data in forms:
            num_perm, sim, n, exact, sig_at, id_at, k, anchors_at, a, w = wire_layout(data)
            if num_perm != num_perm0:
                if num_perm0 is not None:
                    raise ValueError(f"fingerprints of {num_perm0} and {num_perm} signature values in one batch")
                num_perm0 = num_perm
            sims.append(sim)
            counts.append(n)
            exacts.append(exact)
            signatures.append(data[sig_at:sig_at + 4 * num_perm])
            identities.append(data[id_at:id_at + 4 * k])
            anchors.append(data[anchors_at:anchors_at + 8 * a])
            words.append(data[len(data) - w:])
            a_at, w_at, i_at = a_at + a, w_at + w, i_at + k
            a_end.append(a_at)
            w_end.append(w_at)
            i_end.append(i_at)
        rows = len(forms)
        return cls(minhash=np.frombuffer(b"".join(signatures), dtype=">u4").astype(np.uint32).reshape(rows, num_perm0),
                   simhash=np.array(sims, dtype=np.uint64), exact=b"".join(exacts),
                   n_shingles=np.array(counts, dtype=np.int64),
                   ends=np.array([a_end, w_end, i_end], dtype=np.int64).T.copy(),
                   anchors=np.frombuffer(b"".join(anchors), dtype=">u8").astype(np.uint64), words=b"".join(words),
                   identity=np.frombuffer(b"".join(identities), dtype=">u4").astype(np.uint32))

    @classmethod
    def of_fingerprints(cls, fingerprints: list[Fingerprint]) -> FingerprintBatch:
        """A batch of fingerprints computed one by one (each kept whole)."""
        return cls(minhash=np.zeros((0, 0), dtype=np.uint32), simhash=np.zeros(0, dtype=np.uint64), exact=b"",
                   n_shingles=np.zeros(0, dtype=np.int64), ends=np.zeros((0, 3), dtype=np.int64),
                   anchors=np.zeros(0, dtype=np.uint64), words=b"", identity=np.zeros(0, dtype=np.uint32),
                   whole=dict(enumerate(fingerprints)))

    def __len__(self) -> int:
        return max(self.simhash.shape[0], len(self.whole))

    def exacts(self) -> list[bytes]:
        """Each row's exact hash (16 bytes)."""
        raw = self.exact
        return [raw[at:at + 16] for at in range(0, len(raw), 16)]

    def starts(self) -> np.ndarray:
        """int64[n + 1, 3]: where each text's anchors, words and identity begin in the batch's (one more: the ends)."""
        out = np.zeros((self.ends.shape[0] + 1, 3), dtype=np.int64)
        out[1:] = self.ends
        return out

    def __getitem__(self, i: int) -> Fingerprint:
        return self.fingerprint(i)

    def fingerprint(self, i: int) -> Fingerprint:
        """Text ``i``'s fingerprint (arrays: views of the batch's)."""
        if i in self.whole:
            return self.whole[i]
        a0, w0, i0 = self.ends[i - 1].tolist() if i else (0, 0, 0)
        a1, w1, i1 = self.ends[i].tolist()
        return Fingerprint(minhash=self.minhash[i], simhash=int(self.simhash[i]), exact=self.exact[16 * i:16 * i + 16],
                           n_shingles=int(self.n_shingles[i]), anchors=self.anchors[a0:a1],
                           words=self.words[w0:w1] if w1 > w0 else NO_WORDS, identity=self.identity[i0:i1])

    def fingerprints(self) -> list[Fingerprint]:
        """One :class:`Fingerprint` per text, in order (arrays: views of the batch's)."""
        whole = self.whole
        if not self.simhash.shape[0]:
            return [whole[i] for i in range(len(whole))]
        anchors, identity, words = self.anchors, self.identity, self.words
        out: list[Fingerprint] = []
        a0 = w0 = i0 = 0
        # (positional arguments, the rows by iteration: ~0.6 us a text, where keywords and indexing took ~0.9)
        for row, sim, exact, n, (a1, w1, i1) in zip(self.minhash, self.simhash.tolist(), self.exacts(),
                                                    self.n_shingles.tolist(), self.ends.tolist(), strict=True):
            out.append(Fingerprint(row, sim, exact, n, identity[i0:i1], anchors[a0:a1],
                                   words[w0:w1] if w1 > w0 else NO_WORDS))
            a0, w0, i0 = a1, w1, i1
        for i, fp in whole.items():  # (computed otherwise: their rows are unused)
            out[i] = fp
        return out
