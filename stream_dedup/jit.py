"""How the compiled kernels are loaded: ahead-of-time machine code when it is built, numba's JIT otherwise.

The kernels (:mod:`.kernels`, :mod:`.identity`, :mod:`.passages`, :mod:`.list_table`, :mod:`.band_table`, :mod:`.simhash_table`) are numba functions. Loaded by
numba's JIT they cost a process ~1.3 s before its first decision, even from numba's on-disk
cache: importing numba (~0.2 s), then, at the first call, numba's compiler and typing registries
(~0.5 s, with scipy's BLAS probe ~0.25 s), whatever the size of the kernels. A short ``dedup`` run
or a restarted worker pays that every time.

``python -m stream_dedup.aot`` (run by ``make install``) compiles the same functions ahead of time
with numba's ``pycc`` into one extension module, ``stream_dedup/_aot_kernels*.so``, for the
signatures the engine calls them with, next to ``_aot_kernels.json`` (which export is which
kernel and signature, and the *stamp*: a hash of the kernel modules' sources). When that module
is there and its stamp matches the sources, importing the engine imports no numba at all and
the first decision comes ~1 s sooner. Otherwise (not built, a kernel source edited since, or
``STREAM_DEDUP_JIT=1``) every kernel is numba's JIT dispatcher, as before; nothing else changes.

The ahead-of-time entry points do not check their arguments (a wrong dtype would crash the
process), so each kernel is called through a small wrapper that checks every array argument's
dtype, dimensions and C order against an exported signature. A call that matches none (a test
passing other dtypes, a kernel the build did not see called) goes to the JIT version of the
same source, compiled on first such use: slower to start, never a different result. Both are
the same numba code, compiled by the same numba; ``tests/engine/test_jit.py`` compares their
outputs on the shared stream.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from pickle import loads as _pickle_loads
from typing import Any

import numpy as np

try:  # CPython's own SHA-256 (the same digest): importing hashlib loads OpenSSL, 3-9 ms of every start
    from _sha256 import sha256  # Python 3.10, 3.11
except ImportError:
    try:
        from _sha2 import sha256  # Python 3.12+
    except ImportError:
        from hashlib import sha256

PACKAGE_DIR = Path(__file__).parent
#: modules that define kernels (their sources make the stamp, with this file's)
KERNEL_MODULES = ("stream_dedup.kernels", "stream_dedup.identity", "stream_dedup.passages", "stream_dedup.list_table",
                  "stream_dedup.band_table", "stream_dedup.simhash_table", "stream_dedup.candidate_rules",
                  "stream_dedup.fingerprint_kernel", "stream_dedup.record_store", "stream_dedup.decide_kernel",
                  "stream_dedup.addresses", "stream_dedup.record_kernel", "stream_dedup.event_kernel")
AOT_NAME = "_aot_kernels"
INDEX_FILE = PACKAGE_DIR / f"{AOT_NAME}.json"
FORCE_JIT_ENV = "STREAM_DEDUP_JIT"


def source_stamp() -> str:
    """Hash of the kernel modules' sources and this file's: an AOT build is used only for these."""
    h = sha256()
    for name in (*KERNEL_MODULES, __name__):
        h.update(name.encode())
        h.update((PACKAGE_DIR / f"{name.rsplit('.', 1)[1]}.py").read_bytes())
    return h.hexdigest()[:20]


def _load_aot() -> tuple[Any, dict] | None:
    if os.environ.get(FORCE_JIT_ENV, "") not in ("", "0"):
        return None
    try:
        index = json.loads(INDEX_FILE.read_text())
    except (OSError, ValueError):
        return None
    if index.get("stamp") != source_stamp():
        return None
    try:
        module = _import_with_class_cache(f"stream_dedup.{AOT_NAME}")
    except ImportError:
        return None
    return module, index["kernels"]


class _ClassCache(dict):
    """The ``pickle.loads`` of the AOT module: classes unpickled once, everything else as before.

    numba's pycc code boxes every array a kernel returns with the ``np.ndarray`` class, which it
    gets by calling ``numba_unpickle`` (its ``_helperlib.c``, compiled into the module with
    ``PYCC_COMPILING``) on the class's pickle: a new bytes object and a ``pickle.loads`` each time.
    That function keeps the ``pickle.loads`` it found at its first call, which comes while the
    module is imported. :func:`_import_with_class_cache` makes that this object's ``__getitem__``
    (C code: a dict lookup of the bytes): a class, found by reference like ``pickle.loads`` finds
    it, is kept; anything else (an exception a kernel raises) is unpickled each time, as before.
    A kernel call that returns an array took 0.35 us instead of 0.83 (timeit, ``equal_counts`` on
    two elements); a whole ``dedup`` run was 4.5 % faster on the dev stream, 5.1 % on short items
    (``bench/throughput.py --repeat 5 --baseline``, 2026-11-25). numba is pinned by the lock files;
    ``tests/engine/test_jit.py`` checks the cache is in use (a numba whose ``numba_unpickle`` no
    longer keeps ``pickle.loads`` would only lose the gain).
    """

    def __missing__(self, data: bytes) -> Any:
        obj = _pickle_loads(data)
        if isinstance(obj, type):
            self[data] = obj
        return obj


_classes = _ClassCache()


def _import_with_class_cache(name: str) -> Any:
    """``importlib.import_module(name)`` with ``pickle.loads`` swapped for :class:`_ClassCache`
    meanwhile (put back before it returns)."""
    import pickle
    pickle.loads = _classes.__getitem__
    try:
        return importlib.import_module(name)
    finally:
        pickle.loads = _pickle_loads


_AOT = _load_aot()
_jit_forced = False   # set while the JIT twins of the kernel modules are imported


def using_aot() -> bool:
    """Whether this process runs the ahead-of-time kernels (no numba imported for them)."""
    return _AOT is not None


def compiling() -> bool:
    """Whether kernel modules being imported now are compiled by numba (JIT, or for the AOT build)."""
    return _AOT is None or _jit_forced


def inline(func: Callable) -> Callable:
    """A helper compiled into the kernels that call it (numba ``inline="always"``)."""
    if not compiling():
        return func  # only ever called from compiled code
    from numba import njit
    return njit(cache=True, inline="always")(func)


def kernel(func: Callable) -> Callable:
    """A compiled kernel: numba's JIT dispatcher, or the checked AOT entry points."""
    if compiling():
        from numba import njit
        return njit(cache=True)(func)
    name = f"{func.__module__}.{func.__name__}"
    return _checked(name, [(_arg_checks(e["args"]), getattr(_AOT[0], e["export"]))
                           for e in _AOT[1].get(name, [])])


_DTYPES = {"bool": np.dtype(np.bool_)}


def _arg_checks(args: list) -> tuple:
    """Per argument: None for a scalar, else (dtype, ndim) of a C-ordered array."""
    return tuple(None if a is None else (_DTYPES.get(a[0]) or np.dtype(a[0]), a[1]) for a in args)


def _fitter(checks: tuple) -> Callable[[tuple], bool]:
    """Whether a call's arguments match one exported signature: every array argument a C-ordered
    ``np.ndarray`` of its dtype and dimensions, no array where a scalar goes. Built once per
    signature (timeit: 0.78 us a call for the 5-argument sketch signature, 0.36 us for a 2-argument
    one, against ~1.5 us for the generic loop over ``checks`` it replaced)."""
    count = len(checks)
    arrays = tuple((i, check[0], check[1]) for i, check in enumerate(checks) if check is not None)
    scalars = tuple(i for i, check in enumerate(checks) if check is None)
    ndarray = np.ndarray

    def fits(args: tuple) -> bool:
        if len(args) != count:
            return False
        for i, dtype, ndim in arrays:
            a = args[i]
            if type(a) is not ndarray:
                return False
            d = a.dtype
            if (d is not dtype and d != dtype) or a.ndim != ndim or not a.flags.c_contiguous:
                return False
        for i in scalars:
            if isinstance(args[i], ndarray):
                return False
        return True
    return fits


def _checked(name: str, entries: list[tuple[tuple, Callable]]) -> Callable:
    call = _checked_call(name, entries)
    call._aot_entries = entries  # for trusted()
    return call


def _checked_call(name: str, entries: list[tuple[tuple, Callable]]) -> Callable:
    if len(entries) == 1:
        (checks, fn), = entries
        fits = _fitter(checks)

        def call(*args):
            if fits(args):
                return fn(*args)
            return jit_twin(name)(*args)
    else:
        fitted = [(_fitter(checks), fn) for checks, fn in entries]

        def call(*args):
            for fits, fn in fitted:
                if fits(args):
                    return fn(*args)
            return jit_twin(name)(*args)
    call.__name__ = call.__qualname__ = name.rsplit(".", 1)[1]
    call.__doc__ = f"AOT-compiled {name} (numba pycc), argument-checked; other arguments go to its JIT twin."
    return call


def trusted(k: Callable) -> Callable:
    """Kernel ``k`` for a call site whose every array argument the engine makes itself, with the
    dtype, dimensions and C order of ``k``'s one exported signature fixed in its code (the tables'
    own arrays, a kernel's output, ``np.frombuffer`` of bytes): the AOT entry point itself, without
    the checks of the wrapper. The checks cost 0.4-1.6 us a call and a record makes ~10 such calls:
    a whole ``dedup`` run was 5-6 % faster without them (dev and short streams, one CPU, three
    runs each). JIT dispatchers, and kernels with several exported signatures, are returned as they are.

    With ``STREAM_DEDUP_CHECK_KERNELS=1`` in the environment, a trusted call is checked instead,
    strictly: arguments that fit no exported signature raise ``TypeError`` rather than going to the
    JIT twin (``tests/engine/test_jit.py`` runs the engine so, to show that every trusted call
    site passes what its export takes).
    """
    entries = getattr(k, "_aot_entries", None)
    if entries is None:
        return k
    if _strict:
        return _strict_call(k.__name__, entries)
    if len(entries) == 1:
        return entries[0][1]
    return k


CHECK_ENV = "STREAM_DEDUP_CHECK_KERNELS"
_strict = os.environ.get(CHECK_ENV, "") not in ("", "0")


def _strict_call(name: str, entries: list[tuple[tuple, Callable]]) -> Callable:
    fitted = [(_fitter(checks), fn) for checks, fn in entries]

    def call(*args):
        for fits, fn in fitted:
            if fits(args):
                return fn(*args)
        described = ", ".join(f"{a.dtype}[{a.ndim}d{'' if a.flags.c_contiguous else ', not C'}]"
                              if isinstance(a, np.ndarray) else type(a).__name__ for a in args)
        raise TypeError(f"trusted kernel {name} called with ({described}): no exported signature takes them")
    call.__name__ = call.__qualname__ = name
    return call


_twins: dict[str, Any] = {}


def jit_twin(name: str) -> Callable:
    """The numba JIT dispatcher of kernel ``module.function``, compiled from the same source.

    In an AOT process the kernel modules hold plain functions and AOT wrappers, which numba cannot
    compile against, so their sources are imported again as fresh modules in JIT mode (the real
    modules are put back in ``sys.modules`` afterwards).
    """
    global _jit_forced
    if not _twins:
        package = sys.modules[__package__]
        saved = {m: sys.modules.pop(m) for m in KERNEL_MODULES if m in sys.modules}
        attrs = {m: getattr(package, m.rsplit(".", 1)[1], None) for m in KERNEL_MODULES}
        _jit_forced = True
        try:
            _twins.update({m: importlib.import_module(m) for m in KERNEL_MODULES})
        finally:
            _jit_forced = False
            for m in KERNEL_MODULES:
                sys.modules.pop(m, None)
                if attrs[m] is not None:
                    setattr(package, m.rsplit(".", 1)[1], attrs[m])
            sys.modules.update(saved)
    module, func = name.rsplit(".", 1)
    return getattr(_twins[module], func)
