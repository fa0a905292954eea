"""Headline flags: ``BREAKING:``, ``WATCH:``, ``UPDATE 2-``, ``Opinion |`` before a short text.

Feeds re-send a headline with a flag in front. On a headline of fewer than 7 words, one added word
moves the word 4-shingle Jaccard below ``short_text_jaccard`` (0.8), so such a copy was missed.
:func:`strip_flag` removes the flag before the text is fingerprinted, when **all** of these hold:

* the text starts with a run of 1-3 words that are flag words (:data:`FLAG_WORDS`, any case) or
  numbers of 1-2 digits, the first a flag word (``BREAKING NEWS``, ``UPDATE 2``, ``JUST IN``);
* the run is followed by ``:``, ``|``, a dash between spaces (`` - ``, `` – ``, `` — ``), or, for an
  agency tag written in capitals (``UPDATE 2-``, ``REFILE-``, ``EXCLUSIVE-``), a ``-`` right after it;
* what remains has at least :data:`MIN_REST_WORDS` (3) words and fewer than ``short_text_words``.

Only flag words are stripped, never any leading word before a colon: ``Syria: rebels take the city``
and ``Iraq: rebels take the city`` are different items and stay different. A longer text keeps its
first words (an article that starts with ``Update:`` is compared as it is).
"""

from __future__ import annotations

import re
from itertools import islice

FLAG_WORDS = ("breaking", "news", "watch", "update", "updated", "updates", "exclusive", "live", "opinion",
              "video", "videos", "photos", "pictures", "analysis", "just", "in", "developing", "refile",
              "corrected", "correction", "factbox", "explainer", "editorial", "commentary", "podcast",
              "listen", "review", "interview", "urgent", "flash", "alert", "report", "poll")
MIN_REST_WORDS = 3
MAX_FLAG_CHARS = 48  # a flag run is at most 3 short words: a text that cannot start with one is not read

def _run(words: str) -> str:
    """1-3 flag words or 1-2 digit numbers, the first a flag word."""
    return rf"(?:{words})(?:[ \t]+(?:{words}|\d{{1,2}})){{0,2}}"


_WORDS = "|".join(FLAG_WORDS)
_FLAG = re.compile(rf"\s*(?:(?i:{_run(_WORDS)})\s*(?::|\||\s[-\u2013\u2014])"   # any case, then : | or a spaced dash
                   rf"|{_run(_WORDS.upper())}-(?=\S))\s*")                       # capitals, then a bare dash
_FIRST = re.compile(rf"\s*(?i:{_WORDS})\b")
_WORD = re.compile(r"\w+")


def strip_flag(text: str, short_words: int) -> str:
    """``text`` without its leading headline flag, by the rule of the module docstring (else as it is)."""
    if short_words <= MIN_REST_WORDS or _FIRST.match(text) is None:
        return text
    m = _FLAG.match(text, 0, MAX_FLAG_CHARS + len(text) - len(text.lstrip()) + 2)
    if m is None:
        return text
    rest = text[m.end():]
    if not MIN_REST_WORDS <= sum(1 for _ in islice(_WORD.finditer(rest), short_words)) < short_words:
        return text
    return rest
