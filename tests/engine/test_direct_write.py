"""stream_dedup.direct_write: the file a direct write makes is the buffered write's, byte for byte."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from stream_dedup import direct_write


def _layout(seed: int) -> tuple[bytes, list[tuple[int, np.ndarray]], int]:
    """A header and arrays of odd sizes and dtypes at 64-aligned offsets after it, with gaps."""
    rng = np.random.default_rng(seed)
    header = bytes(rng.integers(0, 256, 100 + seed, dtype=np.uint8))
    arrays, at = [], 128
    for n, dtype in ((0, np.uint32), (1, np.uint8), (4095, np.uint8), (5000, np.uint64), (3, np.int64),
                     (70_000, np.uint32), (63, np.uint8)):
        array = rng.integers(0, 200, n).astype(dtype)
        arrays.append((at, array))
        at = -(-(at + array.nbytes) // 64) * 64
    return header, arrays, at + 17  # (a tail of zeros after the last array, not a whole block)


def _expected(header: bytes, arrays: list[tuple[int, np.ndarray]], total: int) -> bytes:
    out = bytearray(total)
    out[:len(header)] = header
    for offset, array in arrays:
        out[offset:offset + array.nbytes] = array.tobytes()
    return bytes(out)


def test_a_small_file_is_written_through_the_page_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under DIRECT_MIN_BYTES the write is buffered (no O_DIRECT open); at it, direct."""
    header, arrays, total = _layout(2)
    flags: list[int] = []
    real_open = os.open

    def spying(path, mode, *args):
        flags.append(mode)
        return real_open(path, mode, *args)

    monkeypatch.setattr(os, "open", spying)
    direct_write.write_layout(tmp_path / "small", header, arrays, total)
    assert not any(f & os.O_DIRECT for f in flags)
    monkeypatch.setattr(direct_write, "DIRECT_MIN_BYTES", total)
    direct_write.write_layout(tmp_path / "large", header, arrays, total)
    assert any(f & os.O_DIRECT for f in flags)
    assert (tmp_path / "small").read_bytes() == (tmp_path / "large").read_bytes() == _expected(header, arrays, total)


@pytest.mark.parametrize("chunk", [4096, 8192, 1 << 20])
def test_a_direct_write_is_the_buffered_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Through buffers smaller and larger than the arrays (writes that split arrays and gaps at
    every place), the direct write makes the bytes of the layout, as the buffered write does."""
    monkeypatch.setattr(direct_write, "DIRECT_CHUNK", chunk)
    for seed in range(3):
        header, arrays, total = _layout(seed)
        expected = _expected(header, arrays, total)
        try:
            direct_write._write_direct(tmp_path / "direct", header, arrays, total)
        except OSError as exc:  # (the test's filesystem refuses O_DIRECT: the fallback is tested below)
            pytest.skip(f"O_DIRECT refused here: {exc}")
        direct_write.write_layout(tmp_path / "buffered", header, arrays, total, direct=False)
        assert (tmp_path / "direct").read_bytes() == expected == (tmp_path / "buffered").read_bytes()


def test_a_filesystem_that_refuses_direct_writes_gets_the_buffered_write(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    header, arrays, total = _layout(5)
    monkeypatch.setattr(direct_write, "DIRECT_MIN_BYTES", 0)  # (a file this small is written buffered anyway)
    real_open = os.open

    def refusing(path, flags, *args):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refusing)
    direct_write.write_layout(tmp_path / "f", header, arrays, total)
    assert (tmp_path / "f").read_bytes() == _expected(header, arrays, total)


def test_another_write_error_is_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk is not a refusal of O_DIRECT: it is raised (the snapshot's caller logs it), not
    hidden behind a second, buffered attempt."""
    header, arrays, total = _layout(1)
    monkeypatch.setattr(direct_write, "DIRECT_MIN_BYTES", 0)

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space left"):
        direct_write.write_layout(tmp_path / "f", header, arrays, total)
