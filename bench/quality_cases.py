"""Streams of the error classes the dev stream barely holds, built from the shared articles.

Each ``make_<class>(articles, n, seed)`` returns ``(records, truth)`` in the format of the shared
stream (``truth`` lines: ``id``, ``cluster``, ``kind``), so ``bench/quality.py``'s ``score`` applies
as it is: an original article is its own cluster; a *positive* variant shares its cluster (a
detector must call it a duplicate of an earlier member); a *negative* (kind ending in ``-other``)
is a record of a cluster of its own, made to look like an earlier record (a detector must call it
new). Every class holds both, so precision and recall can both fail.

Classes (see the README, "Detection quality beyond the dev stream"):

``folding``   copies whose words carry added diacritics, Cyrillic/Greek look-alike letters,
              full-width forms, zero-width characters and soft hyphens, plus byline and footer;
              negatives: other articles disguised the same way.
``short``     headline-only items (< 10 words): the headline again with other case/punctuation/
              diacritics or one word of prefix (positives); the headline with one word replaced
              (a different item, negatives).
``page``      the article inside a page 1-3x its length of site text (navigation, cookie banner,
              related stories, ads, author bio, comments); negatives: a page of the same site around
              another, unseen article.
``excerpt``   short excerpts of long stories (400+ words), after the story: a middle passage of 20-40 %
              of it, or its lead (the first sentences, 15-25 %: the corpus has no paragraph breaks, and a
              news paragraph is one to three sentences), cut at sentence ends, with a credit line; and
              the story after an excerpt of it (``after-excerpt``); negatives: excerpts of unseen
              articles of the same source, the closest in vocabulary to a story of the stream, leaving
              out excerpts that are themselves half inside a stream article (the corpus holds 13
              stories twice, and DW repeats background paragraphs across stories).
``template``  look-alike reports: the article with its identity tokens replaced by others, either
              every number and capitalised name or only the numbers (the same subject's next
              report) (negatives), and same-story corrections with one figure changed (positives).

Everything is deterministic in ``seed``.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
CLASSES = ("folding", "short", "page", "excerpt", "template", "rewrite")


def load_articles(data: Path = DEFAULT_DATA) -> list[dict]:
    return [json.loads(line) for line in (data / "news_articles.jsonl").open()]


def _long(articles: list[dict], min_words: int = 150) -> list[dict]:
    return [a for a in articles if len(a["text"].split()) >= min_words]


def _rec(rid: str, text: str) -> dict:
    return {"id": rid, "text": text}


def _stream(items: list[tuple[dict, dict]], rng: random.Random) -> tuple[list[dict], list[dict]]:
    """Originals keep their order; each variant comes after its cluster's first record."""
    return [r for r, _ in items], [t for _, t in items]


# -- folding ---------------------------------------------------------------------------------
_ACCENT = {"a": "àáâä", "e": "éèêë", "i": "íìîï", "o": "óòôö", "u": "úùûü", "c": "ç", "n": "ñ"}
_CYRILLIC = {"a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "x": "х", "y": "у", "i": "і",
             "A": "А", "E": "Е", "O": "О", "P": "Р", "C": "С", "T": "Т", "H": "Н", "M": "М", "K": "К", "B": "В"}
_GREEK = {"o": "ο", "A": "Α", "B": "Β", "E": "Ε", "H": "Η", "I": "Ι", "K": "Κ", "M": "Μ", "N": "Ν", "O": "Ο",
          "T": "Τ", "X": "Χ"}
_INVISIBLE = ("\u200b", "\u00ad", "\u200c", "\u2060", "\ufeff")


def _disguise_word(rng: random.Random, w: str) -> str:
    r = rng.random()
    if r < 0.3:
        spots = [i for i, ch in enumerate(w) if ch in _ACCENT]
        if spots:
            i = rng.choice(spots)
            return w[:i] + rng.choice(_ACCENT[w[i]]) + w[i + 1:]
    elif r < 0.6:
        table = _CYRILLIC if r < 0.5 else _GREEK
        return "".join(table.get(ch, ch) if rng.random() < 0.5 else ch for ch in w)
    elif r < 0.75:
        return "".join(chr(ord(ch) + 0xFEE0) if "!" <= ch <= "~" else ch for ch in w)
    elif len(w) > 3:
        i = rng.randrange(1, len(w) - 1)
        return w[:i] + rng.choice(_INVISIBLE) + w[i:]
    return w


def disguise(rng: random.Random, text: str, rate: float) -> str:
    return " ".join(_disguise_word(rng, w) if rng.random() < rate else w for w in text.split(" "))


def _republish(rng: random.Random, text: str) -> str:
    return (f"By {rng.choice(['Maria Lopez', 'John Carter', 'Aiko Tanaka'])}, Associated Press\n\n{text}\n\n"
            "Subscribe to our newsletter for the latest headlines delivered to your inbox every morning.")


def make_folding(articles: list[dict], n: int = 150, seed: int = 1) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    picked = rng.sample(_long(articles), 2 * n)
    items = []
    for i, a in enumerate(picked[:n]):
        items.append((_rec(a["id"], a["text"]), {"id": a["id"], "cluster": a["id"], "kind": "original"}))
        rate = rng.uniform(0.1, 0.4)
        text = disguise(rng, a["text"], rate)
        if i % 2:
            text = _republish(rng, text)
        vid = f"{a['id']}-fold"
        items.append((_rec(vid, text), {"id": vid, "cluster": a["id"], "kind": "folding"}))
    for a in picked[n:]:  # unseen articles, disguised alike: new
        vid = f"{a['id']}-fold-other"
        items.append((_rec(vid, disguise(rng, a["text"], 0.3)), {"id": vid, "cluster": vid, "kind": "folding-other"}))
    return _stream(items, rng)


# -- short texts -----------------------------------------------------------------------------
_PREFIXES = ("BREAKING:", "WATCH:", "Update:", "LIVE:", "UPDATE 2-", "EXCLUSIVE:", "Opinion |", "BREAKING NEWS -")


def _flagged(rng: random.Random, title: str) -> str:
    prefix = rng.choice(_PREFIXES)
    return prefix + title if prefix.endswith("-") else f"{prefix} {title}"  # an agency tag: UPDATE 2-Oil ...


def _title_words(a: dict) -> list[str]:
    return a["title"].split()


def make_short(articles: list[dict], n: int = 200, seed: int = 1) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    pool = [a for a in articles if 5 <= len(_title_words(a)) <= 8]
    picked = rng.sample(pool, n)
    vocab = sorted({w for a in pool for w in _title_words(a) if len(w) > 3 and w.isalpha()})
    items = []
    for a in picked:
        title = a["title"].strip()
        items.append((_rec(a["id"], title), {"id": a["id"], "cluster": a["id"], "kind": "original"}))
        kind = rng.choice(("case", "punct", "prefix"))
        if kind == "case":
            variant = title.upper() if rng.random() < 0.5 else title.lower()
        elif kind == "punct":
            variant = disguise(rng, title.replace("'", "\u2019"), 0.3) + rng.choice((".", " -", "!"))
        else:
            variant = _flagged(rng, title)
        vid = f"{a['id']}-h"
        items.append((_rec(vid, variant), {"id": vid, "cluster": a["id"], "kind": f"short-{kind}"}))
        words = _title_words(a)
        i = rng.choice([0, len(words) - 1, rng.randrange(len(words))])  # first, last or any word replaced
        other = " ".join(words[:i] + [rng.choice(vocab)] + words[i + 1:])
        if kind == "prefix" and rng.random() < 0.5:  # a flagged headline with one word replaced: still new
            other = _flagged(rng, other)
        oid = f"{a['id']}-h-other"
        items.append((_rec(oid, other), {"id": oid, "cluster": oid, "kind": "short-other"}))
    return _stream(items, rng)


# -- the original inside a longer page -------------------------------------------------------
_SITES = ("metronews", "valleytimes", "citypost", "eveningstar")
_COOKIE = ("We use cookies and similar technologies to improve your experience, personalise content and ads, "
           "provide social media features and analyse our traffic. By clicking Accept all you agree to this. "
           "You can change your choices at any time in Privacy settings. Accept all. Reject all. Manage options.")
_ADS = ("Advertisement. Sponsored: This simple trick cuts your energy bill in half, experts say. Shop the deals "
        "of the week now. Advertisement. Get unlimited digital access for just 1 dollar a week. Cancel anytime.")


def _site_text(site: str) -> tuple[str, str]:
    nav = (f"{site.title()} Home World US Politics Business Tech Science Health Sports Entertainment "
           f"Opinion Video Podcasts Newsletters Sign in Subscribe Search {site} Edition")
    bio = (f"The author is a senior correspondent for {site.title()} covering politics and world affairs. "
           f"Follow on social media and send tips to newsroom@{site}.example. Previously worked at several "
           "regional dailies and won awards for investigative reporting.")
    return nav, bio


def _comments(rng: random.Random, k: int) -> str:
    lines = ["This is exactly what I expected to happen.", "Does anyone have a source for this claim?",
             "Great reporting, thank you for covering this.", "I disagree with most of what is said here.",
             "Who pays for all of this in the end?", "Finally some good news for once.",
             "The comment section never disappoints.", "Read the whole thing before commenting, people."]
    return "Comments. " + " ".join(f"user{rng.randrange(10000)} wrote: {rng.choice(lines)}" for _ in range(k))


def page(rng: random.Random, a: dict, articles: list[dict], ratio: float, site: str) -> str:
    """``a``'s text inside site text of about ``ratio`` x its length."""
    nav, bio = _site_text(site)
    target = ratio * len(a["text"].split())
    blocks = [nav, _COOKIE, _ADS, bio]
    related = []
    while sum(len(b.split()) for b in blocks + related) < target:
        if rng.random() < 0.6:
            o = rng.choice(articles)
            related.append(f"Related: {o['title']}. {' '.join(o['text'].split()[:25])}...")
        else:
            related.append(_comments(rng, 3))
    head = [nav, _COOKIE]
    tail = [bio, _ADS] + related
    rng.shuffle(tail)
    cut = rng.randrange(len(tail) + 1)
    return "\n\n".join(head + tail[:cut // 2] + [a["title"], a["text"]] + tail[cut // 2:])


def make_page(articles: list[dict], n: int = 150, seed: int = 1) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    long = _long(articles)
    picked = rng.sample(long, 2 * n)
    items = []
    for a in picked[:n]:
        items.append((_rec(a["id"], a["text"]), {"id": a["id"], "cluster": a["id"], "kind": "original"}))
    for a in picked[:n]:
        ratio = rng.uniform(1.0, 3.0)
        vid = f"{a['id']}-page"
        kind = "page-1x" if ratio < 2 else "page-2x"
        items.append((_rec(vid, page(rng, a, long, ratio, rng.choice(_SITES))),
                      {"id": vid, "cluster": a["id"], "kind": kind}))
    for a in picked[n:]:  # the same sites around unseen articles: new
        vid = f"{a['id']}-page-other"
        items.append((_rec(vid, page(rng, a, long, rng.uniform(1.0, 3.0), rng.choice(_SITES))),
                      {"id": vid, "cluster": vid, "kind": "page-other"}))
    return _stream(items, rng)


# -- short excerpts of long stories ----------------------------------------------------------
_SENTENCE_END = re.compile(r"(?<=[.!?\"])\s+(?=[A-Z\"])")


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(text) if s]


def excerpt(rng: random.Random, text: str, lead: bool) -> str:
    """The lead (first sentences, 15-25 % of the words) or a middle passage of 20-40 % of them,
    whole sentences, with a credit line."""
    sents = _sentences(text)
    sizes = [len(s.split()) for s in sents]
    total = sum(sizes)
    share = rng.uniform(0.15, 0.25) if lead else rng.uniform(0.2, 0.4)
    start = 0 if lead else rng.randrange(max(1, len(sents) // 5), max(2, len(sents) // 2))
    end, words = start, 0
    while end < len(sents) and words < share * total:
        words += sizes[end]
        end += 1
    source = rng.choice(["Reuters", "the Associated Press", "our partners"])
    return " ".join(sents[start:end]) + f"\n\nExcerpt. Read the full story at {source}."


def _shingles(text: str, k: int = 4) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i:i + k]) for i in range(len(words) - k + 1)}


def _vocabulary(a: dict) -> set[str]:
    return {w for w in re.findall(r"[a-z]{4,}", a["text"].lower())}


def make_excerpt(articles: list[dict], n: int = 150, seed: int = 1) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    long = _long(articles, 400)
    picked = rng.sample(long, n + n // 3)
    originals, before = picked[:n], picked[n:]
    taken = {a["id"] for a in picked}
    items = []
    for a in originals:
        items.append((_rec(a["id"], a["text"]), {"id": a["id"], "cluster": a["id"], "kind": "original"}))
    for a in before:  # an excerpt first, the whole story later
        vid = f"{a['id']}-lead-first"
        items.append((_rec(vid, excerpt(rng, a["text"], rng.random() < 0.5)),
                      {"id": vid, "cluster": a["id"], "kind": "excerpt-first"}))
    for i, a in enumerate(originals):
        lead = i % 3 == 0
        vid = f"{a['id']}-excerpt"
        items.append((_rec(vid, excerpt(rng, a["text"], lead)),
                      {"id": vid, "cluster": a["id"], "kind": "excerpt-lead" if lead else "excerpt-middle"}))
    for a in before:
        items.append((_rec(a["id"], a["text"]), {"id": a["id"], "cluster": a["id"], "kind": "after-excerpt"}))
    # negatives: excerpts of unseen articles of the same source, the closest in vocabulary to a stored story
    vocab = {a["id"]: _vocabulary(a) for a in long}
    stream = set().union(*(_shingles(a["text"]) for a in picked))
    for i, a in enumerate(originals):
        pool = [o for o in long if o["source"] == a["source"] and o["id"] not in taken] or \
            [o for o in long if o["id"] not in taken]
        va = vocab[a["id"]]
        for other in sorted(pool, key=lambda o: (-len(va & vocab[o["id"]]) / (len(va | vocab[o["id"]]) or 1),
                                                 o["id"])):
            text = excerpt(rng, other["text"], i % 3 == 0)
            own = _shingles(text)
            if len(own & stream) < 0.5 * len(own):  # not a passage of a stream article itself
                break
        taken.add(other["id"])
        vid = f"{other['id']}-excerpt-other"
        items.append((_rec(vid, text), {"id": vid, "cluster": vid, "kind": "excerpt-other"}))
    return _stream(items, rng)


# -- look-alike templates --------------------------------------------------------------------
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_NAME = re.compile(r"(?<=[a-z,;] )[A-Z][a-z]+")  # a capitalised word inside a sentence


def _new_number(rng: random.Random, m: re.Match) -> str:
    s = m.group(0)
    while True:
        out = "".join(str(rng.randrange(10)) if ch.isdigit() else ch for ch in s)
        if out != s:
            return out


def relabel(rng: random.Random, text: str, names: list[str] | None) -> str:
    """Every number, and every capitalised name inside a sentence unless ``names`` is None, replaced:
    another report from the same template (with ``names=None``: the same subject, other figures)."""
    text = _NUMBER.sub(lambda m: _new_number(rng, m), text)
    if names is None:
        return text
    mapping: dict[str, str] = {}
    return _NAME.sub(lambda m: mapping.setdefault(m.group(0), rng.choice(names)), text)


def correct(rng: random.Random, text: str) -> str:
    """A same-story correction: one figure changed."""
    nums = list(_NUMBER.finditer(text))
    m = rng.choice(nums)
    return text[:m.start()] + _new_number(rng, m) + text[m.end():]


def make_template(articles: list[dict], n: int = 150, seed: int = 1) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    pool = [a for a in _long(articles, 120) if len(_NUMBER.findall(a["text"])) >= 4
            and len(_NAME.findall(a["text"])) >= 6]
    picked = rng.sample(pool, n)
    names = sorted({w for a in pool for w in _NAME.findall(a["text"])})
    items = []
    for k, a in enumerate(picked):
        items.append((_rec(a["id"], a["text"]), {"id": a["id"], "cluster": a["id"], "kind": "original"}))
        oid = f"{a['id']}-tpl-other"
        kind, label_names = ("names+figures-other", names) if k % 2 == 0 else ("figures-other", None)
        items.append((_rec(oid, relabel(rng, a["text"], label_names)), {"id": oid, "cluster": oid, "kind": kind}))
        vid = f"{a['id']}-fix"
        items.append((_rec(vid, correct(rng, a["text"])), {"id": vid, "cluster": a["id"], "kind": "correction"}))
    return _stream(items, rng)


# -- same story, loosely rewritten -----------------------------------------------------------
_SYNONYMS = (("said", "stated"), ("says", "states"), ("told", "informed"), ("people", "individuals"),
             ("government", "administration"), ("president", "leader"), ("police", "officers"),
             ("killed", "left dead"), ("attack", "assault"), ("announced", "unveiled"), ("however", "but"),
             ("also", "additionally"), ("about", "around"), ("more than", "over"), ("because", "as"),
             ("expected", "set"), ("major", "key"), ("country", "nation"), ("help", "assist"),
             ("began", "started"), ("big", "large"), ("new", "fresh"), ("show", "indicate"),
             ("according to", "citing"), ("week", "seven days"), ("officials", "authorities"),
             ("will", "is set to"), ("would", "could"), ("after", "following"), ("before", "ahead of"))
_CONTRACTIONS = (("do not", "don't"), ("does not", "doesn't"), ("did not", "didn't"), ("is not", "isn't"),
                 ("it is", "it's"), ("was not", "wasn't"), ("have not", "haven't"), ("will not", "won't"),
                 ("we are", "we're"), ("they are", "they're"), ("cannot", "can't"))
_FILLERS = ("also", "now", "reportedly", "on Monday", "earlier", "meanwhile", "still", "again", "already")
_ATTRIBUTION = re.compile(r"^(.*\S),? (he|she|they|[A-Z][a-z]+(?: [A-Z][a-z]+)?) said\.$")
_ATTRIBUTION_INV = re.compile(r"^(.*\S),? said (he|she|they|[A-Z][a-z]+(?: [A-Z][a-z]+)?)\.$")
_SWAPS = [(re.compile(rf"\b{re.escape(a)}\b"), b) for a, b in _SYNONYMS + _CONTRACTIONS] + \
         [(re.compile(rf"\b{re.escape(b)}\b"), a) for a, b in _CONTRACTIONS] + \
         [(re.compile(r"\b(\d+) percent\b"), r"\1%"), (re.compile(r"\b(\d+)%"), r"\1 per cent"),
          (re.compile(r"\b(\d{1,3}),(\d{3})\b"), r"\1\2"), (re.compile(r"\b(\d+) million\b"), r"\1m")]


def _reword(rng: random.Random, sent: str, rate: float) -> str:
    """One sentence lightly re-edited: synonyms, contractions, number formats, attribution moved,
    clauses swapped, words dropped or inserted, each with a chance growing with ``rate``."""
    m = _ATTRIBUTION.match(sent) or _ATTRIBUTION_INV.match(sent)
    if m and rng.random() < rate * 2:
        said = f"{m.group(2)} said" if _ATTRIBUTION_INV.match(sent) else f"said {m.group(2)}"
        sent = f"{m.group(1)}, {said}."
    for pattern, repl in _SWAPS:
        if rng.random() < rate * 1.5:
            sent = pattern.sub(repl, sent, count=1)
    if ", " in sent and rng.random() < rate:
        head, tail = sent.rstrip(".").split(", ", 1)
        if len(head.split()) > 3 and len(tail.split()) > 3:
            sent = f"{tail[0].upper()}{tail[1:]}, {head[0].lower()}{head[1:]}."
    words = sent.split(" ")
    out = []
    for w in words:
        r = rng.random()
        if r < rate * 0.12 and len(words) > 8:
            continue                                           # a word dropped
        out.append(w)
        if r > 1 - rate * 0.1:
            out.append(rng.choice(_FILLERS))                   # a word inserted
    return " ".join(out)


def rewrite(rng: random.Random, text: str, rate: float) -> str:
    """``text`` loosely rewritten at ``rate`` (0-1): sentences re-edited, some neighbours swapped
    (the lead stays first)."""
    sents = [_reword(rng, s, rate) for s in _sentences(text)]
    for i in range(1, len(sents) - 1):
        if rng.random() < rate * 0.5:
            sents[i], sents[i + 1] = sents[i + 1], sents[i]
    return " ".join(sents)


def _jaccard5(a: str, b: str) -> float:
    x, y = _shingles(a, 5), _shingles(b, 5)
    return len(x & y) / (len(x | y) or 1)


def rewritten(rng: random.Random, text: str, low: float = 0.3, high: float = 0.5) -> tuple[str, float]:
    """A rewrite of ``text`` whose exact word 5-gram Jaccard with it falls in [low, high] (the rate
    is searched; the closest try is kept when none does), and that Jaccard."""
    target = rng.uniform(low, high)
    lo, hi = 0.0, 1.0
    best = (text, 1.0)
    for _ in range(8):
        rate = (lo + hi) / 2
        out = rewrite(random.Random(rng.random()), text, rate)
        j = _jaccard5(text, out)
        if abs(j - target) < abs(best[1] - target):
            best = (out, j)
        if low <= j <= high and abs(j - target) < 0.03:
            break
        lo, hi = (rate, hi) if j > target else (lo, rate)
    return best


_OVERLAPS: dict[tuple[str, ...], tuple[dict[str, dict[str, int]], dict[str, int]]] = {}


def _overlaps(articles: list[dict], common: int = 50) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Word 4-shingles shared by each pair of ``articles`` that shares any (shingles held by
    ``common`` articles or more left out), by an inverted index, and each one's shingle count;
    kept for the process."""
    key = tuple(a["id"] for a in articles)
    if key not in _OVERLAPS:
        postings: dict[tuple[str, ...], list[str]] = {}
        sizes = {}
        for a in articles:
            own = _shingles(a["text"])
            sizes[a["id"]] = len(own)
            for sh in own:
                postings.setdefault(sh, []).append(a["id"])
        pairs: dict[str, dict[str, int]] = {}
        for ids in postings.values():
            if 1 < len(ids) < common:
                for x in ids:
                    row = pairs.setdefault(x, {})
                    for y in ids:
                        if y != x:
                            row[y] = row.get(y, 0) + 1
        _OVERLAPS[key] = pairs, sizes
    return _OVERLAPS[key]


def make_rewrite(articles: list[dict], n: int = 150, seed: int = 1) -> tuple[list[dict], list[dict]]:
    """Positives: the story loosely rewritten (exact word 5-gram Jaccard 0.3-0.5 with it). Negatives:
    the unseen article of the same source nearest to it by word 4-gram Jaccard (below 0.5: the corpus
    holds some stories twice), as it is or itself rewritten (a different story on the same subject,
    told in the same words). Half the originals are drawn from the articles that have such a
    neighbour at Jaccard 0.1 or more (mostly an agency's follow-up stories repeating background)."""
    rng = random.Random(seed)
    long = [a for a in _long(articles) if len(a["text"].split()) <= 1500]
    overlap, size = _overlaps(long)
    by_id = {a["id"]: a for a in long}

    def nearest(a: dict, taken: set[str]) -> tuple[float, dict | None]:
        pool = [(k / (size[a["id"]] + size[o] - k), o) for o, k in overlap.get(a["id"], {}).items()
                if by_id[o]["source"] == a["source"] and o not in taken and by_id[o]["title"] not in taken]
        pool = [p for p in pool if p[0] < 0.5]
        if not pool:  # no shared shingle: any unseen article of the source
            rest = sorted(o["id"] for o in long if o["source"] == a["source"] and o["id"] not in taken
                          and o["title"] not in taken)
            return (0.0, by_id[rest[0]]) if rest else (0.0, None)
        j, o = max(pool)
        return j, by_id[o]

    order = rng.sample(long, len(long))
    picked = []
    for a in order:  # the first n // 2 with a close neighbour
        if len(picked) == n // 2:
            break
        if nearest(a, {a["id"], a["title"]})[0] >= 0.1:
            picked.append(a)
    ids = {a["id"] for a in picked}
    picked += [a for a in order if a["id"] not in ids][: n - len(picked)]
    taken = {a["id"] for a in picked} | {a["title"] for a in picked}
    items = []
    for a in picked:
        items.append((_rec(a["id"], a["text"]), {"id": a["id"], "cluster": a["id"], "kind": "original"}))
    for i, a in enumerate(picked):
        vid = f"{a['id']}-rewrite"
        items.append((_rec(vid, rewritten(rng, a["text"])[0]), {"id": vid, "cluster": a["id"], "kind": "rewrite"}))
        _, other = nearest(a, taken)
        if other is None:
            continue
        taken |= {other["id"], other["title"]}
        oid = f"{other['id']}-rewrite-other"
        text = rewritten(rng, other["text"])[0] if i % 2 else other["text"]
        items.append((_rec(oid, text), {"id": oid, "cluster": oid, "kind": "rewrite-other"}))
    return _stream(items, rng)

MAKERS = {"folding": make_folding, "short": make_short, "page": make_page, "excerpt": make_excerpt,
          "template": make_template, "rewrite": make_rewrite}


def make(name: str, articles: list[dict], n: int | None = None, seed: int = 1) -> tuple[list[dict], list[dict]]:
    maker = MAKERS[name]
    return maker(articles, seed=seed) if n is None else maker(articles, n, seed)


if __name__ == "__main__":  # the rewrite class's exact word 5-gram Jaccard with the original, as percentiles
    import statistics
    recs, truth = make_rewrite(load_articles())
    text = {r["id"]: r["text"] for r in recs}
    js = sorted(_jaccard5(text[t["cluster"]], text[t["id"]]) for t in truth if t["kind"] == "rewrite")
    print("rewrite: word 5-gram Jaccard, min / 10 / 25 / 50 / 75 / 90 % / max:",
          " / ".join(f"{js[int(q * (len(js) - 1))]:.3f}" for q in (0, .1, .25, .5, .75, .9, 1)),
          f"(mean {statistics.mean(js):.3f})")
