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

A feed's own section tags (``SPORTS:``, ``MARKETS -``) are added to the flag words with
``--headline-flag-words`` (``extra`` here): they are then stripped by the same rule.
"""

from __future__ import annotations

import functools
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


_WORD = re.compile(r"\w+")
_FLAG_WORD = re.compile(r"\w{1,20}")
MAX_EXTRA_WORDS = 200


def flag_words(setting: str) -> tuple[str, ...]:
    """The extra flag words of a ``--headline-flag-words`` value (comma-separated), lower-cased."""
    return tuple(dict.fromkeys(w.strip().lower() for w in setting.split(",") if w.strip()))


def flag_word_errors(setting: str) -> list[str]:
    """What is wrong with a ``--headline-flag-words`` value (nothing: an empty list)."""
    words = flag_words(setting)
    bad = [w for w in words if not _FLAG_WORD.fullmatch(w)]
    errors = [f"headline_flag_words: {w!r} is not a word (letters, digits or _, at most 20)" for w in bad[:3]]
    if len(words) > MAX_EXTRA_WORDS:
        errors.append(f"headline_flag_words: {len(words)} words, at most {MAX_EXTRA_WORDS}")
    return errors


@functools.lru_cache(maxsize=8)
def _patterns(extra: tuple[str, ...]) -> tuple[re.Pattern, re.Pattern, int]:
    """(the flag run, its first word, the longest a run can be) for the built-in flag words and ``extra``."""
    words = "|".join(dict.fromkeys((*FLAG_WORDS, *(re.escape(w) for w in extra))))
    flag = re.compile(rf"\s*(?:(?i:{_run(words)})\s*(?::|\||\s[-\u2013\u2014])"   # any case, then : | or a spaced dash
                      rf"|{_run(words.upper())}-(?=\S))\s*")                      # capitals, then a bare dash
    longest = max((len(w) for w in extra), default=0)
    return flag, re.compile(rf"\s*(?i:{words})\b"), max(MAX_FLAG_CHARS, 3 * (longest + 4))


def strip_flag(text: str, short_words: int, extra: tuple[str, ...] = ()) -> str:
    """``text`` without its leading headline flag, by the rule of the module docstring (else as it is);
    ``extra``: more flag words (:func:`flag_words`)."""
    flag, first, longest = _patterns(extra)
    if short_words <= MIN_REST_WORDS or first.match(text) is None:
        return text
    m = flag.match(text, 0, longest + len(text) - len(text.lstrip()) + 2)
    if m is None:
        return text
    rest = text[m.end():]
    if not MIN_REST_WORDS <= sum(1 for _ in islice(_WORD.finditer(rest), short_words)) < short_words:
        return text
    return rest
