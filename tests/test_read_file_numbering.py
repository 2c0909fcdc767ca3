"""read_file numbers the lines of a chunk at once (one decode, one split, prefixes from a table,
one join); its results are byte for byte those of numbering each line alone, the way it was
done before, on the inputs where the two could part: CRLF and lone CRs, no last newline,
invalid UTF-8 next to newlines, lines around the cut length and longer than a chunk, windows
that end inside a chunk or at the end of the file, and line numbers past the prefix table."""

from __future__ import annotations

import io
import random
import threading
from pathlib import Path

import pytest

from osprey_sidecar import files
from osprey_sidecar.errors import ToolFailure
from osprey_sidecar.files import MAX_LINE_CHARS, read_file
from osprey_sidecar.paths import Roots


def per_line_window(fh: io.BufferedReader[io.FileIO], start: int, count: int) -> tuple[list[str], int, int]:
    """The window as it was read before: each line decoded, stripped, cut and numbered alone
    (returned in the pieces form read_file joins now)."""
    out: list[str] = []
    cut_lines = 0
    while len(out) < count:
        at = fh.tell()
        chunk = fh.read(files.READ_CHUNK_BYTES)
        if not chunk:
            break
        parts = chunk.split(b"\n")
        del parts[-1]
        if not parts:
            fh.seek(at)
            got = files._read_line(fh)
            if got is None:
                break
            line, dropped = got
            if dropped:
                line += f" [... line cut, {dropped} more characters]"
                cut_lines += 1
            out.append(f"{start + len(out):>6}\t{line}")
            continue
        del parts[count - len(out):]
        fh.seek(at + sum(map(len, parts)) + len(parts))
        for raw in parts:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + f" [... line cut, {len(line) - MAX_LINE_CHARS} more characters]"
                cut_lines += 1
            out.append(f"{start + len(out):>6}\t{line}")
    return ["\n" + "\n".join(out)] if out else [], len(out), cut_lines


def both(monkeypatch: pytest.MonkeyPatch, roots: Roots, offset: int, limit: int) -> tuple[object, object]:
    """(result now, result of the per-line window) of reading f.txt: each a tuple of every field,
    or the failure's message."""
    def outcome() -> object:
        try:
            r = read_file(roots, "f.txt", offset, limit)
        except ToolFailure as exc:
            return exc.message
        return (r.content, r.start_line, r.end_line, r.total_lines, r.more, r.long_lines_cut, r.total_lines_is_lower_bound)

    now = outcome()
    with monkeypatch.context() as m:
        m.setattr(files, "_read_window", per_line_window)
        before = outcome()
    return now, before


TRICKY = [
    b"", b"\r", b"\r\r", b"a\rb", b"plain text", b"caf\xc3\xa9", b"\xe2\x82", b"\xe2\x82\xac", b"\xf0\x9f", b"\xf0\x9f\x98\x80",
    b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\x80\x80", b"\t", b"  x  ", b"\xc3", b"\xe2",
]


def tricky_data(rng: random.Random, lines: int) -> bytes:
    out = []
    for _ in range(lines):
        kind = rng.random()
        if kind < 0.05:  # around the cut length, in characters and in bytes
            out.append(rng.choice([b"x", b"\xc3\xa9", b"\xe2\x82\xac"]) * rng.randint(MAX_LINE_CHARS - 2, MAX_LINE_CHARS + 3))
        elif kind < 0.07:
            out.append(b"y" * rng.randint(files.LINE_HEAD_BYTES - 3, files.LINE_HEAD_BYTES + 3) + b"\r" * rng.randint(0, 2))
        else:
            out.append(b"".join(rng.choice(TRICKY) for _ in range(rng.randint(0, 6))))
    return b"\n".join(out) + rng.choice([b"", b"\n", b"\r\n", b"\r", b"\xe2\x82", b"\n\n"])


@pytest.mark.parametrize("chunk", [files.READ_CHUNK_BYTES, 4096, 61])
@pytest.mark.parametrize("seed", range(6))
def test_windows_are_byte_identical_to_numbering_each_line_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, chunk: int) -> None:
    # Small chunks put chunk boundaries inside lines, characters and CRLFs, and make lines longer than a chunk.
    monkeypatch.setattr(files, "READ_CHUNK_BYTES", chunk)
    rng = random.Random(seed)
    data = tricky_data(rng, rng.randint(1, 400))
    (tmp_path / "f.txt").write_bytes(data)
    roots = Roots([str(tmp_path)])
    lines = data.count(b"\n") + 1
    windows = [(0, 0), (1, 1), (lines, 0), (lines, 5), (lines + 1, 0), (lines - 1, 2)]
    windows += [(rng.randint(0, lines + 2), rng.choice([0, 1, 2, rng.randint(1, lines + 3)])) for _ in range(12)]
    for offset, limit in windows:
        now, before = both(monkeypatch, roots, offset, limit)
        assert now == before, (offset, limit)


@pytest.mark.parametrize("data", [
    b"", b"\n", b"\n\n\n", b"no newline at all", b"one\r\ntwo\r\nthree\r\n", b"cr only\r", b"a\r\r\n\r\nb\r",
    b"bad \xe2\x82\nnext", b"ends inside a character \xf0\x9f", b"\xff\xfe\n\xed\xa0\x80\n\xc0\xaf",
    b"x" * MAX_LINE_CHARS + b"\n" + b"x" * (MAX_LINE_CHARS + 1) + b"\r\n" + "é".encode() * (MAX_LINE_CHARS + 7),
    b"x" * (3 * files.READ_CHUNK_BYTES) + b"\n" + b"short\n" + "é".encode() * files.READ_CHUNK_BYTES,
], ids=["empty", "newline", "newlines", "no-newline", "crlf", "cr-at-end", "crs", "cut-sequence", "ends-in-sequence",
        "invalid", "long-lines", "longer-than-a-chunk"])
def test_tricky_files_read_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    (tmp_path / "f.txt").write_bytes(data)
    roots = Roots([str(tmp_path)])
    for offset, limit in [(0, 0), (1, 1), (2, 0), (2, 1), (3, 0), (4, 2), (5, 0)]:
        now, before = both(monkeypatch, roots, offset, limit)
        assert now == before, (offset, limit)


def test_numbers_past_the_prefix_table_and_wider_than_six_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = files.PREFIX_TABLE_LINES + 10
    (tmp_path / "f.txt").write_bytes(b"".join(b"line %d\r\n" % i for i in range(1, lines + 1)))
    roots = Roots([str(tmp_path)])
    for offset, limit in [(files.PREFIX_TABLE_LINES - 3, 8), (files.PREFIX_TABLE_LINES + 1, 0), (lines, 0), (1, lines)]:
        now, before = both(monkeypatch, roots, offset, limit)
        assert now == before, (offset, limit)
    r = read_file(roots, "f.txt", files.PREFIX_TABLE_LINES, 2)
    assert r.content == f"{files.PREFIX_TABLE_LINES:>6}\tline {files.PREFIX_TABLE_LINES}\n{files.PREFIX_TABLE_LINES + 1:>6}\tline {files.PREFIX_TABLE_LINES + 1}"
    (tmp_path / "wide.txt").write_bytes(b"\n" * 1_000_000 + b"last")
    r = read_file(roots, "wide.txt", 999_999, 0)
    assert r.content == "999999\t\n1000000\t\n1000001\tlast"


def test_reads_growing_the_prefix_table_at_once_number_their_lines_right(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each thread's table is whole: none sees another's half-built one.
    monkeypatch.setattr(files, "_prefix_table", [])
    (tmp_path / "f.txt").write_bytes(b"".join(b"%d\n" % i for i in range(1, 12_001)))
    roots = Roots([str(tmp_path)])
    expected = {start: "\n".join(f"{n:>6}\t{n}" for n in range(start, min(start + 3000, 12_001))) for start in (1, 3001, 6001, 9001)}
    wrong: list[int] = []

    def reader(start: int) -> None:
        for _ in range(5):
            if read_file(roots, "f.txt", start, 3000).content != expected[start]:
                wrong.append(start)

    threads = [threading.Thread(target=reader, args=(start,)) for start in expected for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not wrong
    assert len(files._prefix_table) <= files.PREFIX_TABLE_LINES + 1
