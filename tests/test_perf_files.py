"""read_file, write_file and edit_file cost what they return, not what the file holds.

read_file reads only its window (and a bounded count after it), so a 200 MB file costs about
what a small one does, in the local dispatcher and in a lane (three at once within its 2g);
its results are those of reading the whole file, checked against that reference. A large
write_file streams in chunks through WriteFileStream with WriteFile's semantics; edit_file holds
one copy of the file.
"""

from __future__ import annotations

import asyncio
import os
import random
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from helpers import fails, write

from osprey.toolservice.client import ToolClient
from osprey.toolservice.homes import LocalDispatcher, open_tool_service
from osprey_sidecar import errors as E
from osprey_sidecar import files
from osprey_sidecar._proto import tools_pb2 as pb
from osprey_sidecar.errors import ToolFailure
from osprey_sidecar.files import COUNT_AHEAD_BYTES, DEFAULT_READ_LIMIT, MAX_LINE_CHARS, edit_file, read_file, write_file_chunks
from osprey_sidecar.paths import Roots
from osprey_sidecar.wire import WRITE_CHUNK_BYTES

MB = 1024 * 1024
HUGE = 200 * MB
# What a window of a huge file may add to the dispatcher's peak RSS (reading it whole took ~4x the file).
WINDOW_RSS_BOUND = 48 * MB


def make_huge(path: Path, size: int = HUGE, lines: int = 5000) -> None:
    """`lines` numbered text lines, then a hole up to `size` bytes: sparse, so quick to make, yet
    every byte of it is read back by whoever reads the file to its end."""
    with open(path, "wb") as fh:
        fh.write("".join(f"line {i}\n" for i in range(1, lines + 1)).encode())
        fh.truncate(size)


def vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture
async def local(workspace: Path) -> AsyncIterator[tuple[ToolClient, int]]:
    """A fresh local dispatcher (so its peak RSS is this test's) and its pid."""
    async with open_tool_service([str(workspace)]) as home:
        assert isinstance(home, LocalDispatcher) and home.proc is not None
        yield home.client, home.proc.pid


# --- read_file: the same results as reading the whole file ---------------------------------------


def reference_read(data: bytes, offset: int, limit: int) -> tuple[str, int, int, int, bool, int] | str:
    """read_file's result computed from the whole file, as it was before it read windows."""
    lines = data.decode("utf-8", "replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    total = len(lines)
    start = max(offset, 1)
    count = limit or DEFAULT_READ_LIMIT
    if total and start > total:
        return "past the end"
    chosen = lines[start - 1 : start - 1 + count]
    out, cut_lines = [], 0
    for number, line in enumerate(chosen, start):
        line = line.rstrip("\r")
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f" [... line cut, {len(line) - MAX_LINE_CHARS} more characters]"
            cut_lines += 1
        out.append(f"{number:>6}\t{line}")
    end = start + len(chosen) - 1 if chosen else 0
    return "\n".join(out), start if chosen else 0, end, total, end < total, cut_lines


def tricky_lines(rng: random.Random) -> Iterator[bytes]:
    pieces = [b"a", b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x90\x8d", b"\xff", b"\xe2\x82", b"\r", b"\t", b" "]
    for _ in range(60):
        kind = rng.random()
        if kind < 0.5:
            length = rng.randint(0, 30)
        elif kind < 0.8:
            length = rng.randint(MAX_LINE_CHARS - 3, MAX_LINE_CHARS * 5)
        else:
            length = rng.randint(files.LINE_HEAD_BYTES - 4, files.LINE_HEAD_BYTES + 4)
        line = b"".join(rng.choice(pieces) for _ in range(length))
        if rng.random() < 0.3:
            line += b"\r" * rng.randint(1, 3)
        yield line


@pytest.mark.parametrize("chunk", [files.READ_CHUNK_BYTES, 4096, 97])
@pytest.mark.parametrize("seed", range(4))
def test_windows_match_a_whole_file_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, chunk: int) -> None:
    # Small chunks put chunk boundaries inside lines, characters and CRLFs.
    monkeypatch.setattr(files, "READ_CHUNK_BYTES", chunk)
    rng = random.Random(seed)
    data = b"\n".join(tricky_lines(rng)) + rng.choice([b"", b"\n", b"\r\n", b"\r"])
    (tmp_path / "f.txt").write_bytes(data)
    roots = Roots([str(tmp_path)])
    for offset, limit in [(0, 0), (1, 5), (7, 3), (30, 100), (59, 0), (60, 1), (61, 1), (200, 0)]:
        expected = reference_read(data, offset, limit)
        if isinstance(expected, str):
            with pytest.raises(ToolFailure) as info:
                read_file(roots, "f.txt", offset, limit)
            assert info.value.category == E.INVALID_ARGUMENT
            continue
        r = read_file(roots, "f.txt", offset, limit)
        assert (r.content, r.start_line, r.end_line, r.total_lines, r.more, r.long_lines_cut) == expected, (offset, limit)
        assert not r.total_lines_is_lower_bound


def test_a_long_line_is_counted_not_held(tmp_path: Path) -> None:
    # One 20 MB line with multi-byte characters and trailing CRs: cut, with its exact length.
    body = "é" * (10 * MB)
    (tmp_path / "f.txt").write_bytes(b"first\n" + body.encode() + b"\r\r\n" + b"last")
    r = read_file(Roots([str(tmp_path)]), "f.txt")
    assert r.content == f"     1\tfirst\n     2\t{'é' * MAX_LINE_CHARS} [... line cut, {10 * MB - MAX_LINE_CHARS} more characters]\n     3\tlast"
    assert (r.total_lines, r.long_lines_cut, r.more, r.total_lines_is_lower_bound) == (3, 1, False, False)


def test_total_is_exact_within_the_count_ahead_and_a_lower_bound_past_it(tmp_path: Path) -> None:
    roots = Roots([str(tmp_path)])
    line = b"x" * 99 + b"\n"
    fits = (DEFAULT_READ_LIMIT * len(line) + COUNT_AHEAD_BYTES) // len(line)
    (tmp_path / "fits.txt").write_bytes(line * fits)
    r = read_file(roots, "fits.txt")
    assert (r.end_line, r.total_lines, r.more, r.total_lines_is_lower_bound) == (DEFAULT_READ_LIMIT, fits, True, False)
    (tmp_path / "past.txt").write_bytes(line * (fits + 1000))
    r = read_file(roots, "past.txt")
    assert (r.end_line, r.more, r.total_lines_is_lower_bound) == (DEFAULT_READ_LIMIT, True, True)
    assert DEFAULT_READ_LIMIT < r.total_lines <= fits + 1000
    # Read from further on, the end is within reach again: exact.
    r = read_file(roots, "past.txt", offset=fits - 10)
    assert (r.start_line, r.end_line, r.total_lines, r.more, r.total_lines_is_lower_bound) == (fits - 10, fits + 1000, fits + 1000, False, False)


def test_deep_offsets_and_the_end_of_a_large_file(tmp_path: Path) -> None:
    roots = Roots([str(tmp_path)])
    (tmp_path / "n.txt").write_bytes(b"".join(b"%d\n" % i for i in range(1, 1_000_001)) + b"tail")
    r = read_file(roots, "n.txt", offset=654_321, limit=3)
    assert r.content == "654321\t654321\n654322\t654322\n654323\t654323"
    r = read_file(roots, "n.txt", offset=1_000_001)
    assert r.content == "1000001\ttail" and (r.total_lines, r.more, r.total_lines_is_lower_bound) == (1_000_001, False, False)
    with pytest.raises(ToolFailure, match="which has 1000001 lines"):
        read_file(roots, "n.txt", offset=1_000_002)


async def test_the_tool_says_at_least_when_the_total_is_a_lower_bound(workspace: Path) -> None:
    from osprey.tools.base import Invocation, ToolContext
    from osprey.tools.builtin import ReadFileInput, _read_file

    make_huge(workspace / "huge.txt", size=64 * MB)
    async with open_tool_service([str(workspace)]) as home:
        call = Invocation(id="1", name="read_file", arguments={}, input=ReadFileInput(path="huge.txt", limit=2))
        text = await _read_file(call, ToolContext(client=home.client, cwd=str(workspace), roots=[str(workspace)], bash_max_output_bytes=0))
    assert isinstance(text, str) and text.startswith("     1\tline 1\n     2\tline 2\n[lines 1-2 of at least ")
    assert text.endswith("; call again with offset=3 to read on]")


# --- read_file: bounded in time and memory, in both homes ----------------------------------------


async def test_a_window_of_a_huge_file_costs_what_a_small_one_does(workspace: Path, local: tuple[ToolClient, int]) -> None:
    client, pid = local
    make_huge(workspace / "huge.txt")
    write(workspace / "small.txt", "".join(f"line {i}\n" for i in range(1, 5001)))
    small = await client.read_file("small.txt")
    before = vm_hwm(pid)
    huge = await client.read_file("huge.txt")
    assert vm_hwm(pid) - before < WINDOW_RSS_BOUND
    assert huge.content == small.content and (huge.start_line, huge.end_line, huge.more) == (1, 2000, True)
    assert huge.total_lines_is_lower_bound and huge.total_lines > 5000
    assert (small.total_lines, small.total_lines_is_lower_bound) == (5000, False)


async def test_concurrent_reads_of_huge_files_fit_the_home(tools: ToolClient, workspace: Path) -> None:
    # Three 200 MB files read at once: in a lane (2g) reading them whole was OOM-killed.
    for i in range(3):
        make_huge(workspace / f"huge{i}.txt")
    results = await asyncio.gather(*(tools.read_file(f"huge{i}.txt", offset=2001) for i in range(3)))
    for r in results:
        assert (r.start_line, r.end_line, r.more, r.total_lines_is_lower_bound) == (2001, 4000, True, True)
        assert r.content.startswith("  2001\tline 2001\n") and r.content.endswith("  4000\tline 4000")
    # The last line is the rest of the file, 200 MB long: read through, counted, never held.
    results = await asyncio.gather(*(tools.read_file(f"huge{i}.txt", offset=5000) for i in range(3)))
    hole = HUGE - len("".join(f"line {i}\n" for i in range(1, 5001)))
    for r in results:
        assert r.content == f"  5000\tline 5000\n  5001\t{chr(0) * MAX_LINE_CHARS} [... line cut, {hole - MAX_LINE_CHARS} more characters]"
        assert (r.total_lines, r.more, r.total_lines_is_lower_bound, r.long_lines_cut) == (5001, False, False, 1)
    # The service that answered is still the one serving (nothing was killed and replaced).
    assert (await tools.read_file("huge0.txt", limit=1)).content == "     1\tline 1"


# --- write_file: large content streams, with WriteFile's semantics --------------------------------


def mixed_text(size_chars: int) -> str:
    # Multi-byte characters land on every chunk boundary sooner or later.
    unit = "ascii line, é, €, 🐍\n"
    return (unit * (size_chars // len(unit) + 1))[:size_chars]


async def test_a_large_write_streams_and_keeps_the_results(tools: ToolClient, workspace: Path) -> None:
    content = mixed_text(3 * WRITE_CHUNK_BYTES + 12345)
    r = await tools.write_file("deep/new.txt", content)
    assert (workspace / "deep" / "new.txt").read_bytes() == content.encode()
    assert (r.created, r.bytes_written, r.resolved_path) == (True, len(content.encode()), os.path.realpath(workspace / "deep" / "new.txt"))
    os.chmod(workspace / "deep" / "new.txt", 0o640)
    r = await tools.write_file("deep/new.txt", content[::-1])
    assert not r.created and (workspace / "deep" / "new.txt").read_text() == content[::-1]
    assert stat.S_IMODE(os.stat(workspace / "deep" / "new.txt").st_mode) == 0o640
    assert sorted(os.listdir(workspace / "deep")) == ["new.txt"]  # no temporary file left
    (workspace / "adir").mkdir()
    await fails(tools.write_file("adir", content), "is_directory")
    await fails(tools.write_file("../outside.txt", content), "outside_root")


async def test_content_over_the_limit_is_refused_before_it_is_sent(tools: ToolClient, workspace: Path) -> None:
    from osprey_sidecar.wire import WRITE_MAX_BYTES

    await fails(tools.write_file("big.txt", "x" * (WRITE_MAX_BYTES + 1)), "invalid_argument")
    assert not (workspace / "big.txt").exists()


async def test_content_that_cannot_be_encoded_writes_nothing(workspace: Path, local: tuple[ToolClient, int]) -> None:
    # As with one WriteFile message, a lone surrogate is the caller's invalid_argument; the
    # stream it cut short leaves the file as it was.
    client, _ = local
    write(workspace / "f.txt", "before\n")
    await fails(client.write_file("f.txt", "x" * (2 * WRITE_CHUNK_BYTES) + "\ud800" + "y" * 10), "invalid_argument")
    assert os.listdir(workspace) == ["f.txt"] and (workspace / "f.txt").read_text() == "before\n"
    assert (await client.write_file("f.txt", "after\n" * WRITE_CHUNK_BYTES)).bytes_written == 6 * WRITE_CHUNK_BYTES


def test_chunks_over_the_limit_or_not_utf8_leave_the_file_as_it_was(tmp_path: Path) -> None:
    roots = Roots([str(tmp_path)])
    (tmp_path / "f.txt").write_text("before\n")
    with pytest.raises(ToolFailure, match="limit") as info:
        write_file_chunks(roots, "f.txt", [b"x" * 600, b"x" * 600], max_bytes=1000)
    assert info.value.category == E.INVALID_ARGUMENT
    for chunks in ([b"ok", b"\xff"], [b"ends inside \xe2\x82"]):
        with pytest.raises(ToolFailure, match="UTF-8"):
            write_file_chunks(roots, "f.txt", chunks)
    # A character split across chunks is fine.
    assert (tmp_path / "f.txt").read_text() == "before\n" and os.listdir(tmp_path) == ["f.txt"]
    write_file_chunks(roots, "g.txt", [b"caf\xc3", b"\xa9\n"])
    assert (tmp_path / "g.txt").read_text() == "café\n"


async def test_a_stream_cut_short_leaves_the_file_as_it_was(workspace: Path, local: tuple[ToolClient, int]) -> None:
    client, _ = local
    write(workspace / "f.txt", "before\n")
    connection = client.connection
    assert connection is not None
    sent = asyncio.Event()

    async def chunks() -> AsyncIterator[pb.WriteFileChunk]:
        yield pb.WriteFileChunk(path="f.txt", data=b"partial " * 1000)
        sent.set()
        await asyncio.sleep(60)

    call = connection.stub.WriteFileStream(chunks(), metadata=connection.metadata, timeout=30)
    await sent.wait()
    await asyncio.sleep(0.3)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    for _ in range(50):
        if os.listdir(workspace) == ["f.txt"]:
            break
        await asyncio.sleep(0.05)
    assert os.listdir(workspace) == ["f.txt"] and (workspace / "f.txt").read_text() == "before\n"
    assert (await client.read_file("f.txt")).content == "     1\tbefore"


async def test_a_stream_must_name_its_path_first(workspace: Path, local: tuple[ToolClient, int]) -> None:
    client, _ = local
    connection = client.connection
    assert connection is not None
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await connection.stub.WriteFileStream(iter([pb.WriteFileChunk(data=b"x", last=True)]), metadata=connection.metadata)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # A stream that ends without its last chunk was cut short: nothing is written.
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await connection.stub.WriteFileStream(iter([pb.WriteFileChunk(path="f.txt", data=b"x")]), metadata=connection.metadata)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "last chunk" in (info.value.details() or "")
    assert os.listdir(workspace) == []


# --- edit_file: one copy of the file --------------------------------------------------------------


def test_edit_matches_on_bytes_as_it_did_on_text(tmp_path: Path) -> None:
    roots = Roots([str(tmp_path)])
    (tmp_path / "f.txt").write_bytes("€uro\ncafé €\n\xff bad byte €\n".encode("utf-8", "surrogateescape").replace(b"?", b"") + b"\xff\xe2\x82\n")
    r = edit_file(roots, "f.txt", "€", "EUR", replace_all=True)
    assert (r.replacements, r.first_line) == (3, 1)
    assert (tmp_path / "f.txt").read_bytes() == "EURuro\ncafé EUR\n\xff bad byte EUR\n".encode() + b"\xff\xe2\x82\n"
    with pytest.raises(ToolFailure) as info:
        edit_file(roots, "f.txt", "EUR", "x")
    assert info.value.category == E.AMBIGUOUS_MATCH and "3 times" in info.value.message
    # A needle carrying an escaped byte (\udc82) must not match inside a character (€ is E2 82 AC).
    (tmp_path / "g.txt").write_bytes(b"\xe2\x82\xac and a lone \x82 byte\n")
    r = edit_file(roots, "g.txt", "\udc82 byte", "byte")
    assert (r.replacements, r.first_line) == (1, 1)
    assert (tmp_path / "g.txt").read_bytes() == b"\xe2\x82\xac and a lone byte\n"


async def test_editing_a_large_file_holds_about_one_copy(workspace: Path, local: tuple[ToolClient, int]) -> None:
    client, pid = local
    size = 96 * MB
    with open(workspace / "big.txt", "wb") as fh:
        block = b"".join(b"row %d of a large file\n" % i for i in range(40000))
        while fh.tell() < size:
            fh.write(block)
        fh.write(b"THE END\n")
    total = os.path.getsize(workspace / "big.txt")
    await client.read_file("big.txt", limit=1)
    before = vm_hwm(pid)
    r = await client.edit_file("big.txt", "THE END", "the end")
    # Decoding, replacing and re-encoding held four copies or more; bytes and views hold one.
    assert vm_hwm(pid) - before < 1.5 * total
    assert r.replacements == 1
    with open(workspace / "big.txt", "rb") as fh:
        fh.seek(total - 8)
        assert fh.read() == b"the end\n"
    assert os.path.getsize(workspace / "big.txt") == total
