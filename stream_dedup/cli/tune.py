"""``stream-dedup tune``: choose the LSH bands and rows for a threshold (or evaluate given ones), print
the candidate probability at several similarities and plot the S-curve."""

from __future__ import annotations

import argparse

from ..config import EngineConfig
from .errors import RunError, UsageError, check_writable


def configure_tune_parser(p: argparse.ArgumentParser) -> None:
    """The arguments of ``tune``, and :func:`run_tune` as the function that runs it."""
    p.add_argument("--threshold", type=float, default=EngineConfig.lsh_threshold,
                   help="similarity at which LSH should start proposing candidates (default: %(default)s)")
    p.add_argument("--num-perm", type=int, default=EngineConfig.num_perm,
                   help="MinHash permutations available for bands x rows (default: %(default)s)")
    p.add_argument("--bands", type=int, default=0, help="evaluate these bands instead of optimising (with --rows)")
    p.add_argument("--rows", type=int, default=0, help="evaluate these rows instead of optimising (with --bands)")
    p.add_argument("--fp-weight", type=float, default=0.5,
                   help="weight of the false-positive area below the threshold when optimising (default: %(default)s)")
    p.add_argument("--fn-weight", type=float, default=0.5,
                   help="weight of the false-negative area above the threshold when optimising (default: %(default)s)")
    p.add_argument("--plot", metavar="FILE.png", help="write the S-curve to this PNG file")
    p.set_defaults(func=run_tune)


def run_tune(args: argparse.Namespace) -> int:
    from ..engine import lsh_params  # with numpy: only when tune runs
    from ..lsh import candidate_probability, optimal_params

    if args.num_perm < 1:
        raise UsageError(f"--num-perm {args.num_perm}: must be at least 1")
    if not 0.0 < args.threshold < 1.0:
        raise UsageError(f"--threshold {args.threshold}: must be between 0 and 1 (exclusive)")
    if args.fp_weight < 0 or args.fn_weight < 0 or args.fp_weight + args.fn_weight <= 0:
        raise UsageError("--fp-weight and --fn-weight must be >= 0, and not both 0")
    if args.bands < 0 or args.rows < 0:
        raise UsageError("--bands and --rows must be positive")
    if args.plot:
        check_writable("--plot", args.plot)
        if not args.plot.lower().endswith(".png"):
            raise UsageError(f"--plot {args.plot}: give a .png file name")
    if args.bands or args.rows:
        if not (args.bands and args.rows):
            raise UsageError("give both --bands and --rows, or neither")
        config = EngineConfig(num_perm=max(args.num_perm, 8), lsh_threshold=args.threshold,
                              lsh_bands=args.bands, lsh_rows=args.rows)
        if args.bands * args.rows > args.num_perm:
            raise ValueError("invalid engine configuration: lsh_bands * lsh_rows must be <= num_perm")
        params = lsh_params(config)
    else:
        params = optimal_params(args.threshold, args.num_perm, args.fp_weight, args.fn_weight)
    print(f"threshold {args.threshold}  num_perm {args.num_perm}  ->  bands b = {params.bands}, rows r = {params.rows} "
          f"(uses {params.bands * params.rows} of {args.num_perm} permutations)")
    print(f"S-curve P(candidate | s) = 1 - (1 - s^{params.rows})^{params.bands}; steepest near s = {params.inflection:.3f}")
    print(f"false-positive area {params.false_positive_area:.4f}, false-negative area {params.false_negative_area:.4f}")
    print("| similarity | P(candidate) |")
    print("| --- | --- |")
    for s in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95):
        print(f"| {s:.2f} | {float(candidate_probability(s, params.bands, params.rows)):.4f} |")
    if args.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            import numpy as np
        except ImportError:
            raise RunError("--plot needs matplotlib (pip install 'stream-dedup[plot]')") from None
        s = np.linspace(0, 1, 501)
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
        ax.plot(s, candidate_probability(s, params.bands, params.rows), lw=2,
                label=f"b={params.bands}, r={params.rows}")
        ax.axvline(args.threshold, color="tab:red", ls="--", label=f"threshold {args.threshold}")
        ax.fill_between(s, 0, candidate_probability(s, params.bands, params.rows), where=s <= args.threshold,
                        color="tab:red", alpha=0.15, label="false-positive area")
        ax.fill_between(s, candidate_probability(s, params.bands, params.rows), 1, where=s >= args.threshold,
                        color="tab:orange", alpha=0.15, label="false-negative area")
        ax.set_xlabel("Jaccard similarity s")
        ax.set_ylabel("P(candidate)")
        ax.set_title(f"LSH S-curve 1 - (1 - s^{params.rows})^{params.bands}  (num_perm={args.num_perm})")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(args.plot)
        plt.close(fig)
        print(f"plot written to {args.plot}")
    return 0
