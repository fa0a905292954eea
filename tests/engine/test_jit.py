"""The ahead-of-time kernels (stream_dedup.jit / stream_dedup.aot): built by `make install`,
loaded without numba, checked arguments, and the same results as numba's JIT."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from stream_dedup import jit, kernels

ROOT = Path(__file__).resolve().parents[2]

_FINGERPRINTS = r"""
import hashlib, itertools, sys
from stream_dedup.config import EngineConfig
from stream_dedup.engine import Deduplicator
from stream_dedup.record import parse_record
from stream_dedup import jit
cfg = EngineConfig()
d = Deduplicator(cfg, sys.argv[2])
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for line in itertools.islice(f, 400):
        a = parse_record(line, cfg)
        fp = d.fingerprint(a)
        for part in (fp.minhash, fp.anchors, fp.identity):
            h.update(part.tobytes())
        h.update(f"{fp.simhash} {fp.n_shingles} {fp.exact.hex()}".encode())
        h.update(repr(d.process(a).to_event()).encode())
d.close()
print(jit.using_aot(), "numba" in sys.modules, h.hexdigest())
"""


def _run(code: str, *args: str, force_jit: bool = False) -> str:
    env = dict(os.environ)
    env.pop(jit.FORCE_JIT_ENV, None)
    if force_jit:
        env[jit.FORCE_JIT_ENV] = "1"
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_make_install_built_current_aot_kernels() -> None:
    assert jit.INDEX_FILE.exists(), "run `make install` (or python -m stream_dedup.aot) to build the AOT kernels"
    assert json.loads(jit.INDEX_FILE.read_text())["stamp"] == jit.source_stamp(), \
        "kernel sources changed since the AOT build: run `make install`"


def test_aot_and_jit_give_the_same_fingerprints_and_decisions(shared_stream, tmp_path: Path) -> None:
    records, _ = shared_stream(400)
    stream_path = tmp_path / "stream.jsonl"
    stream_path.write_text("".join(json.dumps(r) + "\n" for r in records))
    aot_used, aot_numba, aot_digest = _run(_FINGERPRINTS, str(stream_path), str(tmp_path / "a"))
    jit_used, jit_numba, jit_digest = _run(_FINGERPRINTS, str(stream_path), str(tmp_path / "b"), force_jit=True)
    assert (aot_used, aot_numba) == ("True", "False")   # the AOT process never imported numba
    assert (jit_used, jit_numba) == ("False", "True")
    assert aot_digest == jit_digest


def test_a_stale_index_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = tmp_path / "_aot_kernels.json"
    index.write_text(json.dumps({"stamp": "0" * 20, "kernels": {}}))
    monkeypatch.setattr(jit, "INDEX_FILE", index)
    assert jit._load_aot() is None
    index.write_text(json.dumps({"stamp": jit.source_stamp(), "kernels": {}}))
    monkeypatch.setenv(jit.FORCE_JIT_ENV, "1")
    assert jit._load_aot() is None


def test_arguments_outside_the_built_signatures_go_to_the_jit_twin() -> None:
    """The AOT entry points do not check types (a wrong dtype would crash): the wrapper does."""
    if not jit.using_aot():
        pytest.fail("AOT kernels not in use in this process: run `make install`")
    rng = np.random.default_rng(3)
    rows = rng.integers(0, 4, 40, dtype=np.uint16)
    query = rows[:8].copy()
    expected = kernels.equal_counts(rows, query)          # the built signature (uint16)
    wide = kernels.equal_counts(rows.astype(np.uint64), query.astype(np.uint64))   # not built: JIT twin
    strided = kernels.equal_counts(np.repeat(rows, 2)[::2], query)                  # not C-ordered: twin
    assert np.array_equal(expected, wide) and np.array_equal(expected, strided)
    assert np.array_equal(expected, [int((rows[i * 8:(i + 1) * 8] == query).sum()) for i in range(5)])
    assert kernels.equal_counts.__module__ == "stream_dedup.jit"  # the wrapper, not a numba dispatcher


def test_the_dedup_command_starts_without_numba(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": "a", "text": "One small article about the harbour."}\n')
    code = ("import sys; from stream_dedup.cli import main; rc = main(['dedup', sys.argv[1], '--state', sys.argv[2],"
            " '--out', sys.argv[3], '-q']); print(rc, 'numba' in sys.modules)")
    assert _run(code, str(src), str(tmp_path / "s"), str(tmp_path / "out.jsonl")) == ["0", "False"]


_TRUSTED = r"""
import sys
import numpy as np
from stream_dedup import jit, kernels
from stream_dedup.list_table import _table_members, table_members
raw = jit.trusted(kernels.equal_counts)
entry = kernels.equal_counts._aot_entries[0][1]
a = np.arange(8, dtype=np.uint16)
print(jit.using_aot(), raw is entry, _table_members is table_members._aot_entries[0][1], int(raw(a, a)[0]))
"""


def test_trusted_calls_skip_the_checks_in_production() -> None:
    """Without STREAM_DEDUP_CHECK_KERNELS, a trusted call site holds the AOT entry point itself."""
    env_value = os.environ.pop(jit.CHECK_ENV, None)
    try:
        assert _run(_TRUSTED) == ["True", "True", "True", "8"]
    finally:
        if env_value is not None:
            os.environ[jit.CHECK_ENV] = env_value


def test_trusted_calls_are_checked_strictly_in_the_tests() -> None:
    """The suite runs with STREAM_DEDUP_CHECK_KERNELS=1 (tests/conftest.py), so every trusted call
    site the engine exercises in any test is checked against its export, and a mismatch fails."""
    if not jit.using_aot():
        pytest.fail("AOT kernels not in use in this process: run `make install`")
    assert os.environ.get(jit.CHECK_ENV) == "1" and jit._strict
    strict = jit.trusted(kernels.equal_counts)
    rows = np.arange(16, dtype=np.uint16)
    assert strict(rows, rows[:8].copy()).tolist() == [8, 0]
    with pytest.raises(TypeError, match="equal_counts called with \\(uint64\\[1d\\], uint16\\[1d\\]\\)"):
        strict(rows.astype(np.uint64), rows[:8].copy())
    with pytest.raises(TypeError, match="not C"):
        strict(np.repeat(rows, 2)[::2], rows[:8].copy())
    numba_dispatcher = object()
    assert jit.trusted(numba_dispatcher) is numba_dispatcher  # (JIT mode: returned as it is)


_UNPICKLES = r"""
import pickle
import numpy as np
from stream_dedup import jit, kernels
loads, calls = pickle.loads, []
pickle.loads = lambda data, /: calls.append(data) or loads(data)
a = np.arange(8, dtype=np.uint16)
counts = [int(kernels.equal_counts(a, a)[0]) for _ in range(100)]
print(jit.using_aot(), len(calls), counts == [8] * 100, list(jit._classes.values()) == [np.ndarray])
"""


def test_the_aot_module_takes_the_array_class_from_the_class_cache() -> None:
    """jit._ClassCache: the AOT module's numba_unpickle kept the cache's lookup at import: the
    cache holds the np.ndarray class that boxing the returned arrays asked for (without the swap
    it stays empty), and no call went to pickle.loads as it is after the import."""
    assert _run(_UNPICKLES) == ["True", "0", "True", "True"]


def test_the_engine_paths_called_from_python_have_exports(tmp_path: Path) -> None:
    """Every kernel the engine calls from Python is exported, including the paths a stream seldom
    takes: the separate lookups of a flood of candidates (Index.lookup), a text alone in one call
    (Fingerprinter.fingerprint), the chain of kernels (text no fold table holds), a batch's one
    call. (A kernel called only from inside another is not seen by the build when numba's on-disk
    cache holds its caller: the build's sample run must call each of these itself.)"""
    if not jit.using_aot():
        pytest.fail("AOT kernels not in use in this process: run `make install`")
    code = textwrap.dedent("""
        import sys
        from stream_dedup.batch import Prepared
        from stream_dedup.engine import Deduplicator
        from stream_dedup.record import Article
        d = Deduplicator(state_dir=sys.argv[1])
        text = "The harbour authority said on Monday that 40 ships were waiting outside the port of Rotterdam. " * 3
        d.process_batch([Article(id="a", text=text), Article(id="b", text=text + " Reuters")])
        fp = d.fingerprint(Article(id="c", text=text + " AP"))
        keys, permuted = Prepared.of(fp, d.config.num_perm).keys(d.index.buckets, d.tables)
        found = d.index.lookup(keys, permuted, d.config.simhash_k).candidates()
        d.fingerprinter._chained(text)
        d.fingerprinter.fingerprint_many([(text, False), ("Ѕ ЅНА Το Υπουργείο", False)])
        d.close()
        print(found == [0, 1], "numba" in sys.modules)
    """)
    assert _run(code, str(tmp_path / "s")) == ["True", "False"]


def test_make_rebuilds_the_aot_kernels_when_any_kernel_module_changes() -> None:
    """The Makefile's rule for the AOT build lists every module of jit.KERNEL_MODULES (and jit.py,
    aot.py) as a prerequisite: `make install` after an edit of any of them rebuilds the kernels."""
    makefile = (ROOT / "Makefile").read_text()
    rule = makefile[makefile.index("$(AOT_INDEX):"):].replace("\\\n", " ")
    rule = rule[:rule.index("\n")]  # (the prerequisites, continuation lines joined)
    listed = set(rule.split())
    for name in (*jit.KERNEL_MODULES, "stream_dedup.jit", "stream_dedup.aot"):
        assert name.replace(".", "/") + ".py" in listed, name
