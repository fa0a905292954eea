"""The decision on one article (:class:`Decision`): its event form and the compact form the index keeps."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from math import isfinite
from typing import Any

__all__ = ["METHODS", "Decision", "exact_copy", "look_alike", "verified"]

METHODS = ("exact", "minhash", "containment", "simhash", "rewrite")
# the methods of each combination of candidate_rules.HIT_* bits (in METHODS order), and the direction codes
_METHODS_OF_HITS = [tuple(m for bit, m in zip((1, 2, 4, 8), METHODS[1:], strict=True) if hits & bit)
                    for hits in range(16)]
_DIRECTIONS = (None, "new_in_earlier", "earlier_in_new")


# slots, not frozen: one is built per article on the hot path (frozen costs ~0.1 us per field); read-only by convention
@dataclass(slots=True)
class Decision:
    id: str
    type: str                          # "new" | "duplicate-of"
    duplicate_of: str | None = None    # first-seen article of the matched cluster
    similarity: float | None = None    # estimated Jaccard with the matched article
    method: str | None = None          # first of METHODS that matched
    hamming_distance: int | None = None
    containment: float | None = None
    matched_id: str | None = None      # the article actually matched (may be a later copy)
    methods: tuple[str, ...] = ()
    candidates: int = 0
    seen_before: bool = False
    direction: str | None = None       # containment matches: "new_in_earlier" or "earlier_in_new"
    template_of: str | None = None     # new, but a look-alike of this article (identity tokens disagree)
    identity_overlap: float | None = None  # with template_of: share of identity tokens in common
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def is_duplicate(self) -> bool:
        return self.type == "duplicate-of"

    def to_event(self) -> dict[str, Any]:
        """The JSON event of the ``dedup`` command and of the worker's output topics."""
        event = {"id": self.id, "type": self.type, "duplicate_of": self.duplicate_of,
                 "similarity": self.similarity, "method": self.method, "hamming_distance": self.hamming_distance,
                 "containment": self.containment, "matched_id": self.matched_id, "methods": list(self.methods),
                 "candidates": self.candidates, "seen_before": self.seen_before}
        if self.direction is not None:
            event["direction"] = self.direction
        if self.template_of is not None:
            event["template_of"] = self.template_of
            event["identity_overlap"] = self.identity_overlap
        if self.extra:
            event.update(self.extra)
        return event

    def event_json(self) -> str:
        """``json.dumps(self.to_event(), ensure_ascii=False)``, the same text, built directly (the
        ``dedup`` command writes one per record). Values of other types than those the engine gives
        (str, int, float, None, a tuple of str) and ``extra`` go through ``json.dumps`` itself."""
        if not self.extra:
            try:
                if self.type == "new" and self.duplicate_of is None and self.matched_id is None \
                        and self.template_of is None and self.similarity is None and self.method is None \
                        and self.hamming_distance is None and self.containment is None and self.direction is None \
                        and not self.methods:  # (most new articles: one template)
                    return "".join(('{"id": ', _json_str(self.id), _NEW_EVENT, _json_int(self.candidates),
                                    ', "seen_before": ', _json_bool(self.seen_before), "}"))
                if self.type == "duplicate-of" and self.template_of is None:
                    event = self._duplicate_json()
                    if event is not None:
                        return event
                parts = ['{"id": ', _json_str(self.id), ', "type": ', _json_str(self.type),
                         ', "duplicate_of": ', _json_opt_str(self.duplicate_of),
                         ', "similarity": ', _json_opt_float(self.similarity),
                         ', "method": ', _json_opt_str(self.method),
                         ', "hamming_distance": ', _json_opt_int(self.hamming_distance),
                         ', "containment": ', _json_opt_float(self.containment),
                         ', "matched_id": ', _json_opt_str(self.matched_id),
                         ', "methods": ', _json_methods(self.methods),
                         ', "candidates": ', _json_int(self.candidates),
                         ', "seen_before": ', _json_bool(self.seen_before)]
                if self.direction is not None:
                    parts += ', "direction": ', _json_str(self.direction)
                if self.template_of is not None:
                    parts += (', "template_of": ', _json_str(self.template_of),
                              ', "identity_overlap": ', _json_opt_float(self.identity_overlap))
                parts.append("}")
                return "".join(parts)
            except _OtherType:
                pass
        return json.dumps(self.to_event(), ensure_ascii=False)

    def _duplicate_json(self) -> str | None:
        """:meth:`event_json` of a duplicate without a template whose values are all of the types the
        engine gives them (None if one is not): one f-string, ~1.2 us where the parts took ~1.8."""
        sim, cont, ham, cand, direction, seen = (self.similarity, self.containment, self.hamming_distance,
                                                 self.candidates, self.direction, self.seen_before)
        try:
            methods = _METHODS_JSON.get(self.methods) if type(self.methods) is tuple else None
        except TypeError:  # (an unhashable element)
            return None
        if methods is None or type(self.id) is not str or type(self.duplicate_of) is not str \
                or type(self.matched_id) is not str or type(self.method) is not str or type(sim) is not float \
                or type(cont) is not float or not isfinite(sim) or not isfinite(cont) or type(ham) is not int \
                or type(cand) is not int or (seen is not True and seen is not False) \
                or (direction is not None and type(direction) is not str):
            return None
        return (f'{{"id": {encode_basestring(self.id)}, "type": "duplicate-of", "duplicate_of": '
                f'{encode_basestring(self.duplicate_of)}, "similarity": {float.__repr__(sim)}, "method": '
                f'{encode_basestring(self.method)}, "hamming_distance": {int.__repr__(ham)}, "containment": '
                f'{float.__repr__(cont)}, "matched_id": {encode_basestring(self.matched_id)}, "methods": {methods}, '
                f'"candidates": {int.__repr__(cand)}, "seen_before": {"true" if seen else "false"}'
                + ("}" if direction is None else f', "direction": {encode_basestring(direction)}}}'))

    def to_stored(self) -> list[Any]:
        """The compact form the index keeps (replayed for a repeated id): the event's values in
        ``_STORED_FIELDS`` order, without the keys, the id (the record has it) and ``seen_before``."""
        values = [getattr(self, f) for f in _STORED_FIELDS]
        while values and values[-1] is None:  # the rarer fields are last: most records end earlier
            values.pop()
        return values

    @classmethod
    def from_stored(cls, stored: dict[str, Any] | list[Any], article_id: str | None = None) -> Decision:
        """The decision first returned, ``seen_before`` set: from :meth:`to_stored` with the article's
        id, or from an event dict."""
        if isinstance(stored, list):
            data = dict(zip(_STORED_FIELDS, stored, strict=False))  # trailing None values were not stored
            data["id"] = article_id
        else:
            data = dict(stored)
        data["methods"] = tuple(data.get("methods", ()))
        data["seen_before"] = True
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known and k != "extra"})


def verified(article_id: str, hits: float, direction: float, hamming: float, jaccard: float, containment: float,
             matched_id: str, root_id: str, candidates: int) -> Decision:
    """The duplicate the compiled rules found (:mod:`stream_dedup.candidate_rules`: the best
    candidate's rule bits, direction code, Hamming distance, Jaccard and containment as reported)."""
    methods = _METHODS_OF_HITS[int(hits)]
    return Decision(id=article_id, type="duplicate-of", duplicate_of=root_id, similarity=jaccard, method=methods[0],
                    hamming_distance=int(hamming), containment=containment, matched_id=matched_id, methods=methods,
                    candidates=candidates, direction=_DIRECTIONS[int(direction)])


def exact_copy(article_id: str, hamming: int, matched_id: str, root_id: str) -> Decision:
    """A duplicate of ``matched_id`` by its exact hash (the same folded text), in ``root_id``'s cluster."""
    return Decision(id=article_id, type="duplicate-of", duplicate_of=root_id, similarity=1.0, method="exact",
                    hamming_distance=hamming, containment=1.0, matched_id=matched_id, methods=("exact",), candidates=1)


def look_alike(article_id: str, jaccard: float, candidates: int, template_id: str, agreed: float) -> Decision:
    """New, but a look-alike of ``template_id`` (the compiled rules' template: its Jaccard, the
    identity agreement), both rounded to 4 decimals as reported."""
    return Decision(id=article_id, type="new", similarity=round(jaccard, 4), candidates=candidates,
                    template_of=template_id, identity_overlap=round(agreed, 4))


# the event of a new article between its id and its candidates (Decision.event_json)
_NEW_EVENT = (', "type": "new", "duplicate_of": null, "similarity": null, "method": null, "hamming_distance": null, '
              '"containment": null, "matched_id": null, "methods": [], "candidates": ')


#: the JSON of each list of methods the compiled rules report (Decision._duplicate_json)
_METHODS_JSON = {methods: json.dumps(list(methods)) for methods in {*_METHODS_OF_HITS, ("exact",)}}


class _OtherType(Exception):
    """A value :meth:`Decision.event_json` leaves to ``json.dumps``."""


def _json_bool(v: Any) -> str:
    if v is True:
        return "true"
    if v is False:
        return "false"
    raise _OtherType


def _json_str(v: Any) -> str:
    if type(v) is not str:
        raise _OtherType
    return encode_basestring(v)  # json.dumps' own escaping with ensure_ascii=False


def _json_opt_str(v: Any) -> str:
    return "null" if v is None else _json_str(v)


def _json_int(v: Any) -> str:
    if type(v) is not int:
        raise _OtherType
    return int.__repr__(v)


def _json_opt_int(v: Any) -> str:
    return "null" if v is None else _json_int(v)


def _json_opt_float(v: Any) -> str:
    if v is None:
        return "null"
    if type(v) is not float or not isfinite(v):  # (json writes NaN and Infinity its own way)
        raise _OtherType
    return float.__repr__(v)


def _json_methods(v: Any) -> str:
    if type(v) is not tuple and type(v) is not list:
        raise _OtherType
    return "[" + ", ".join([_json_str(m) for m in v]) + "]"


_STORED_FIELDS = ("type", "duplicate_of", "similarity", "method", "hamming_distance", "containment", "matched_id",
                  "methods", "candidates", "direction", "template_of", "identity_overlap")
