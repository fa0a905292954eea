"""What a ``dedup`` run counts and how it is shown at the end: :class:`Summary` (the table printed on
stderr, ``--summary-json``) and :func:`write_report` (``--report``, a picture of the run)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import RunError

if TYPE_CHECKING:
    from ..batch_decisions import EventBatch

#: titles kept for the cluster table and similarities kept for the report (memory bound on huge inputs)
MAX_TITLES = 200_000
MAX_SIMILARITIES = 1_000_000


@dataclass
class Summary:
    """What a run counted: printed at its end (:meth:`text`), written by ``--summary-json`` (:meth:`as_dict`)."""

    lines: int = 0
    blank: int = 0
    new: int = 0
    duplicates: int = 0
    repeated_ids: int = 0
    rejects: Counter = field(default_factory=Counter)
    by_method: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    skipped: int = 0                  # lines before the resume point (--resume)
    last_line: int = 0                # the last input line finished
    interrupted: str | None = None    # the signal that stopped the run
    kernel_seconds: float = 0.0       # loading (first time: compiling) the kernels, before the clock starts
    clusters: Counter = field(default_factory=Counter)    # root id -> duplicates of it in this run
    titles: dict = field(default_factory=dict)            # root id -> title (bounded)
    similarities: list = field(default_factory=list)      # Jaccard of each duplicate (bounded)

    @property
    def records(self) -> int:
        return self.new + self.duplicates

    @property
    def handled(self) -> int:
        return self.records + sum(self.rejects.values())

    def as_dict(self) -> dict:
        return {"lines": self.lines, "records": self.records, "new": self.new, "duplicates": self.duplicates,
                "repeated_ids": self.repeated_ids, "rejects": sum(self.rejects.values()),
                "rejects_by_reason": dict(self.rejects), "duplicates_by_method": dict(self.by_method),
                "blank_lines": self.blank, "seconds": round(self.seconds, 3),
                "records_per_second": round(self.lines / self.seconds, 1) if self.seconds else None,
                "skipped_lines": self.skipped, "last_line": self.last_line,
                "interrupted": self.interrupted is not None,
                "top_clusters": [{"id": k, "duplicates": n, "title": self.titles.get(k)}
                                 for k, n in self.top_clusters(10)]}

    def top_clusters(self, n: int) -> list[tuple[str, int]]:
        return sorted(self.clusters.items(), key=lambda kv: (-kv[1], kv[0]))[:n]

    def text(self, top: int = 5) -> str:
        """The summary printed at the end of a run: a small table, then the largest clusters."""
        d = self.as_dict()
        reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(self.rejects.items()))
        methods = ", ".join(f"{k} {v:,}" for k, v in sorted(self.by_method.items(), key=lambda kv: -kv[1]))
        rate = f"{d['records_per_second'] or 0:,.0f} records/s"
        rows = [("lines", f"{d['lines']:,}" + (f" (after {self.skipped:,} done before: resumed)" if self.skipped else "")),
                ("new", f"{d['new']:,}"),
                ("duplicates", f"{d['duplicates']:,}" + (f" ({methods})" if methods else "")),
                ("repeated ids", f"{d['repeated_ids']:,} (ids seen before: their first decision again)"),
                ("rejects", f"{d['rejects']:,}" + (f" ({reasons})" if reasons else "")),
                ("blank lines", f"{d['blank_lines']:,}"),
                ("time", f"{d['seconds']:.1f} s, {rate}" + (f" (after {self.kernel_seconds:.1f} s loading the "
                                                                  f"compiled kernels)" if self.kernel_seconds >= 0.05
                                                                 else ""))]
        width = max(len(k) for k, _ in rows)
        out = [f"  {k:<{width}}  {v}" for k, v in rows]
        clusters = self.top_clusters(top)
        if clusters:
            out.append("  largest clusters (duplicates in this run, first article, title):")
            for root, n in clusters:
                title = self.titles.get(root) or ""
                title = title if len(title) <= 60 else title[:59] + "…"
                out.append(f"  {n:>6,}  {root}  {title}")
        return "\n".join(out)


    def count(self, article: object, decision: object) -> None:
        """Count the decision on ``article`` (a batch of one: :meth:`count_events`)."""
        from ..batch_decisions import EventBatch

        self.count_events(EventBatch(items=[decision]), [article])

    def count_events(self, batch: EventBatch, articles: list) -> None:
        """Count a batch's decisions at once: ``batch``'s items (events written compiled, counted by
        what the batch says of them, and decisions) on ``articles``, in order."""
        decided = [(i, d) for i, d in enumerate(batch.items) if type(d) is not str]
        new = batch.new
        similarities = batch.similarities
        if decided:  # (counted as count() does, the titles and similarities below)
            new = new.copy()
            similarities = []
            for i, d in decided:
                if d.seen_before:
                    self.repeated_ids += 1
                if d.is_duplicate:
                    self.duplicates += 1
                    self.by_method[d.method] += 1
                    self.clusters[d.duplicate_of] += 1
                    if d.similarity is not None:
                        similarities.append((i, d.similarity))
                else:
                    new.append(i)
            new.sort()
            if similarities or len(self.similarities) + len(batch.similarities) > MAX_SIMILARITIES:
                # (in the batch's order: the first MAX_SIMILARITIES are kept)
                written_new = set(batch.new)
                at = [i for i, item in enumerate(batch.items) if type(item) is str and i not in written_new]
                similarities = [v for _, v in sorted([*zip(at, batch.similarities, strict=True), *similarities])]
            else:
                similarities = batch.similarities
        self.new += len(new)
        self.duplicates += len(batch.methods)
        self.by_method.update(batch.methods)
        self.clusters.update(batch.roots)
        room = MAX_SIMILARITIES - len(self.similarities)
        if room > 0:
            self.similarities += similarities[:room]
        titles = self.titles
        if len(new) <= MAX_TITLES - len(titles):  # (room for all: no count to watch)
            titles.update({a.id: a.title for a in map(articles.__getitem__, new) if a.title})
        elif len(titles) < MAX_TITLES:
            for i in new:
                article = articles[i]
                if article.title:
                    titles[article.id] = article.title
                    if len(titles) >= MAX_TITLES:
                        break


def write_report(path: str, summary: Summary, source: str) -> None:
    """A picture of the run: cluster sizes and the similarity of duplicates (PNG, or HTML with the tables)."""
    import base64
    import html
    import io

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RunError("--report needs matplotlib (pip install 'stream-dedup[plot]')") from None
    sizes = Counter(n + 1 for n in summary.clusters.values())   # articles per cluster (first + duplicates)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=100)
    if sizes:
        xs = sorted(sizes)
        left.bar(xs, [sizes[x] for x in xs], color="tab:blue")
    left.set_xlabel("articles in the cluster (first + duplicates)")
    left.set_ylabel("clusters")
    left.set_title("cluster sizes")
    right.hist(summary.similarities, bins=[i / 40 for i in range(41)], color="tab:orange")
    right.set_xlabel("estimated Jaccard with the matched article")
    right.set_ylabel("duplicates")
    right.set_title("similarity of duplicates")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.suptitle(f"stream-dedup: {source} ({summary.records:,} records, {summary.duplicates:,} duplicates)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    if path.lower().endswith(".png"):
        Path(path).write_bytes(buf.getvalue())
        return
    d = summary.as_dict()
    rows = [("lines", d["lines"]), ("records", d["records"]), ("new", d["new"]), ("duplicates", d["duplicates"]),
            *((f"duplicates by {m}", n) for m, n in sorted(summary.by_method.items(), key=lambda kv: -kv[1])),
            ("repeated ids", d["repeated_ids"]), ("rejects", d["rejects"]), ("blank lines", d["blank_lines"]),
            ("seconds", d["seconds"]), ("records/s", d["records_per_second"])]
    table = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{v}</td></tr>" for k, v in rows)
    top = "".join(f"<tr><td>{n + 1}</td><td>{html.escape(root)}</td><td>{html.escape(summary.titles.get(root) or '')}"
                  f"</td></tr>" for root, n in summary.top_clusters(20))
    image = base64.b64encode(buf.getvalue()).decode()
    Path(path).write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>stream-dedup report</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}</style></head><body>"
        f"<h1>stream-dedup: {html.escape(source)}</h1><table>{table}</table>"
        f"<img alt='cluster sizes and similarity histogram' src='data:image/png;base64,{image}'>"
        "<h2>largest clusters</h2><table><tr><th>articles</th><th>first article</th><th>title</th></tr>"
        f"{top}</table></body></html>\n", encoding="utf-8")
