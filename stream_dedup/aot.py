"""Build the ahead-of-time kernels: ``python -m stream_dedup.aot [--portable] [--check]``.

Runs the engine once on sample text with numba's JIT (``STREAM_DEDUP_JIT=1``), reads which
signatures every kernel was compiled for, and compiles those with numba's ``pycc`` into
``stream_dedup/_aot_kernels*.so`` and its index ``_aot_kernels.json`` (see :mod:`stream_dedup.jit`
for how they are loaded, checked and when they are not used). Needs numba, setuptools and a C
compiler; takes ~1 minute. ``make install`` runs it; a machine without a compiler simply keeps
numba's JIT (the same code, ~1 s more to start).

``--portable`` compiles for the architecture's baseline CPU instead of this machine's (for an
image that runs elsewhere); the default, this CPU, is what numba's JIT would use.
``--check`` builds nothing: it exits 0 when the built kernels match the sources, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from . import jit


def _sample_texts() -> list[tuple[str, str]]:
    """Texts that take every kernel through the engine: repeated news (candidates, identity
    checks, passage anchors), HTML, folding, scripts without spaces, a headline, an empty text."""
    lead = ("The central bank raised its main rate by 0.25 points to 4.5 percent on Tuesday, said "
            "Governor Anna Berg in Stockholm, citing inflation of 3.1 percent in October. ")
    body = " ".join(f"Paragraph {i} of the report says exports to Norway and Finland grew by {i}.{i} "
                    f"percent while imports from Germany fell, according to Statistics Sweden." for i in range(40))
    story = lead + body
    return [
        ("a", story),
        ("b", "UPDATE 1: " + story.replace("Tuesday", "Wednesday") + " Reporting by Erik Lund."),
        ("c", lead.replace("4.5", "4.75").replace("Anna Berg", "Olof Persson") + body[:2000]),
        ("d", "<html><body><p>" + story[:3000] + "</p><div>Cookie banner</div></body></html>"),
        ("e", "Café crème — Ｆｕｌｌ ｗｉｄｔｈ, ЅНА ѕоft\u00ad­hyphen and zero\u200bwidth: " + story[:1500]),
        ("f", "東京は日本の首都です。人口は約千四百万人で、世界有数の大都市です。" * 5),
        ("g", "한국어 텍스트는 띄어쓰기가 있지만 교착어입니다. 서울은 수도입니다." * 5),
        ("gr", "Το Υπουργείο Οικονομικών στην Αθήνα ανακοίνωσε στις 12 Μαΐου 3,5 δισεκατομμύρια ευρώ για την "
               "Εθνική Τράπεζα της Ελλάδας. " * 3),  # identity tokens of a text that does not fold to ASCII
        ("la", "Señor Müller’s café — naïve “Straße” … Łódź " + lead),  # Latin script: folded by table
        ("h", "Markets close higher"),
        ("i", ""),
    ]


def _warm_up() -> None:
    import numpy as np

    from .band_table import BandTable
    from .batch import Prepared
    from .engine import Deduplicator
    from .record import Article
    from .simhash import PermutedTables
    from .simhash_table import SimhashTable
    table = BandTable(bands=2, rows=3, cap=2, slots=4, nodes=2)  # growth, rehash, removal: not in the sample run
    keys = table.keys(np.arange(24, dtype=np.uint16).reshape(4, 6))
    table.add(keys, np.arange(4, dtype=np.uint32))
    table.remove(keys[0], 0)
    # equal_counts is off the engine's path (Index.screen compares in its own pass): built for the
    # jit tests, whose small example kernel it is (tests/engine/test_jit.py)
    from .kernels import equal_counts
    equal_counts(np.arange(8, dtype=np.uint16), np.arange(4, dtype=np.uint16))
    tables = PermutedTables()
    simhash = SimhashTable(tables.key_masks, slots=4)  # growth, rehash, removal
    simhash.add_many(tables.permute_many(np.arange(3, dtype=np.uint64)), np.arange(3, dtype=np.uint32))
    simhash.remove(tables.permute_array(1), 1)
    with tempfile.TemporaryDirectory(prefix="stream-dedup-aot-") as tmp:
        for reference in (False, True):  # the compiled rules, then their Python reference (the kernels it calls)
            dedup = Deduplicator(state_dir=Path(tmp) / f"state{int(reference)}")
            if reference:
                dedup._verify = dedup._verify_reference
            try:
                for i, (name, text) in enumerate(_sample_texts() * 2):
                    dedup.process(Article(id=f"{name}{i}", text=text, is_html=text.startswith("<html>")))
                # a batch of new articles (each one's lookup files the one before it in the same call:
                # BatchView.candidates): the samples' words in reverse order, other shingles
                dedup.process_batch([Article(id=f"{name}-batch", text=" ".join(reversed(text.split())))
                                     for name, text in _sample_texts() if not text.startswith("<html>")])
                # the same as events (the dedup command's: event_kernel), exact duplicates of that batch
                dedup.process_batch_events([Article(id=f"{name}-events", text=" ".join(reversed(text.split())))
                                            for name, text in _sample_texts() if not text.startswith("<html>")])
                if not reference:  # a flood of candidates takes the two lookups apart (Index.lookup)
                    prepared = Prepared.of(dedup.fingerprint(Article(id="probe", text=_sample_texts()[0][1])),
                                           dedup.config.num_perm)
                    keys, permuted = prepared.keys(dedup.index.buckets, dedup.tables)
                    dedup.index.lookup(keys, permuted, dedup.config.simhash_k).candidates()
                    # records the store does not hold are verified from a list of them (Deduplicator._verify)
                    dedup._compiled.run(dedup.index.records([0, 1]), prepared.sig.astype(np.int64), 0, 10, b"",
                                        prepared.fp.identity)
                    dedup.index.record_store.delete(0)  # (an article deleted, a batch rolled back)
            finally:
                dedup.close()
    # and a text alone in one call (Fingerprinter.fingerprint), and the chain of kernels that text
    # the one call leaves takes (fingerprint_kernel). Every kernel called from Python is called here:
    # one called only inside another is not seen when numba's on-disk cache holds its caller
    from .config import EngineConfig
    from .fingerprint import Fingerprinter, html_to_text
    chain = Fingerprinter(EngineConfig())
    for _, text in _sample_texts():
        plain = chain.unflagged(html_to_text(text) if text.startswith("<html>") else text)
        chain._fused(plain)
        chain._chained(plain)
    chain.fingerprint_many([(text, text.startswith("<html>")) for _, text in _sample_texts()])  # (a batch's one call)


def _arg_spec(ty) -> list | None | bool:
    """JSON of one argument type for :func:`jit._arg_checks`; False if it cannot be checked."""
    from numba.core import types
    if isinstance(ty, types.Literal):  # a constant of a call from another kernel: its body would bake it in
        return False
    if isinstance(ty, types.Array):
        return [str(ty.dtype), ty.ndim] if ty.layout == "C" else False
    if isinstance(ty, (types.Integer, types.Float, types.Boolean)):
        return None
    return False


def collect() -> dict[str, list]:
    """``{module.function: [(signature, arg specs), ...]}`` of every kernel after the warm-up."""
    import importlib

    from numba.core.registry import CPUDispatcher
    _warm_up()
    found: dict[str, list] = {}
    for module_name in jit.KERNEL_MODULES:
        module = importlib.import_module(module_name)
        for name, obj in vars(module).items():
            if not isinstance(obj, CPUDispatcher) or obj.py_func.__module__ != module_name \
                    or obj.py_func.__name__ != name or obj.targetoptions.get("inline") == "always":
                # (not a kernel, nor another name for one: a module's trusted() alias of its own kernel)
                continue
            sigs = []
            for args, result in obj.overloads.items():
                specs = [_arg_spec(a) for a in args]
                if False not in specs:
                    sigs.append((result.signature, specs))
            found[f"{module_name}.{name}"] = sigs
    return found


def build(portable: bool, quiet: bool) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from numba.pycc import CC
    import importlib

    kernels = collect()
    index: dict[str, list] = {}
    with tempfile.TemporaryDirectory(prefix="stream-dedup-aot-") as tmp:
        cc = CC(jit.AOT_NAME)
        cc.output_dir = tmp
        cc.verbose = False
        if not portable:
            cc.target_cpu = "host"
        n = 0
        for name, sigs in kernels.items():
            module_name, func_name = name.rsplit(".", 1)
            py_func = getattr(importlib.import_module(module_name), func_name).py_func
            for signature, specs in sigs:
                export = f"k{n}_{func_name}"
                n += 1
                cc.export(export, signature)(py_func)
                index.setdefault(name, []).append({"export": export, "args": specs})
        unused = sorted(name for name, sigs in kernels.items() if not sigs)
        if not quiet:
            print(f"compiling {n} kernel signatures ahead of time ({'portable' if portable else 'this CPU'})"
                  + (f"; left to the JIT (not called by the sample run): {', '.join(unused)}" if unused else ""),
                  file=sys.stderr)
        cc.compile()
        built = [p for p in Path(tmp).iterdir() if p.name.startswith(jit.AOT_NAME)]
        if len(built) != 1:
            raise RuntimeError(f"pycc produced {[p.name for p in Path(tmp).iterdir()]}")
        for old in jit.PACKAGE_DIR.glob(f"{jit.AOT_NAME}*"):
            old.unlink()
        shutil.move(str(built[0]), jit.PACKAGE_DIR / built[0].name)
    import numba
    meta = {"stamp": jit.source_stamp(), "numba": numba.__version__, "portable": portable, "kernels": index}
    tmp_index = jit.INDEX_FILE.with_suffix(".json.tmp")
    tmp_index.write_text(json.dumps(meta, indent=1) + "\n")
    os.replace(tmp_index, jit.INDEX_FILE)  # written last: a half-built module is never loaded
    if not quiet:
        print(f"built {jit.PACKAGE_DIR / built[0].name}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stream_dedup.aot", description=__doc__.split("\n\n")[0])
    parser.add_argument("--portable", action="store_true", help="compile for the baseline CPU, not this one")
    parser.add_argument("--check", action="store_true", help="exit 0 if the built kernels match the sources")
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.check:
        current = jit.using_aot()
        if not args.quiet:
            print("ahead-of-time kernels: " + ("current" if current else "not built or stale (numba JIT in use)"))
        return 0 if current else 1
    if not jit.compiling():  # this process loaded the AOT kernels: build in one that compiles them
        # with a numba cache of its own: every kernel compiled afresh, so that the sample run sees each
        # signature (a callee is not compiled when numba's cache holds its caller), and no stale
        # cache entry gets into the build (one, after kernel sources were edited and reverted, made
        # the build's own run fail with numba's "'descr' is NULL")
        with tempfile.TemporaryDirectory(prefix="stream-dedup-aot-numba-") as cache:
            env = dict(os.environ, **{jit.FORCE_JIT_ENV: "1", "NUMBA_CACHE_DIR": cache})
            return subprocess.call([sys.executable, "-m", "stream_dedup.aot",
                                    *(argv if argv is not None else sys.argv[1:])], env=env)
    try:
        return build(args.portable, args.quiet)
    except Exception as exc:  # no compiler, no setuptools: the JIT stays in use
        print(f"stream_dedup.aot: cannot build the ahead-of-time kernels ({type(exc).__name__}: {exc}); "
              "numba's JIT will compile them at run time instead", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
