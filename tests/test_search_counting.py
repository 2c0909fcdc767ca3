"""How ripgrep's output is counted past the returned matches: in bulk, exactly, up to the limit.

The parsers are fed real-shaped output in pieces of every size, so a count that depends on
where a piece ends, or a line past the returned ones parsed one by one, shows here."""

from __future__ import annotations

import math
import os
import random
from pathlib import Path

import pytest

from osprey_sidecar import search
from osprey_sidecar.search import _after_lines, _FilesOutput, _RgOutput


def _rg_lines(files: int, per_file: int) -> bytes:
    """`rg --null --line-number --byte-offset` output: `per_file` matching lines in each file."""
    out = bytearray()
    for f in range(files):
        offset = 0
        for n in range(1, per_file + 1):
            text = b"the quick brown fox %d" % n
            out += b"./d/f%04d.txt\x00%d:%d:%s\n" % (f, n, offset, text)
            offset += len(text) + 1
    return bytes(out)


class _Counted(_RgOutput):
    """An _RgOutput that counts the lines it parses one by one."""

    parsed = 0

    def _line(self, line: bytes) -> bool:
        self.parsed += 1
        return super()._line(line)


def _feed(out: _RgOutput | _FilesOutput, data: bytes, piece: int) -> bool:
    for at in range(0, len(data), piece):
        if out.feed(data[at : at + piece]):
            return True
    return False


@pytest.mark.parametrize("lines", [1, 2, 63, 64, 65, 1000, 9_999, 10_000])
def test_after_lines_finds_the_end_of_the_nth_line(lines: int) -> None:
    rng = random.Random(lines)
    data = b"".join(b"x" * rng.randrange(0, 90) + b"\n" for _ in range(lines + 50))
    start = 3 if data[:3].count(b"\n") == 0 else 0
    expected = start
    for _ in range(lines):
        expected = data.index(b"\n", expected) + 1
    assert _after_lines(data, start, len(data), lines) == expected


@pytest.mark.parametrize("piece", [1 << 20, 65_536, 4_096, 997])
@pytest.mark.parametrize("keep", [1, 5, 500])
def test_lines_past_the_returned_ones_are_counted_in_bulk_up_to_the_limit(tmp_path: Path, piece: int, keep: int) -> None:
    text = tmp_path / "text.txt"
    text.write_bytes(b"plain text, no NUL byte\n")
    output = _rg_lines(files=30, per_file=1_000)

    def walked(rel: str) -> int:
        return os.open(text, os.O_RDONLY)

    out = _Counted(keep, 10_000, deadline=float("inf"))
    out.walked = walked
    assert _feed(out, output, piece) is True
    # The same output parsed line by line, as before any counting in bulk.
    reference = _RgOutput(keep, 10_000, deadline=float("inf"))
    reference.walked = walked
    assert any(reference._line(line) for line in output.splitlines())
    assert out.total == reference.total == 10_000
    assert out.kept == reference.kept
    assert len(out.kept) == keep
    # Past the returned lines, only the line that reaches the limit and those where a piece
    # ends mid-line are parsed one by one, not every line up to the limit.
    assert out.parsed <= keep + 2 + 2 * math.ceil(len(output[: 10_000 * len(output) // 30_000]) / piece)


@pytest.mark.parametrize("piece", [1 << 20, 4_096])
def test_a_nul_in_the_file_that_reaches_the_limit_still_drops_it(tmp_path: Path, piece: int) -> None:
    binary = tmp_path / "binary.bin"
    binary.write_bytes(b"text\x00more\n")
    out = _RgOutput(5, 10_000, deadline=float("inf"))
    out.walked = lambda rel: os.open(binary, os.O_RDONLY)
    assert _feed(out, _rg_lines(files=30, per_file=1_000), piece) is False
    out.finish()
    # The tenth file holds the 10,000th line and is binary: its lines are not counted. In each
    # file after it the limit is reached again at its last line, and it is binary too.
    assert len(out.kept) == 5
    assert out.total == 9_000


@pytest.mark.parametrize("piece", [1 << 20, 4_096, 333, 7])
def test_find_files_counts_every_path_past_the_kept_ones(piece: int) -> None:
    names = b"".join(b"./d%03d/f%05d.txt\x00" % (i // 100, i) for i in range(12_345))
    out = _FilesOutput(1_000, 10_000, None)
    _feed(out, names, piece)
    assert out.total == 10_000
    assert out.kept == [f"d{i // 100:03d}/f{i:05d}.txt" for i in range(1_000)]
    below = _FilesOutput(1_000, 20_000, None)
    assert _feed(below, names, piece) is False
    assert below.total == 12_345
    assert not below.unparsable


def test_find_files_refuses_a_name_longer_than_a_path_while_only_counting() -> None:
    out = _FilesOutput(1, 10_000, None)
    out.feed(b"./a\x00./b\x00")
    out.feed(b"./" + b"x" * (3 * search.PATH_MAX_BYTES))
    assert out.unparsable


def _mixed_output(seed: int) -> bytes:
    """Output over files of 1 to 400 matching lines, some of them followed by ripgrep's binary-file
    message (a NUL further on in the file), in path order."""
    rng = random.Random(seed)
    out = bytearray()
    for f in range(rng.randrange(40, 120)):
        offset = 0
        for n in range(1, rng.choice([1, 2, 3, 20, 400]) + 1):
            text = b"hit %d" % n + b"x" * rng.randrange(0, 60)
            out += b"./d%d/f%04d.txt\x00%d:%d:%s\n" % (f % 7, f, n, offset, text)
            offset += len(text) + 1
        if rng.random() < 0.2:
            message = rng.choice(search._RG_BINARY_MESSAGES)
            out += b"./d%d/f%04d.txt%sfound \"\\0\" byte around offset 9)\n" % (f % 7, f, message)
    return bytes(out)


@pytest.mark.parametrize("seed", range(12))
def test_bulk_counting_agrees_with_parsing_every_line_around_binary_files(tmp_path: Path, seed: int) -> None:
    text = tmp_path / "text.txt"
    text.write_bytes(b"plain text, no NUL byte\n")
    output = _mixed_output(seed)
    rng = random.Random(seed)
    for limit in (10_000, rng.randrange(50, output.count(b"\n"))):
        reference = _RgOutput(20, limit, deadline=float("inf"))
        reference.walked = lambda rel: os.open(text, os.O_RDONLY)
        done = any(reference._line(line) for line in output.splitlines())
        if not done:
            reference.finish()
        for piece in (1 << 20, 65_536, 4_096, rng.randrange(100, 3_000)):
            out = _RgOutput(20, limit, deadline=float("inf"))
            out.walked = lambda rel: os.open(text, os.O_RDONLY)
            assert _feed(out, output, piece) is done, (limit, piece)
            if not done:
                out.finish()
            assert (out.total, out.kept) == (reference.total, reference.kept), (limit, piece)


def test_a_run_of_one_file_is_found_by_halving() -> None:
    lines = [b"./a\x00", b"./a\x00", b"./b\x00", *[b"./c\x00"] * 7, b"./d\x00"]
    data = b"".join(line + b"1:0:x\n" for line in lines)
    starts = [sum(len(line) + 6 for line in lines[:i]) for i in range(len(lines))]
    assert search._run_start(data, 0, starts[9], b"./c\x00") == starts[3]
    assert search._run_start(data, 0, starts[2], b"./b\x00") == starts[2]
    assert search._run_start(data, 0, starts[1], b"./a\x00") == 0
    assert search._run_start(data, starts[5], starts[9], b"./c\x00") == starts[5]
    assert search._run_end(data, 0, starts[2], b"./a\x00") == starts[2]
    assert search._run_end(data, starts[3], starts[10], b"./c\x00") == starts[10]
    assert search._run_end(data, starts[2], starts[3], b"./b\x00") == starts[3]
