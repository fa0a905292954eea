"""The compiled loop of a batch's decisions (:func:`decide_run`): for each article in order, its
candidates, their verification, the passage check and its filing in the lists.

One by one, an article's decision is ~40 Python calls around four kernels (the candidates' lookup,
the rules, the passage lists, the filing), each kernel call paying ~1.5-2.5 us to unbox the lists'
arrays: on short wire items ~30 us a record, three times the fingerprint. :func:`decide_run` runs
the same steps for a whole batch in one call, article after article (each finds the ones before it:
it files them in the lists as it goes), and returns where it stopped, the numbers of each
decision left in an array (``R_*`` columns). :mod:`stream_dedup.batch_decisions` makes its arrays,
builds each :class:`~stream_dedup.decision.Decision` from those numbers and writes the records.

It decides only what it can decide exactly as :meth:`Deduplicator._decide
<stream_dedup.engine.Deduplicator._decide>` does, and stops at the first article it cannot, which
then goes that way (:data:`STOP_PYTHON`):

* an article the caller marks (``rows[i] < 0``): a replay, an empty text, a content-word bitmap of
  another size;
* an exact duplicate (``exact_to[i]``: an indexed article has its exact hash, or an earlier article
  of the batch does and was indexed) whose match's record the store does not hold, or whose
  earlier article of the batch was decided before this call (an exact duplicate of a held record or
  of an article filed in this call is decided here: :func:`_exact_duplicate`, ``R_EXACT``);
* more than ``max_verify`` candidates, a candidate whose record the record store does not hold
  (evicted from its cache), a rounding at a half (:mod:`stream_dedup.candidate_rules`);
* an article whose passage step verifies again (a stored article shares ``passage_min_shared``
  usable anchors with it, or it is a duplicate with boilerplate to discount: :func:`_shares`) with
  more than ``max_verify / 4`` articles sharing enough (Python's order among equal counts decides
  which). Otherwise the kernel verifies it again itself, on its candidates and those articles,
  with their shared anchors (:func:`_passage_candidates`, as :meth:`Deduplicator._passages
  <stream_dedup.engine.Deduplicator._passages>` does), and chooses the lists it joins
  (:func:`_joins`, as :func:`stream_dedup.passages.posting_writes` does).

A candidate filed earlier in the same call has no record in the record store yet (records are
written in Python, after the call): each article the call files leaves a *provisional* record in
the batch's own buffer (:func:`_write_provisional`: the fields verification reads, ids and stored
decision left out), and an article whose candidates include such articles is verified on their
records and the store's, gathered end to end (:func:`_gathered`). Its result then says ``R_AT =
-1`` for a match filed in the same call, whose id and root the caller knows. (Before, the call
stopped there and was called again once the records were written: on short wire items, whose
copies follow each other, ~30 calls a batch of 256.)
"""

from __future__ import annotations

import numpy as np

from .jit import compiling, inline, kernel, trusted

if compiling():
    from .addresses import copy_into
    from .candidate_rules import verify_candidates, verify_stored
    from .kernels import popcount, record_head
    from .list_table import prefetch_homes, table_members
    from .record_store import locate
    from .simhash_table import file_article, lookup_candidates, prefetch_runs

__all__ = ["STOP_DONE", "STOP_PYTHON", "decide_run"]

STOP_DONE, STOP_PYTHON = 0, 1
# per article (float64 columns of the result): candidates verified, best candidate's seq (-1: none),
# template's seq (-1), its identity agreement, the best's rule bits, direction, Hamming distance,
# Jaccard and containment (as reported), the template's Jaccard, indexed (0/1), joins its passage lists (0/1),
# where the best's (else the template's) record is in the record store's buffer and its length
R_CANDIDATES, R_BEST, R_TEMPLATE, R_AGREED, R_HITS, R_DIRECTION, R_HAMMING, R_JACCARD, R_CONTAINMENT, \
    R_TEMPLATE_JACCARD, R_INDEXED, R_JOINS, R_AT, R_LENGTH, R_EXACT = range(15)
R_COLUMNS = 15  # (R_EXACT: 1 for an exact duplicate of R_BEST)
# settings (int64): SimHash distance, candidates verified at most, short-text range (low, high), band
# table cap, passage lists' cap, largest seq the buckets can name, passage_common_docs, passage_min_shared
K_SIMHASH, K_MAX_VERIFY, K_SHORT_LOW, K_SHORT_HIGH, K_CAP, K_PASSAGE_CAP, K_MAX_SEQ, K_COMMON, K_MIN_SHARED = range(9)
_O_HITS, _O_DIRECTION, _O_HAMMING, _O_JACCARD, _O_CONTAINMENT = range(5)  # candidate_rules.O_*
_S_BEST, _S_TEMPLATE, _S_AGREED, _S_UNCERTAIN = range(4)  # candidate_rules.S_*
_HEAD = 37  # bytes of a record before its signature (candidate_rules._HEAD)
_WORD_BYTES = 64  # a content-word bitmap's bytes (rewrite.WORD_BITS // 8)


@inline
def _usable_members(members, ends, common):
    """The members of the usable lists (those of fewer than ``common``; list ``t`` ends at
    ``ends[t]`` in ``members``), in order, and how many lists are usable."""
    kept = np.empty(members.shape[0], dtype=members.dtype)
    nk = 0
    usable = 0
    prev = 0
    for t in range(ends.shape[0]):
        if ends[t] - prev < common:
            usable += 1
            for q in range(prev, ends[t]):
                kept[nk] = members[q]
                nk += 1
        prev = ends[t]
    return kept[:nk], usable


@inline
def _shares(members, ends, common, min_shared, duplicate):
    """Whether the passage step needs Python (:meth:`Deduplicator._passages
    <stream_dedup.engine.Deduplicator._passages>`): a stored article shares at least ``min_shared``
    usable anchors (lists of fewer than ``common`` members) with the article, or it is a
    ``duplicate`` with boilerplate (lists that are not usable) to discount."""
    kept, usable = _usable_members(members, ends, common)
    nk = kept.shape[0]
    if duplicate and usable != ends.shape[0]:
        return True
    if nk == 0:
        return False
    if min_shared <= 1:
        return True
    ordered = np.sort(kept[:nk])
    run = 1
    for q in range(1, nk):
        if ordered[q] == ordered[q - 1]:
            run += 1
            if run >= min_shared:
                return True
        else:
            run = 1
    return False


@inline
def _joins(members, ends, common, found, passed, passing, join):
    """The passage lists the article joins (:func:`stream_dedup.passages.posting_writes`): ``join[t]``
    for each of its anchors (those of fewer than ``common`` members, and holding none of the
    candidates that passed a rule, ``found[passed[:passing]]``); returns how many."""
    count = 0
    prev = 0
    for t in range(ends.shape[0]):
        ok = ends[t] - prev < common
        if ok and passing:
            for q in range(prev, ends[t]):
                for k in range(passing):
                    if members[q] == found[passed[k]]:
                        ok = False
        join[t] = 1 if ok else 0
        if ok:
            count += 1
        prev = ends[t]
    return count


@inline
def _write_provisional(out, at, simhash, n, signature_u8, rows, r, identity_u8, id_from, k_id, n_anchors, words_row, w):
    """Row ``r``'s provisional record at ``out[at:]``: what a record holds for its verification
    (:mod:`stream_dedup.index_record`'s layout: SimHash, set size, flags, stored signature, the
    lengths, identity sketch, content-word bitmap; ids empty, no stored decision). ``out`` is zeroed."""
    for b in range(8):
        out[at + 8 + b] = np.uint8((np.uint64(simhash) >> np.uint64(56 - 8 * b)) & np.uint64(0xFF))
    for b in range(4):
        out[at + 16 + b] = np.uint8((n >> (24 - 8 * b)) & 0xFF)
    out[at + 20] = 1  # (index_record.FLAG_INDEXED)
    p = at + _HEAD
    sig_from = 2 * rows * r
    for b in range(2 * rows):
        out[p + b] = signature_u8[sig_from + b]
    p += 2 * rows
    a = min(n_anchors, 0xFFFF)
    out[p + 4], out[p + 5] = np.uint8((k_id >> 8) & 0xFF), np.uint8(k_id & 0xFF)
    out[p + 6], out[p + 7] = np.uint8((a >> 8) & 0xFF), np.uint8(a & 0xFF)
    out[p + 8] = np.uint8(w)
    p += 9
    for b in range(4 * k_id):
        out[p + b] = identity_u8[4 * id_from + b]
    p += 4 * k_id
    for b in range(w):
        out[p + b] = words_row[b]


@inline
def _exact_duplicate(res, target, seq0, start, rows, simhashes, simhash, buf, store_keys, store_vals, starts, lengths):
    """Leave in ``res`` the decision of an exact duplicate of article ``target`` (filed in this
    call, or one whose record the store holds); False if the store does not hold its record."""
    if target >= seq0:  # (filed earlier in this call: its SimHash is the batch's)
        other = simhashes[rows[start + (target - seq0)]]
        at, length = -1, 0
    else:
        one = np.empty(1, dtype=np.int64)
        one[0] = target
        if locate(buf, store_keys, store_vals, one, starts, lengths):
            return False
        at, length = starts[0], lengths[0]
        other, _ = record_head(buf, at)
    res[R_CANDIDATES] = 1.0
    res[R_BEST] = target
    res[R_TEMPLATE] = -1.0
    res[R_HAMMING] = popcount(other ^ simhash)
    res[R_JACCARD] = 1.0
    res[R_CONTAINMENT] = 1.0
    res[R_INDEXED] = 0.0
    res[R_JOINS] = 0.0
    res[R_AT] = at
    res[R_LENGTH] = length
    res[R_EXACT] = 1.0
    return True


@inline
def _verify(buf, store_keys, store_vals, provisional, provisional_at, found, starts, lengths, seq0, start, rows, query,
            simhash, size, jaccard_of, jaccard4_of, rules, params, shared, usable, common, words_a, counts, identity_a,
            out, summary, passed):
    """:func:`~stream_dedup.candidate_rules.verify_stored` on ``found``, the records of those filed
    earlier in this call being their provisional ones (:func:`_gathered`); ``starts`` left where each
    is in the record store (-1: this call's). Returns how many pass, or -1 where Python must decide:
    a candidate the store does not hold (evicted), a rounding at a half."""
    m = found.shape[0]
    got = verify_stored(buf, store_keys, store_vals, found, starts, lengths, query, simhash, size, jaccard_of,
                        jaccard4_of, rules, params, shared, usable, common, words_a, counts, identity_a, out, summary,
                        passed)
    if got < 0:  # records not held: this call's own articles' (not written yet), or evicted ones
        for k in range(m):
            if starts[k] < 0 and found[k] < seq0:
                return -1
        recs, held_at = _gathered(buf, provisional, provisional_at, found, starts, lengths, seq0, start, rows)
        got = verify_candidates(recs, starts[:m], lengths[:m], query, simhash, size, jaccard_of, jaccard4_of, rules,
                                params, shared, usable, common, words_a, counts, identity_a, out, summary, passed)
        for k in range(m):  # (where each record is in the record store: -1 for this call's)
            starts[k] = held_at[k]
    if summary[_S_UNCERTAIN] != 0.0:
        return -1
    return got


@inline
def _passage_candidates(found, members, ends, common, min_shared):
    """The candidates of :meth:`Deduplicator._passages <stream_dedup.engine.Deduplicator._passages>`:
    ``found`` and the articles sharing at least ``min_shared`` usable anchors (in lists of fewer
    than ``common`` members), ascending, each one's count of shared usable anchors (0 if under
    ``min_shared``, as :func:`stream_dedup.passages.lookup` keeps them), the usable lists, and how
    many articles share enough."""
    kept, usable = _usable_members(members, ends, common)
    nk = kept.shape[0]
    ordered = np.sort(kept)
    sharing = np.empty(nk, dtype=members.dtype)
    shared_n = np.empty(nk, dtype=np.int64)
    ns = 0
    q = 0
    while q < nk:
        e = q + 1
        while e < nk and ordered[e] == ordered[q]:
            e += 1
        if e - q >= min_shared:
            sharing[ns] = ordered[q]
            shared_n[ns] = e - q
            ns += 1
        q = e
    nf = found.shape[0]
    seqs = np.empty(nf + ns, dtype=found.dtype)
    counts = np.zeros(nf + ns, dtype=np.int64)
    a = 0
    b = 0
    c = 0
    while a < nf or b < ns:
        if b >= ns or (a < nf and np.int64(found[a]) < np.int64(sharing[b])):
            seqs[c] = found[a]
            a += 1
        elif a >= nf or np.int64(sharing[b]) < np.int64(found[a]):
            seqs[c] = sharing[b]
            counts[c] = shared_n[b]
            b += 1
        else:
            seqs[c] = found[a]
            counts[c] = shared_n[b]
            a += 1
            b += 1
        c += 1
    return seqs[:c], counts[:c], usable, ns


@inline
def _gathered(buf, provisional, provisional_at, found, starts, lengths, seq0, start, rows):
    """The candidates' records end to end: the record store's (``starts``, ``lengths``: where
    :func:`~stream_dedup.record_store.locate` found them, -1 for those filed earlier in this call)
    and, for those, their provisional records; ``starts`` and ``lengths`` set to where each is in it.
    Also returns where each is in the record store (-1: this call's)."""
    m = found.shape[0]
    held_at = starts[:m].copy()
    total = 0
    for k in range(m):
        if held_at[k] < 0:
            pr = rows[start + (found[k] - seq0)]
            lengths[k] = provisional_at[pr + 1] - provisional_at[pr]
        total += lengths[k]
    recs = np.empty(total, dtype=np.uint8)
    at = 0
    for k in range(m):
        n = lengths[k]
        # (not slice assignments: those were ~45 % of this kernel's own time on short items, addresses.copy_into)
        if held_at[k] < 0:
            copy_into(recs, at, provisional, provisional_at[rows[start + (found[k] - seq0)]], n)
        else:
            copy_into(recs, at, buf, held_at[k], n)
        starts[k] = at
        at += n
    return recs, held_at


@kernel
def decide_run(start, seq0, rows, keys, permuted, queries, simhashes, sizes, words, has_words, identity, identity_at,
               exact_to, anchors, anchors_at, slot_keys, slot_head, node_seq, node_next, old_keys, old_head, mirror_seq,
               mirror_next, meta, fps, tags, seqs, old_fps, old_tags, old_seqs, s_meta, masks, p_slot_keys,
               p_slot_head, p_node_seq, p_node_next, p_old_keys, p_old_head, p_mirror_seq, p_mirror_next, p_meta,
               buf, store_keys, store_vals, jaccard_of, jaccard4_of, rules, params, counts, out, summary, passed,
               starts, lengths, settings, index_below, signature_u8, identity_u8, provisional, provisional_at, result,
               joined, stop):
    """Decide on articles ``start``, ``start + 1``, ... of a batch (see the module doc) until one
    that Python must take; return its position (the batch's length when all are done) and say why
    in ``stop[0]`` (``STOP_*``). Article ``i`` (if ``rows[i] >= 0``, its row in the batch's
    arrays: bucket ``keys``, SimHash ``permuted`` for each table, signature ``queries`` (int64),
    ``simhashes``, set ``sizes``, content-word ``words`` (``has_words``), identity sketch and
    passage anchors (concatenated, row ``r`` from ``*_at[r]`` to ``*_at[r + 1]``)) gets seq
    ``seq0 + i - start``, is filed in the lists (band table, SimHash tables, passage lists: their
    arrays) and leaves its decision in ``result[i]`` (``R_*``). ``buf``, ``store_keys``,
    ``store_vals``: the record store's arrays; ``jaccard_of`` ... ``lengths``: those of
    :class:`~stream_dedup.candidate_rules.CompiledRules`; ``index_below``: the configuration's
    ``index_below_similarity``; ``signature_u8``, ``identity_u8``: the rows' stored signatures and
    identity sketches as records hold them (big-endian bytes, row after row); ``provisional``,
    ``provisional_at``: room for each row's provisional record (:func:`_write_provisional`)."""
    n = rows.shape[0]
    simhash_k = settings[K_SIMHASH]
    short_low, short_high = settings[K_SHORT_LOW], settings[K_SHORT_HIGH]
    no_shared = np.zeros(0, dtype=np.int64)
    no_words = np.zeros(0, dtype=np.uint8)
    no_keys = np.zeros(0, dtype=np.uint64)
    no_members = np.zeros(0, dtype=np.uint32)
    no_ends = np.zeros(0, dtype=np.int64)
    for i in range(start, n):
        r = rows[i]
        seq = seq0 + (i - start)
        if r < 0 or seq > settings[K_MAX_SEQ]:
            stop[0] = STOP_PYTHON
            return i
        if exact_to[i] != -1:  # (Deduplicator._decide's exact match: an indexed article with its exact hash)
            target = exact_to[i]
            while target < -1:  # the batch's articles with its hash, latest first: the latest indexed one's seq
                j = -2 - target
                if j < start:  # (decided before this call: its decision is not in this call's results)
                    stop[0] = STOP_PYTHON
                    return i
                target = seq0 + (j - start) if result[j, R_INDEXED] != 0.0 else exact_to[j]
            if target >= 0:
                if _exact_duplicate(result[i], target, seq0, start, rows, simhashes, simhashes[r], buf, store_keys,
                                    store_vals, starts, lengths):
                    continue
                stop[0] = STOP_PYTHON  # (its record not held: evicted from the record store, or deleted)
                return i
        size = sizes[r]
        found = lookup_candidates(slot_keys, slot_head, node_seq, node_next, old_keys, old_head, mirror_seq,
                                  mirror_next, meta, keys[r], fps, tags, seqs, old_fps, old_tags, old_seqs,
                                  permuted[r], masks, simhash_k)
        if i + 1 < n and rows[i + 1] >= 0:  # the next article's slots loading while this one is verified and filed
            prefetch_homes(slot_keys, slot_head, old_keys, old_head, meta, keys[rows[i + 1]])
            prefetch_runs(fps, tags, old_fps, old_tags, permuted[rows[i + 1]], masks)
        m = found.shape[0]
        if m > settings[K_MAX_VERIFY]:
            stop[0] = STOP_PYTHON
            return i
        best = -1
        template = -1
        got = 0
        words_a = words[r] if has_words[r] else no_words
        identity_r = identity[identity_at[r]:identity_at[r + 1]]
        if m:
            got = _verify(buf, store_keys, store_vals, provisional, provisional_at, found, starts, lengths, seq0,
                          start, rows, queries[r], simhashes[r], size, jaccard_of, jaccard4_of, rules, params,
                          no_shared, 0, 0.0, words_a, counts, identity_r, out, summary, passed)
            if got < 0:  # (an evicted candidate, or a rounding at a half)
                stop[0] = STOP_PYTHON
                return i
            best = int(summary[_S_BEST])
            template = int(summary[_S_TEMPLATE])
        contained = False
        if best >= 0:
            hits = int(out[_O_HITS, best])
            contained = (hits & 1) == 0 and (hits & 2) != 0  # the method: containment (not minhash)
        a_from, a_to = anchors_at[r], anchors_at[r + 1]
        na = a_to - a_from
        passage_step = (best < 0 or contained) and na > 0 and not (short_low < size < short_high)
        ends = no_ends
        members = no_members
        if passage_step:  # (passages.lookup)
            ends = np.zeros(na, dtype=np.int64)
            members = table_members(p_slot_keys, p_slot_head, p_node_seq, p_node_next, p_old_keys, p_old_head,
                                    p_mirror_seq, p_mirror_next, p_meta, anchors[a_from:a_to], ends)
            if members.shape[0] and _shares(members, ends, settings[K_COMMON], settings[K_MIN_SHARED], best >= 0):
                # verified again with the articles sharing passages (Deduplicator._passages)
                found, shared, usable, n_shared = _passage_candidates(found, members, ends, settings[K_COMMON],
                                                                      settings[K_MIN_SHARED])
                m = found.shape[0]
                if n_shared > settings[K_MAX_VERIFY] // 4 or m > out.shape[1]:  # (Python's order among ties)
                    stop[0] = STOP_PYTHON
                    return i
                got = _verify(buf, store_keys, store_vals, provisional, provisional_at, found, starts, lengths, seq0,
                              start, rows, queries[r], simhashes[r], size, jaccard_of, jaccard4_of, rules, params,
                              shared if n_shared else no_shared, usable, 1.0 - usable / na, words_a, counts,
                              identity_r, out, summary, passed)
                if got < 0:
                    stop[0] = STOP_PYTHON
                    return i
                best = int(summary[_S_BEST])
                template = int(summary[_S_TEMPLATE])
        indexed = not (best >= 0 and out[_O_JACCARD, best] >= index_below)
        join = joined[a_from:a_to]
        joins = 0
        if passage_step and indexed:  # (passages.posting_writes)
            joins = _joins(members, ends, settings[K_COMMON], found, passed, got, join)
        res = result[i]
        res[R_CANDIDATES] = m
        res[R_BEST] = -1.0
        res[R_TEMPLATE] = -1.0
        if best >= 0:
            res[R_BEST] = found[best]
            res[R_AT] = starts[best]
            res[R_LENGTH] = lengths[best]
            res[R_HITS] = out[_O_HITS, best]
            res[R_DIRECTION] = out[_O_DIRECTION, best]
            res[R_HAMMING] = out[_O_HAMMING, best]
            res[R_JACCARD] = out[_O_JACCARD, best]
            res[R_CONTAINMENT] = out[_O_CONTAINMENT, best]
        elif template >= 0:
            res[R_TEMPLATE] = found[template]
            res[R_AT] = starts[template]
            res[R_LENGTH] = lengths[template]
            res[R_TEMPLATE_JACCARD] = out[_O_JACCARD, template]
            res[R_AGREED] = summary[_S_AGREED]
        res[R_INDEXED] = 1.0 if indexed else 0.0
        res[R_EXACT] = 0.0
        res[R_JOINS] = joins
        adds = no_keys
        if joins:
            adds = np.empty(joins, dtype=np.uint64)
            k = 0
            for t in range(na):
                if join[t]:
                    adds[k] = anchors[a_from + t]
                    k += 1
        file_article(slot_keys, slot_head, node_seq, node_next, old_keys, old_head, mirror_seq, mirror_next, meta,
                     keys[r] if indexed else no_keys, fps, tags, seqs, s_meta, permuted[r] if indexed else no_keys,
                     masks, p_slot_keys, p_slot_head, p_node_seq, p_node_next, p_old_keys, p_old_head, p_mirror_seq,
                     p_mirror_next, p_meta, adds, seq, settings[K_CAP], settings[K_PASSAGE_CAP])
        if indexed:  # (a later article of this call may find it before Python writes its record)
            _write_provisional(provisional, provisional_at[r], simhashes[r], size, signature_u8, queries.shape[1],
                               r, identity_u8, identity_at[r], identity_at[r + 1] - identity_at[r], na, words[r],
                               _WORD_BYTES if has_words[r] else 0)
    stop[0] = STOP_DONE
    return n


_decide_run = trusted(decide_run)  # every array made by Builder or the lists' and store's own
