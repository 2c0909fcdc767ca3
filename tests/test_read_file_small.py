"""read_file takes a small file's lines from its bytes read whole in one go (no buffered reader):
the results are byte for byte those of reading through the buffered reader, on the inputs where
the two could part (CRLF and lone CRs, no last newline, invalid UTF-8, lines around the cut length,
binary files, offsets past the end), and a file that grew past the size between its open and its
read is read through the buffered reader from its start. A window's lines are measured one by one
only when a block of it holds no newline (`_may_hold_long_line`): never when a line is too long."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from test_read_file_numbering import TRICKY, tricky_data

from osprey_sidecar import files
from osprey_sidecar.errors import ToolFailure
from osprey_sidecar.files import MAX_LINE_CHARS, read_file
from osprey_sidecar.paths import Roots


def outcome(roots: Roots, offset: int, limit: int) -> object:
    try:
        r = read_file(roots, "f.txt", offset, limit)
    except ToolFailure as exc:
        return exc.category, exc.message
    return r.SerializeToString()


def both(monkeypatch: pytest.MonkeyPatch, roots: Roots, offset: int, limit: int) -> tuple[object, object]:
    """(the result from memory, the result through the buffered reader)."""
    small = outcome(roots, offset, limit)
    with monkeypatch.context() as m:
        m.setattr(files, "SMALL_READ_BYTES", 0)
        buffered = outcome(roots, offset, limit)
    return small, buffered


@pytest.mark.parametrize("seed", range(6))
def test_small_files_read_as_through_the_buffered_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    data = tricky_data(rng, rng.randint(1, 30))[: files.SMALL_READ_BYTES - 1]
    assert len(data) < files.SMALL_READ_BYTES
    (tmp_path / "f.txt").write_bytes(data)
    roots = Roots([str(tmp_path)])
    lines = data.count(b"\n") + 1
    windows = [(0, 0), (1, 1), (lines, 0), (lines, 5), (lines + 1, 0), (lines + 5, 1), (lines - 1, 2)]
    windows += [(rng.randint(0, lines + 2), rng.choice([0, 1, 2, rng.randint(1, lines + 3)])) for _ in range(8)]
    for offset, limit in windows:
        small, buffered = both(monkeypatch, roots, offset, limit)
        assert small == buffered, (offset, limit)


@pytest.mark.parametrize("data", [
    b"", b"\n", b"no newline at all", b"one\r\ntwo\r\nthree\r\n", b"cr only\r", b"bad \xe2\x82\nnext", *TRICKY[-4:],
    b"x" * (MAX_LINE_CHARS + 1) + b"\r\n" + "é".encode() * (MAX_LINE_CHARS + 7),
    b"y" * (files.LINE_HEAD_BYTES + 3) + b"\nshort",
    b"text\x00binary", b"a\n" * 5000,
], ids=["empty", "newline", "no-newline", "crlf", "cr-at-end", "cut-sequence", "tricky-1", "tricky-2", "tricky-3", "tricky-4",
        "long-lines", "longer-than-the-head", "binary", "many-lines"])
def test_tricky_small_files_read_as_through_the_buffered_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    (tmp_path / "f.txt").write_bytes(data)
    roots = Roots([str(tmp_path)])
    for offset, limit in [(0, 0), (1, 1), (2, 0), (2, 1), (3, 0), (4, 2), (4000, 3), (5001, 0), (6000, 0)]:
        small, buffered = both(monkeypatch, roots, offset, limit)
        assert small == buffered, (offset, limit)


def test_a_file_past_the_size_is_left_at_its_start_for_the_buffered_reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # As a file that grew between its open (its size seen small) and its read.
    monkeypatch.setattr(files, "SMALL_READ_BYTES", 16)
    (tmp_path / "f.txt").write_bytes(b"0123456789\n" * 10)
    fd = os.open(tmp_path / "f.txt", os.O_RDONLY)
    try:
        assert files._read_small(fd) is None
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0
    finally:
        os.close(fd)
    (tmp_path / "g.txt").write_bytes(b"0123456789\n")
    fd = os.open(tmp_path / "g.txt", os.O_RDONLY)
    try:
        assert files._read_small(fd) == b"0123456789\n"
    finally:
        os.close(fd)
    r = read_file(Roots([str(tmp_path)]), "f.txt", 3, 2)
    assert (r.content, r.start_line, r.end_line, r.total_lines) == ("     3\t0123456789\n     4\t0123456789", 3, 4, 10)


def test_a_read_closes_what_it_opened(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("one\ntwo\n")
    (tmp_path / "b.bin").write_bytes(b"\x00\x01")
    roots = Roots([str(tmp_path)])
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        read_file(roots, "f.txt")
        with pytest.raises(ToolFailure):
            read_file(roots, "b.bin")
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("seed", range(20))
def test_a_window_with_a_line_too_long_is_always_measured(seed: int) -> None:
    rng = random.Random(seed)
    lengths = [rng.choice([0, 1, 5, 80, files._BLOCK - 1, files._BLOCK, 2 * files._BLOCK - 2, 2 * files._BLOCK - 1,
                           MAX_LINE_CHARS - 1, MAX_LINE_CHARS, MAX_LINE_CHARS + 1, MAX_LINE_CHARS + 2, 3 * MAX_LINE_CHARS])
               for _ in range(rng.randint(1, 12))]
    text = "\n".join("é" * n if rng.random() < 0.3 else "x" * n for n in lengths)
    for start in range(0, min(len(text), 2 * files._BLOCK + 3), 97):  # the lines at every offset against the blocks
        part = text[start:]
        if max(map(len, part.split("\n"))) > MAX_LINE_CHARS:
            assert files._may_hold_long_line(part), (lengths, start)
    assert not files._may_hold_long_line(("y" * (files._BLOCK - 1) + "\n") * 5)
