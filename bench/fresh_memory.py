"""What does writing memory the process has not used before cost here? (stream_dedup.next_arrays's reason)

    python bench/fresh_memory.py [--chunks 20] [--mb 512] [--pages numpy|huge|small]

Allocates ``--chunks`` arrays of ``--mb`` MB one after the other and writes each once (every page
faulted in for the first time), then writes them all again (the same pages, resident now), and
prints milliseconds per MB for each pass: the first pass is the page faults' cost (on a VM whose
memory the host backs on demand it includes the host's), the second plain memory bandwidth.
``--pages``: the arrays as numpy allocates them (``numpy``: huge pages asked for at 4 MB or more),
or mapped with huge pages asked for (``huge``) or refused (``small``) as
:mod:`stream_dedup.page_memory` maps the lists' arrays. Memory: ``--chunks`` x ``--mb`` MB at the
end. Figures only (no asserts).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from stream_dedup import page_memory


def new_array(n: int, pages: str) -> np.ndarray:
    if pages == "numpy":
        return np.empty(n, dtype=np.int64)
    return page_memory.zeros(n, np.int64, probed=pages == "huge")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--pages", choices=("numpy", "huge", "small"), default="numpy")
    args = ap.parse_args()
    if args.chunks < 1 or args.mb < 1:
        sys.exit("fresh_memory: --chunks and --mb must be at least 1")
    if args.pages == "huge" and args.mb << 20 < page_memory.HUGE_FROM:
        sys.exit(f"fresh_memory: --pages huge needs --mb {page_memory.HUGE_FROM >> 20} or more (page_memory.HUGE_FROM)")
    arrays: list[np.ndarray] = []
    first, again = [], []
    for _ in range(args.chunks):
        t = time.perf_counter()
        arrays.append(new_array(args.mb << 17, args.pages))  # (mb << 20 bytes of int64)
        arrays[-1].fill(1)
        first.append((time.perf_counter() - t) * 1000 / args.mb)
    for a in arrays:
        t = time.perf_counter()
        a.fill(2)
        again.append((time.perf_counter() - t) * 1000 / args.mb)
    for name, times in (("first write (fresh pages)", first), ("second write (resident)", again)):
        print(f"{name}: {min(times):.2f}-{max(times):.2f} ms/MB over {args.chunks} x {args.mb} MB "
              f"({' '.join(f'{x:.2f}' for x in times)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
