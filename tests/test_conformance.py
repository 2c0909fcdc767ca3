"""The ToolService conformance suite: the eight sandboxed tools, through `ToolClient` only.

Every test runs once per ToolService home (the `tools` fixture). Tests prepare
files in `workspace` and inspect results there, but they never look at the
servicer's side otherwise: processes are observed through `tools.bash` itself,
so the suite runs unchanged against a lane whose processes live in another pid
namespace. Paths outside the workspace are only ever named, never needed inside
the home (a lane does not have them).
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from helpers import CALL_BOUND_S, fails, process_state, read_pid, wait_gone, write
from homes import HOMES, remote_home

from osprey.toolservice.client import ToolClient, dropped_marker

# --- helpers ------------------------------------------------------------------------------------


def numbered(content: str) -> list[tuple[int, str]]:
    """read_file's content as (line number, text) pairs."""
    if content == "":
        return []
    out = []
    for line in content.split("\n"):
        m = re.fullmatch(r" *(\d+)\t(.*)", line, re.DOTALL)
        assert m, f"not a numbered line: {line!r}"
        out.append((int(m.group(1)), m.group(2)))
    return out


def bpath(root: Path, name: bytes) -> bytes:
    return os.path.join(os.fsencode(root), name)


def real(path: Path) -> str:
    return os.path.realpath(path)


@pytest.fixture(params=[*sorted(HOMES), "remote"])
def tool_home(request: pytest.FixtureRequest) -> str:
    """Each home in turn, and a lane on another machine's engine (the tests' second engine)."""
    return request.param


@pytest.fixture
async def tools(tool_home: str, workspace: Path, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ToolClient]:
    if tool_home != "remote":
        async with HOMES[tool_home]([str(workspace)]) as home:
            yield home.client
        return
    (tmp_path / "broker-home").mkdir()
    async with remote_home([str(workspace)], request.getfixturevalue("remote_engine"), tmp_path / "broker-home") as client:
        yield client  # type: ignore[misc]


@pytest.fixture
def outside(workspace: Path) -> Path:
    """A directory beside the workspace, outside the allowed roots."""
    out = workspace.parent / "outside"
    write(out / "secret.txt", "secret needle\n")
    return out


@pytest.fixture
def escapes(workspace: Path, outside: Path) -> Path:
    """Symlinks in the workspace leading out of it, and one staying inside."""
    (workspace / "file-out").symlink_to(outside / "secret.txt")
    (workspace / "dir-out").symlink_to(outside, target_is_directory=True)
    (workspace / "dangling-out").symlink_to(outside / "missing.txt")
    (workspace / "chain-1").symlink_to(workspace / "chain-2")
    (workspace / "chain-2").symlink_to(outside / "secret.txt")
    (workspace / "rel-out").symlink_to(os.path.join("..", "outside", "secret.txt"))
    write(workspace / "inside.txt", "inside\n")
    return outside


ESCAPING_PATHS = [
    "../outside/secret.txt",
    "sub/../../outside/secret.txt",
    "./../outside/secret.txt",
    "file-out",
    "dir-out/secret.txt",
    "chain-1",
    "rel-out",
]


# --- read_file ----------------------------------------------------------------------------------


async def test_read_file_numbers_lines(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "a.txt", "".join(f"line {i}\n" for i in range(1, 11)))
    r = await tools.read_file("a.txt")
    assert numbered(r.content) == [(i, f"line {i}") for i in range(1, 11)]
    assert (r.start_line, r.end_line, r.total_lines, r.more, r.long_lines_cut) == (1, 10, 10, False, 0)
    assert r.resolved_path == real(workspace / "a.txt")
    assert r.content.split("\n")[0] == "     1\tline 1"


async def test_read_file_offset_and_limit(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "a.txt", "".join(f"line {i}\n" for i in range(1, 11)))
    r = await tools.read_file("a.txt", offset=3, limit=4)
    assert numbered(r.content) == [(i, f"line {i}") for i in range(3, 7)]
    assert (r.start_line, r.end_line, r.total_lines, r.more) == (3, 6, 10, True)
    r = await tools.read_file("a.txt", offset=8)
    assert [n for n, _ in numbered(r.content)] == [8, 9, 10]
    assert not r.more
    r = await tools.read_file("a.txt", offset=10, limit=5)
    assert numbered(r.content) == [(10, "line 10")]
    assert (r.start_line, r.end_line, r.more) == (10, 10, False)
    r = await tools.read_file("a.txt", limit=10)
    assert (r.end_line, r.more) == (10, False)
    r = await tools.read_file("a.txt", limit=9)
    assert (r.end_line, r.more) == (9, True)
    await fails(tools.read_file("a.txt", offset=11), "invalid_argument")
    await fails(tools.read_file("a.txt", offset=-1), "invalid_argument")
    await fails(tools.read_file("a.txt", limit=-1), "invalid_argument")


async def test_read_file_default_limit(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "big.txt", "".join(f"{i}\n" for i in range(1, 2501)))
    r = await tools.read_file("big.txt")
    assert (r.start_line, r.end_line, r.total_lines, r.more) == (1, 2000, 2500, True)
    r = await tools.read_file("big.txt", offset=2001)
    assert (r.start_line, r.end_line, r.more) == (2001, 2500, False)


async def test_read_file_empty_and_unterminated(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "empty.txt", "")
    r = await tools.read_file("empty.txt")
    assert (r.content, r.total_lines, r.more, r.start_line, r.end_line) == ("", 0, False, 0, 0)
    r = await tools.read_file("empty.txt", offset=1)
    assert r.content == ""
    write(workspace / "no-newline.txt", "a\nb")
    r = await tools.read_file("no-newline.txt")
    assert numbered(r.content) == [(1, "a"), (2, "b")]
    write(workspace / "blank-lines.txt", "\n\nx\n\n")
    r = await tools.read_file("blank-lines.txt")
    assert numbered(r.content) == [(1, ""), (2, ""), (3, "x"), (4, "")]


async def test_read_file_line_endings_agree_with_grep(tools: ToolClient, workspace: Path) -> None:
    # Lines end at \n (a CR before it is dropped); form feeds and Unicode separators are text.
    write(workspace / "crlf.txt", b"one\r\ntwo\r\n")
    assert numbered((await tools.read_file("crlf.txt")).content) == [(1, "one"), (2, "two")]
    write(workspace / "odd.txt", "a\x0cb\nc\u2028d\ne\x85f\ng\x1ch\nneedle\n")
    r = await tools.read_file("odd.txt")
    assert r.total_lines == 5
    g = await tools.grep("needle", "odd.txt")
    assert [m.line for m in g.matches] == [5]
    assert numbered((await tools.read_file("odd.txt", offset=5, limit=1)).content) == [(5, "needle")]


async def test_read_file_long_lines_are_cut(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "long.txt", "short\n" + "x" * 5000 + "\n" + "y" * 2000 + "\n")
    r = await tools.read_file("long.txt")
    lines = numbered(r.content)
    assert r.long_lines_cut == 1
    assert lines[0] == (1, "short")
    assert lines[1][1].startswith("x" * 2000)
    assert not lines[1][1].startswith("x" * 2001)
    assert "3000" in lines[1][1]  # how much was cut
    assert lines[2] == (3, "y" * 2000)


async def test_read_file_non_utf8_content(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "latin1.txt", b"caf\xe9\n")
    r = await tools.read_file("latin1.txt")
    assert numbered(r.content) == [(1, "caf\ufffd")]


async def test_read_file_refuses_binary(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "blob.bin", b"\x7fELF\x00\x01\x02\x03" * 100)
    await fails(tools.read_file("blob.bin"), "binary_file")
    write(workspace / "nul-late.bin", b"text\n" * 100 + b"\x00")
    await fails(tools.read_file("nul-late.bin"), "binary_file")


async def test_read_file_bad_paths(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "f.txt", "x\n")
    (workspace / "d").mkdir()
    await fails(tools.read_file("missing.txt"), "not_found")
    await fails(tools.read_file("nodir/missing.txt"), "not_found")
    await fails(tools.read_file("d"), "is_directory")
    await fails(tools.read_file("."), "is_directory")
    await fails(tools.read_file("f.txt/x"), "not_a_directory")
    await fails(tools.read_file(""), "invalid_argument")
    await fails(tools.read_file("f.txt\x00x"), "invalid_argument")


async def test_read_file_refuses_a_fifo_without_blocking(tools: ToolClient, workspace: Path) -> None:
    os.mkfifo(workspace / "fifo")
    await fails(tools.read_file("fifo"), "invalid_argument")


async def test_read_file_absolute_path_inside(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "sub" / "a.txt", "abs\n")
    r = await tools.read_file(str(workspace / "sub" / "a.txt"))
    assert numbered(r.content) == [(1, "abs")]
    r = await tools.read_file("sub/../sub/./a.txt")
    assert r.resolved_path == real(workspace / "sub" / "a.txt")


async def test_read_file_permission_denied(tools: ToolClient, workspace: Path) -> None:
    if (await tools.bash("id -u")).output.strip() == "0":
        pytest.skip("the home runs as root, which can read anything")
    write(workspace / "locked.txt", "x\n").chmod(0)
    await fails(tools.read_file("locked.txt"), "permission_denied")


# --- paths: the allowed root ----------------------------------------------------------------


@pytest.mark.parametrize("path", ESCAPING_PATHS)
async def test_escaping_paths_are_refused_by_read(tools: ToolClient, escapes: Path, path: str) -> None:
    await fails(tools.read_file(path), "outside_root")


async def test_absolute_paths_outside_are_refused(tools: ToolClient, escapes: Path) -> None:
    await fails(tools.read_file(str(escapes / "secret.txt")), "outside_root")
    await fails(tools.read_file("/etc/passwd"), "outside_root")
    await fails(tools.read_file("/"), "outside_root")
    await fails(tools.list_directory("/"), "outside_root")
    await fails(tools.list_directory(".."), "outside_root")
    await fails(tools.tree(".."), "outside_root")
    await fails(tools.find_files("*", "/"), "outside_root")
    await fails(tools.grep("root", "/etc"), "outside_root")


async def test_a_sibling_with_the_root_as_prefix_is_outside(tools: ToolClient, workspace: Path) -> None:
    sibling = workspace.parent / (workspace.name + "-evil")
    write(sibling / "x.txt", "x\n")
    await fails(tools.read_file(str(sibling / "x.txt")), "outside_root")
    await fails(tools.read_file(f"../{sibling.name}/x.txt"), "outside_root")


async def test_escaping_symlinks_are_refused_by_every_tool(tools: ToolClient, workspace: Path, escapes: Path) -> None:
    before = (escapes / "secret.txt").read_text()
    for path in ("file-out", "chain-1", "dangling-out", "dir-out/new.txt", "dir-out/sub/new.txt", "../outside/new.txt"):
        await fails(tools.write_file(path, "pwned\n"), "outside_root")
    await fails(tools.edit_file("file-out", "secret", "pwned"), "outside_root")
    await fails(tools.edit_file("dir-out/secret.txt", "secret", "pwned"), "outside_root")
    await fails(tools.list_directory("dir-out"), "outside_root")
    await fails(tools.tree("dir-out"), "outside_root")
    await fails(tools.find_files("*", "dir-out"), "outside_root")
    await fails(tools.grep("secret", "dir-out"), "outside_root")
    await fails(tools.grep("secret", "file-out"), "outside_root")
    await fails(tools.bash("pwd", workdir="dir-out"), "outside_root")
    await fails(tools.bash("pwd", workdir=".."), "outside_root")
    assert (escapes / "secret.txt").read_text() == before
    assert sorted(os.listdir(escapes)) == ["secret.txt"]
    assert (workspace / "file-out").is_symlink() and (workspace / "dangling-out").is_symlink()


async def test_searches_do_not_follow_symlinks_out(tools: ToolClient, workspace: Path, escapes: Path) -> None:
    assert (await tools.grep("secret")).matches == []
    found = (await tools.find_files("*")).paths
    assert "inside.txt" in found
    assert not [p for p in found if "secret" in p or p.startswith("dir-out")]
    assert "secret" not in (await tools.tree()).rendered


async def test_symlinks_staying_inside_are_allowed(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "real" / "target.txt", "target\n")
    (workspace / "link.txt").symlink_to(workspace / "real" / "target.txt")
    (workspace / "rel-link.txt").symlink_to(os.path.join("real", "target.txt"))
    (workspace / "dir-link").symlink_to(workspace / "real", target_is_directory=True)
    for path in ("link.txt", "rel-link.txt", "dir-link/target.txt", "real/../link.txt"):
        r = await tools.read_file(path)
        assert numbered(r.content) == [(1, "target")]
        assert r.resolved_path == real(workspace / "real" / "target.txt")
    listing = await tools.list_directory("dir-link")
    assert [e.name for e in listing.entries] == ["target.txt"]
    assert listing.resolved_path == real(workspace / "real")
    out = await tools.bash("pwd -P", workdir="dir-link")
    assert out.output == real(workspace / "real") + "\n"
    assert (await tools.find_files("*.txt", "dir-link")).paths == ["real/target.txt"]
    # Writing through a link updates its target and keeps the link.
    w = await tools.write_file("link.txt", "new\n")
    assert w.resolved_path == real(workspace / "real" / "target.txt")
    assert not w.created
    assert (workspace / "link.txt").is_symlink()
    assert (workspace / "real" / "target.txt").read_text() == "new\n"
    await tools.edit_file("rel-link.txt", "new", "newer")
    assert (workspace / "rel-link.txt").is_symlink()
    assert (workspace / "real" / "target.txt").read_text() == "newer\n"


# --- write_file ---------------------------------------------------------------------------------


async def test_write_file_creates_with_parents(tools: ToolClient, workspace: Path) -> None:
    r = await tools.write_file("a/b/c/new.txt", "héllo\n")
    assert r.created
    assert r.bytes_written == len("héllo\n".encode())
    assert r.resolved_path == real(workspace / "a" / "b" / "c" / "new.txt")
    assert (workspace / "a" / "b" / "c" / "new.txt").read_bytes() == "héllo\n".encode()
    r = await tools.write_file("a/b/c/new.txt", "second\n")
    assert not r.created
    assert (workspace / "a" / "b" / "c" / "new.txt").read_text() == "second\n"
    r = await tools.write_file(str(workspace / "abs.txt"), "")
    assert r.created and r.bytes_written == 0
    assert (workspace / "abs.txt").read_bytes() == b""


async def test_write_file_replaces_atomically_and_keeps_mode(tools: ToolClient, workspace: Path) -> None:
    target = write(workspace / "d" / "script.sh", "#!/bin/sh\necho old\n")
    target.chmod(0o751)
    write(workspace / "d" / "other.txt", "other\n").chmod(0o604)
    original = os.open(target, os.O_RDONLY)  # held open, so its inode cannot be reused
    for i in range(5):
        await tools.write_file("d/script.sh", f"#!/bin/sh\necho {i}\n")
    await tools.write_file("d/other.txt", "changed\n")
    assert sorted(os.listdir(workspace / "d")) == ["other.txt", "script.sh"]  # no temp files left
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert stat.S_IMODE((workspace / "d" / "other.txt").stat().st_mode) == 0o604
    assert target.read_text() == "#!/bin/sh\necho 4\n"
    try:
        # Replaced by rename, not rewritten in place: the original is unlinked and unchanged.
        assert os.fstat(original).st_nlink == 0
        assert os.pread(original, 100, 0) == b"#!/bin/sh\necho old\n"
    finally:
        os.close(original)
    assert (await tools.bash("./script.sh", workdir="d")).output == "4\n"


async def test_write_file_new_file_mode(tools: ToolClient, workspace: Path) -> None:
    await tools.write_file("new.txt", "x")
    mode = stat.S_IMODE((workspace / "new.txt").stat().st_mode)
    assert mode & 0o600 == 0o600
    assert mode & 0o111 == 0, "a new file is not executable"
    assert sorted(os.listdir(workspace)) == ["new.txt"]


async def test_write_file_bad_targets(tools: ToolClient, workspace: Path) -> None:
    (workspace / "dir").mkdir()
    write(workspace / "file.txt", "x\n")
    await fails(tools.write_file("dir", "x"), "is_directory")
    await fails(tools.write_file(".", "x"), "is_directory")
    await fails(tools.write_file("", "x"), "invalid_argument")
    await fails(tools.write_file("file.txt/child.txt", "x"), "not_a_directory")
    await fails(tools.write_file("file.txt/deeper/child.txt", "x"), "not_a_directory")
    assert (workspace / "file.txt").read_text() == "x\n"
    assert sorted(os.listdir(workspace)) == ["dir", "file.txt"]


# --- edit_file ----------------------------------------------------------------------------------


async def test_edit_file_replaces_one_occurrence(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "a.py", "def f():\n    return 1\n\ndef g():\n    return 2\n")
    r = await tools.edit_file("a.py", "return 2", "return 3")
    assert (r.replacements, r.first_line) == (1, 5)
    assert r.resolved_path == real(workspace / "a.py")
    assert (workspace / "a.py").read_text() == "def f():\n    return 1\n\ndef g():\n    return 3\n"
    r = await tools.edit_file("a.py", "def f():\n    return 1\n", "")
    assert (r.replacements, r.first_line) == (1, 1)
    assert (workspace / "a.py").read_text() == "\ndef g():\n    return 3\n"


async def test_edit_file_match_errors(tools: ToolClient, workspace: Path) -> None:
    original = "x = 1\nx = 1\ny = 2\n"
    write(workspace / "a.txt", original)
    await fails(tools.edit_file("a.txt", "z = 3", "z = 4"), "no_match")
    await fails(tools.edit_file("a.txt", "x = 1 ", "x = 2"), "no_match")  # whitespace counts
    e = await fails(tools.edit_file("a.txt", "x = 1", "x = 2"), "ambiguous_match")
    assert "2" in str(e)
    await fails(tools.edit_file("a.txt", "x = 1", "x = 1"), "invalid_argument")
    await fails(tools.edit_file("a.txt", "", "x"), "invalid_argument")
    assert (workspace / "a.txt").read_text() == original


async def test_edit_file_replace_all(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "a.txt", "keep\nfoo foo\nbar\nfoo\n")
    r = await tools.edit_file("a.txt", "foo", "baz", replace_all=True)
    assert (r.replacements, r.first_line) == (3, 2)
    assert (workspace / "a.txt").read_text() == "keep\nbaz baz\nbar\nbaz\n"
    r = await tools.edit_file("a.txt", "bar", "qux", replace_all=True)
    assert r.replacements == 1
    await fails(tools.edit_file("a.txt", "foo", "x", replace_all=True), "no_match")


async def test_edit_file_keeps_mode_bytes_and_leaves_no_temp(tools: ToolClient, workspace: Path) -> None:
    target = write(workspace / "d" / "data.txt", b"caf\xe9 \r\nold value\r\n\xff\xfe end\n")
    target.chmod(0o640)
    await tools.edit_file("d/data.txt", "old value", "new value")
    assert target.read_bytes() == b"caf\xe9 \r\nnew value\r\n\xff\xfe end\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert os.listdir(workspace / "d") == ["data.txt"]


async def test_edit_file_bad_targets(tools: ToolClient, workspace: Path) -> None:
    (workspace / "dir").mkdir()
    write(workspace / "blob.bin", b"abc\x00def")
    await fails(tools.edit_file("missing.txt", "a", "b"), "not_found")
    await fails(tools.edit_file("dir", "a", "b"), "is_directory")
    await fails(tools.edit_file("blob.bin", "abc", "xyz"), "binary_file")
    assert (workspace / "blob.bin").read_bytes() == b"abc\x00def"


# --- bash ---------------------------------------------------------------------------------------


async def test_bash_output_and_exit_codes(tools: ToolClient) -> None:
    r = await tools.bash("echo hello")
    assert (r.output, r.exit_code, r.signal, r.timed_out, r.dropped_bytes, r.killed_background) == ("hello\n", 0, 0, False, 0, False)
    assert (await tools.bash("exit 3")).exit_code == 3
    assert (await tools.bash("false")).exit_code == 1
    assert (await tools.bash("exit 255")).exit_code == 255
    assert (await tools.bash("echo partial; exit 7")).output == "partial\n"
    killed = await tools.bash("echo before; kill -KILL $$")
    assert (killed.exit_code, killed.signal, killed.output) == (-1, 9, "before\n")
    assert (await tools.bash("printf 'no newline'")).output == "no newline"
    assert (await tools.bash("true")).output == ""


async def test_bash_interleaves_stderr(tools: ToolClient) -> None:
    r = await tools.bash("echo out1; echo err1 >&2; echo out2; echo err2 1>&2; echo out3")
    assert r.output == "out1\nerr1\nout2\nerr2\nout3\n"


async def test_bash_non_utf8_output(tools: ToolClient) -> None:
    r = await tools.bash("printf 'caf\\xe9\\n'")
    assert r.output == "caf\ufffd\n"


async def test_bash_stdin_is_empty(tools: ToolClient) -> None:
    r = await asyncio.wait_for(tools.bash("cat; echo done", timeout_ms=20_000), CALL_BOUND_S)
    assert (r.output, r.timed_out) == ("done\n", False)


async def test_bash_streams_output_while_running(tools: ToolClient) -> None:
    # The command waits for a file that the test creates (through the service, so that a lane on
    # another machine sees it too) only when the first output has arrived: without streaming it
    # would wait until its own deadline.
    chunks: list[bytes] = []
    writes: list[asyncio.Task[object]] = []

    def on_output(data: bytes) -> None:
        chunks.append(data)
        if b"first" in b"".join(chunks) and not writes:
            writes.append(asyncio.ensure_future(tools.write_file("go", "")))

    command = "echo first; for i in $(seq 1 400); do [ -e go ] && break; sleep 0.05; done; [ -e go ] && echo second || echo never"
    r = await asyncio.wait_for(tools.bash(command, timeout_ms=60_000, on_output=on_output), 60)
    await asyncio.gather(*writes)
    assert r.output == "first\nsecond\n"
    assert not r.timed_out
    assert chunks[0].startswith(b"first\n")
    assert b"".join(chunks) == b"first\nsecond\n"


async def test_bash_keeps_head_and_tail_of_huge_output(tools: ToolClient) -> None:
    expected = "".join(f"{i}\n" for i in range(1, 200_001)).encode()
    streamed: list[bytes] = []
    r = await tools.bash("seq 1 200000", max_output_bytes=10_000, on_output=streamed.append)
    dropped = len(expected) - 10_000
    assert r.dropped_bytes == dropped
    assert r.output == (expected[:5_000] + dropped_marker(dropped).encode() + expected[-5_000:]).decode()
    assert b"".join(streamed) == expected[:5_000]
    assert r.exit_code == 0
    # An odd budget: the tail gets the extra byte.
    r = await tools.bash("seq 1 200000", max_output_bytes=1_001)
    assert r.dropped_bytes == len(expected) - 1_001
    assert r.output.startswith(expected[:500].decode() + "\n[...")
    assert r.output.endswith(expected[-501:].decode())


async def test_bash_output_within_budget_is_whole(tools: ToolClient) -> None:
    r = await tools.bash("printf '%0800d' 0", max_output_bytes=1_000)
    assert (r.output, r.dropped_bytes) == ("0" * 800, 0)
    r = await tools.bash("printf '%01000d' 0", max_output_bytes=1_000)
    assert (r.output, r.dropped_bytes) == ("0" * 1000, 0)
    r = await tools.bash("printf '%01001d' 0", max_output_bytes=1_000)
    assert r.dropped_bytes == 1
    assert r.output == "0" * 500 + dropped_marker(1) + "0" * 500


async def test_bash_default_output_budget(tools: ToolClient) -> None:
    r = await tools.bash("head -c 3145728 /dev/zero | tr '\\0' a")
    assert r.dropped_bytes == 3 * 1024 * 1024 - 1024 * 1024
    head, _, tail = r.output.partition(dropped_marker(r.dropped_bytes))
    assert head == "a" * (512 * 1024) and tail == "a" * (512 * 1024)


async def test_bash_timeout_kills_the_process_group(tools: ToolClient, workspace: Path) -> None:
    started = time.monotonic()
    r = await asyncio.wait_for(
        tools.bash("sleep 60 & echo $! > child.pid; echo $$ > leader.pid; echo waiting; sleep 60", timeout_ms=1_000),
        CALL_BOUND_S,
    )
    assert time.monotonic() - started < CALL_BOUND_S
    assert r.timed_out
    assert r.exit_code == -1 and r.signal in (9, 15)
    assert r.output == "waiting\n"
    assert r.duration_ms >= 1_000
    await wait_gone(tools, read_pid(workspace / "child.pid"))
    await wait_gone(tools, read_pid(workspace / "leader.pid"))


async def test_bash_timeout_kills_what_ignores_sigterm(tools: ToolClient, workspace: Path) -> None:
    r = await asyncio.wait_for(
        tools.bash("trap '' TERM; sleep 60 & echo $! > child.pid; wait; wait", timeout_ms=500),
        CALL_BOUND_S,
    )
    assert r.timed_out and r.exit_code == -1
    assert r.signal == 9
    await wait_gone(tools, read_pid(workspace / "child.pid"))


async def test_bash_cancel_kills_the_process_group(tools: ToolClient) -> None:
    started = asyncio.Event()
    seen: list[bytes] = []

    def on_output(data: bytes) -> None:
        seen.append(data)
        if b"started" in b"".join(seen):
            started.set()

    # The pids come in the output, not in files, so that the running call need not share them.
    command = "sleep 60 & echo \"$! $$ started\"; wait"
    task = asyncio.create_task(tools.bash(command, timeout_ms=120_000, on_output=on_output))
    await asyncio.wait_for(started.wait(), CALL_BOUND_S)
    child, leader = (int(n) for n in b"".join(seen).split()[:2])
    assert await process_state(tools, child) not in ("", "Z", "X"), "the child must be running before the cancel"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_gone(tools, child)
    await wait_gone(tools, leader)
    # The service is still usable after a cancelled call.
    assert (await tools.bash("echo alive")).output == "alive\n"


async def test_bash_kills_background_processes(tools: ToolClient, workspace: Path) -> None:
    started = time.monotonic()
    r = await asyncio.wait_for(tools.bash("sleep 60 >/dev/null 2>&1 & echo $! > bg.pid; echo done"), CALL_BOUND_S)
    assert (r.output, r.exit_code, r.timed_out, r.killed_background) == ("done\n", 0, False, True)
    await wait_gone(tools, read_pid(workspace / "bg.pid"))
    # One that keeps the output pipe open does not hold the call until it ends.
    r = await asyncio.wait_for(tools.bash("sleep 60 & echo $! > bg2.pid; echo done"), CALL_BOUND_S)
    assert (r.output, r.exit_code, r.killed_background) == ("done\n", 0, True)
    await wait_gone(tools, read_pid(workspace / "bg2.pid"))
    r = await asyncio.wait_for(tools.bash("(while :; do echo tick; sleep 0.01; done) & echo $! > bg3.pid; exit 4"), CALL_BOUND_S)
    assert r.exit_code == 4 and r.killed_background
    await wait_gone(tools, read_pid(workspace / "bg3.pid"))
    assert time.monotonic() - started < CALL_BOUND_S
    assert not (await tools.bash("(echo sub) ; echo main")).killed_background


async def test_bash_workdir(tools: ToolClient, workspace: Path) -> None:
    (workspace / "sub" / "deeper").mkdir(parents=True)
    write(workspace / "file.txt", "x\n")
    assert (await tools.bash("pwd -P")).output == real(workspace) + "\n"
    assert (await tools.bash("pwd -P", workdir="sub")).output == real(workspace / "sub") + "\n"
    assert (await tools.bash("pwd -P", workdir=str(workspace / "sub" / "deeper"))).output == real(workspace / "sub" / "deeper") + "\n"
    assert (await tools.bash("pwd -P", workdir="sub/deeper/..")).output == real(workspace / "sub") + "\n"
    await fails(tools.bash("pwd", workdir="file.txt"), "not_a_directory")
    await fails(tools.bash("pwd", workdir="missing"), "not_found")
    await fails(tools.bash("pwd", workdir="/"), "outside_root")


async def test_bash_bad_arguments(tools: ToolClient) -> None:
    await fails(tools.bash(""), "invalid_argument")
    await fails(tools.bash("   \n"), "invalid_argument")
    await fails(tools.bash("true", timeout_ms=600_001), "invalid_argument")
    await fails(tools.bash("true", timeout_ms=-1), "invalid_argument")
    await fails(tools.bash("true", max_output_bytes=-1), "invalid_argument")
    assert (await tools.bash("true", timeout_ms=600_000)).exit_code == 0


async def test_bash_environment(tools: ToolClient) -> None:
    r = await tools.bash("echo \"$PAGER|$GIT_PAGER|$GIT_TERMINAL_PROMPT\"")
    assert r.output == "cat|cat|0\n"


async def test_bash_concurrent_calls(tools: ToolClient) -> None:
    results = await asyncio.wait_for(
        asyncio.gather(*(tools.bash(f"sleep 0.2; echo {i}") for i in range(8))), CALL_BOUND_S
    )
    assert [r.output for r in results] == [f"{i}\n" for i in range(8)]


# --- non-UTF-8 and awkward file names -----------------------------------------------------------


async def test_non_utf8_names_are_escaped_and_accepted_back(tools: ToolClient, workspace: Path) -> None:
    with open(bpath(workspace, b"caf\xe9.txt"), "wb") as fh:
        fh.write(b"hello needle\n")
    os.mkdir(bpath(workspace, b"d\xff"))
    with open(bpath(workspace, b"d\xff/inner.txt"), "wb") as fh:
        fh.write(b"inner needle\n")
    names = [e.name for e in (await tools.list_directory()).entries]
    assert names == ["d\\xff", "caf\\xe9.txt"]
    assert (await tools.find_files("*.txt")).paths == ["caf\\xe9.txt", "d\\xff/inner.txt"]
    assert [(m.path, m.line) for m in (await tools.grep("needle")).matches] == [("caf\\xe9.txt", 1), ("d\\xff/inner.txt", 1)]
    rendered = (await tools.tree()).rendered
    assert "caf\\xe9.txt" in rendered and "d\\xff/" in rendered
    r = await tools.read_file("caf\\xe9.txt")
    assert numbered(r.content) == [(1, "hello needle")]
    assert r.resolved_path == os.fsdecode(os.path.realpath(bpath(workspace, b"caf\xe9.txt"))).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    assert numbered((await tools.read_file("d\\xff/inner.txt")).content) == [(1, "inner needle")]
    assert [e.name for e in (await tools.list_directory("d\\xff")).entries] == ["inner.txt"]
    assert (await tools.bash("cat inner.txt", workdir="d\\xff")).output == "inner needle\n"
    await tools.edit_file("caf\\xe9.txt", "hello", "bye")
    await tools.write_file("d\\xff/inner.txt", "rewritten\n")
    w = await tools.write_file("new\\xfe.txt", "new\n")
    assert w.created
    assert sorted(os.listdir(os.fsencode(workspace))) == [b"caf\xe9.txt", b"d\xff", b"new\xfe.txt"]
    assert open(bpath(workspace, b"caf\xe9.txt"), "rb").read() == b"bye needle\n"
    assert open(bpath(workspace, b"d\xff/inner.txt"), "rb").read() == b"rewritten\n"


async def test_literal_backslash_names(tools: ToolClient, workspace: Path) -> None:
    # A name that really contains `\x41` is itself, not an escape for `A`.
    write(workspace / "lit\\x41.txt", "literal\n")
    write(workspace / "sub" / "lit\\x41.txt", "literal in sub\n")
    assert [e.name for e in (await tools.list_directory()).entries] == ["sub", "lit\\x41.txt"]
    assert numbered((await tools.read_file("lit\\x41.txt")).content) == [(1, "literal")]
    assert numbered((await tools.read_file("sub/lit\\x41.txt")).content) == [(1, "literal in sub")]
    await tools.write_file("lit\\x41.txt", "changed\n")
    assert (workspace / "lit\\x41.txt").read_text() == "changed\n"
    assert not (workspace / "litA.txt").exists()


async def test_names_with_spaces_newlines_and_dashes(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "with space.txt", "needle\n")
    write(workspace / "new\nline.txt", "needle\n")
    write(workspace / "-dash.txt", "needle\n")
    found = (await tools.find_files("*.txt")).paths
    assert found == ["-dash.txt", "new\nline.txt", "with space.txt"]
    assert sorted(m.path for m in (await tools.grep("needle")).matches) == sorted(found)
    for name in found:
        assert numbered((await tools.read_file(name)).content) == [(1, "needle")]


# --- find_files ---------------------------------------------------------------------------------


@pytest.fixture
def project(workspace: Path) -> Path:
    files = {
        "a.py": "import os\nNEEDLE = 1\n",
        "README.md": "# needle\n",
        "src/b.py": "needle()\nneedle()\n",
        "src/x/c.py": "pass\n",
        "src/x/y/d.py": "needle = 'deep'\n",
        "src/f.txt": "Needle upper\n",
        "lib/e.py": "NEEDLE\n",
        "lib/g.pyc": "needle\n",
        "docs/h.md": "needle docs\n",
        "a.b": "",
        "b.b": "",
        ".hidden.py": "needle hidden\n",
        ".config/settings.py": "needle in hidden dir\n",
        ".gitignore": "*.log\nbuild/\n/generated.py\n!keep.log\n",
        "debug.log": "needle log\n",
        "keep.log": "needle kept log\n",
        "build/out.py": "needle built\n",
        "generated.py": "needle generated\n",
        "src/generated.py": "needle not generated\n",
        "src/.gitignore": "x/y/\n",
        "src/trace.log": "needle in a log under src\n",
        ".git/config": "needle in git\n",
        ".git/objects/ab/cdef": "needle\n",
        "vendor/.git": "gitdir: ../.git/modules/vendor\n",
        "vendor/v.py": "needle vendored\n",
    }
    for rel, content in files.items():
        write(workspace / rel, content)
    return workspace


async def test_find_files_glob_semantics(tools: ToolClient, project: Path) -> None:
    async def find(pattern: str, path: str = "") -> list[str]:
        return (await tools.find_files(pattern, path)).paths

    assert await find("*.py") == [".config/settings.py", ".hidden.py", "a.py", "lib/e.py", "src/b.py", "src/generated.py", "src/x/c.py", "vendor/v.py"]
    assert await find("src/**/*.py") == ["src/b.py", "src/generated.py", "src/x/c.py"]
    assert await find("**/*.py") == await find("*.py")
    assert await find("src/*.py") == ["src/b.py", "src/generated.py"]
    assert await find("/*.py") == [".hidden.py", "a.py"]
    assert await find("*.{md,txt}") == ["README.md", "docs/h.md", "src/f.txt"]
    assert await find("{lib,docs}/*") == ["docs/h.md", "lib/e.py", "lib/g.pyc"]
    assert await find("?.b") == ["a.b", "b.b"]
    assert await find("[!a].b") == ["b.b"]
    assert await find("*.py[c]") == ["lib/g.pyc"]
    assert await find("*.log") == ["keep.log"]
    assert await find("nothing*") == []
    # Under a path: the glob is relative to it, the results to the working directory.
    assert await find("*.py", "src") == ["src/b.py", "src/generated.py", "src/x/c.py"]
    assert await find("x/*.py", "src") == ["src/x/c.py"]
    assert await find("*.py", str(project / "lib")) == ["lib/e.py"]


async def test_find_files_honours_gitignore_and_skips_git(tools: ToolClient, project: Path) -> None:
    everything = (await tools.find_files("*")).paths
    assert ".gitignore" in everything and "src/.gitignore" in everything
    assert ".hidden.py" in everything and ".config/settings.py" in everything
    for ignored in ("debug.log", "build/out.py", "generated.py", "src/x/y/d.py"):
        assert ignored not in everything
    assert not [p for p in everything if p.startswith(".git/") or p == ".git" or p.endswith("/.git")]
    assert "vendor/v.py" in everything


async def test_searches_of_a_subdirectory_apply_the_root_gitignore(tools: ToolClient, project: Path) -> None:
    # The root's `*.log` reaches into src; its anchored `/generated.py` does not.
    assert (await tools.find_files("*", "src")).paths == ["src/.gitignore", "src/b.py", "src/f.txt", "src/generated.py", "src/x/c.py"]
    found = sorted({m.path for m in (await tools.grep("needle", "src", ignore_case=True)).matches})
    assert found == ["src/b.py", "src/f.txt", "src/generated.py"]
    assert (await tools.tree("src")).rendered.split("\n") == [
        "src/", "  .gitignore", "  b.py", "  f.txt", "  generated.py", "  x/", "    c.py",
    ]


async def test_find_files_limit(tools: ToolClient, workspace: Path) -> None:
    for i in range(12):
        write(workspace / f"f{i:02}.txt", "")
    r = await tools.find_files("*.txt", limit=5)
    assert r.paths == [f"f{i:02}.txt" for i in range(5)]
    assert (r.truncated, r.total) == (True, 12)
    r = await tools.find_files("*.txt", limit=12)
    assert (len(r.paths), r.truncated, r.total) == (12, False, 12)
    r = await tools.find_files("*.txt")
    assert (len(r.paths), r.truncated) == (12, False)


async def test_find_files_bad_input(tools: ToolClient, project: Path) -> None:
    await fails(tools.find_files(""), "invalid_argument")
    await fails(tools.find_files("  "), "invalid_argument")
    await fails(tools.find_files("*", "a.py"), "not_a_directory")
    await fails(tools.find_files("*", "missing"), "not_found")
    await fails(tools.find_files("*", limit=-1), "invalid_argument")


# --- grep ---------------------------------------------------------------------------------------


async def test_grep_finds_lines(tools: ToolClient, project: Path) -> None:
    r = await tools.grep("needle\\(\\)")
    assert r.engine in ("ripgrep", "python")
    assert [(m.path, m.line, m.text) for m in r.matches] == [("src/b.py", 1, "needle()"), ("src/b.py", 2, "needle()")]
    assert (r.total, r.truncated) == (2, False)
    r = await tools.grep("^needle\\(\\)$")
    assert [(m.path, m.line) for m in r.matches] == [("src/b.py", 1), ("src/b.py", 2)]
    r = await tools.grep("needle", "src/b.py")
    assert [(m.path, m.line) for m in r.matches] == [("src/b.py", 1), ("src/b.py", 2)]
    r = await tools.grep("NEEDLE", str(project / "lib"))
    assert [(m.path, m.line) for m in r.matches] == [("lib/e.py", 1)]
    assert (await tools.grep("no such text anywhere")).matches == []


async def test_grep_honours_gitignore_hidden_and_git(tools: ToolClient, project: Path) -> None:
    r = await tools.grep("needle")
    found = sorted({m.path for m in r.matches})
    assert found == sorted([".config/settings.py", ".hidden.py", "README.md", "docs/h.md", "keep.log", "lib/g.pyc", "src/b.py", "src/generated.py", "vendor/v.py"])


async def test_grep_ignore_case(tools: ToolClient, project: Path) -> None:
    r = await tools.grep("needle", ignore_case=True, glob="*.{py,txt}")
    found = {(m.path, m.line) for m in r.matches}
    assert {("a.py", 2), ("lib/e.py", 1), ("src/f.txt", 1), ("src/b.py", 1)} <= found
    r = await tools.grep("needle", glob="*.{py,txt}")
    assert ("a.py", 2) not in {(m.path, m.line) for m in r.matches}
    r = await tools.grep("ÉTÉ", ignore_case=True)
    assert r.matches == []
    write(project / "fr.txt", "l'été\n")
    r = await tools.grep("ÉTÉ", ignore_case=True)
    assert [(m.path, m.text) for m in r.matches] == [("fr.txt", "l'été")]


async def test_grep_glob_filter(tools: ToolClient, project: Path) -> None:
    async def files(glob: str, path: str = "") -> list[str]:
        return sorted({m.path for m in (await tools.grep("needle", path, glob=glob, ignore_case=True)).matches})

    assert await files("*.md") == ["README.md", "docs/h.md"]
    assert await files("src/**/*.py") == ["src/b.py", "src/generated.py"]
    assert await files("*.log") == ["keep.log"]  # the filter never re-includes ignored files
    assert await files("build/*") == []
    assert await files("*.py", "src") == ["src/b.py", "src/generated.py"]


async def test_grep_max_matches(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "many.txt", "hit\n" * 30)
    r = await tools.grep("hit", max_matches=10)
    assert (len(r.matches), r.total, r.truncated) == (10, 30, True)
    assert [m.line for m in r.matches] == list(range(1, 11))
    r = await tools.grep("hit", max_matches=30)
    assert (len(r.matches), r.total, r.truncated) == (30, 30, False)
    write(workspace / "lots.txt", "hit\n" * 600)
    r = await tools.grep("hit", "lots.txt")
    assert (len(r.matches), r.total, r.truncated) == (500, 600, True)


async def test_grep_long_and_binary(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "long.txt", "hit " + "z" * 3000 + "\n")
    write(workspace / "blob.bin", b"hit\x00hit\n")
    write(workspace / "late.bin", b"hit\n" * 30_000 + b"\x00")
    r = await tools.grep("hit")
    assert [m.path for m in r.matches] == ["long.txt"]
    assert r.matches[0].text.startswith("hit zzz")
    assert len(r.matches[0].text) < 600
    assert (await tools.grep("hit", "late.bin")).matches == []


async def test_grep_lookahead(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "a.txt", "foo bar\nfoo baz\n")
    r = await tools.grep("foo(?= baz)")
    assert [(m.path, m.line) for m in r.matches] == [("a.txt", 2)]


async def test_grep_bad_input(tools: ToolClient, project: Path) -> None:
    await fails(tools.grep(""), "invalid_argument")
    await fails(tools.grep("needle("), "invalid_argument")
    await fails(tools.grep("[unclosed"), "invalid_argument")
    await fails(tools.grep("needle", "missing"), "not_found")
    await fails(tools.grep("needle", max_matches=-1), "invalid_argument")


# --- list_directory -----------------------------------------------------------------------------


async def test_list_directory_kinds_and_sizes(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "b.txt", "12345")
    write(workspace / "a.txt", "")
    write(workspace / ".hidden", "xy")
    (workspace / "zdir").mkdir()
    (workspace / "adir").mkdir()
    write(workspace / "adir" / "inner.txt", "inner")
    (workspace / "link").symlink_to(workspace / "b.txt")
    (workspace / "broken").symlink_to(workspace / "nowhere")
    os.mkfifo(workspace / "pipe")
    r = await tools.list_directory()
    assert r.resolved_path == real(workspace)
    assert [(e.name, e.kind, e.size) for e in r.entries] == [
        ("adir", "directory", 0),
        ("zdir", "directory", 0),
        (".hidden", "file", 2),
        ("a.txt", "file", 0),
        ("b.txt", "file", 5),
        ("broken", "symlink", 0),
        ("link", "symlink", 0),
        ("pipe", "other", 0),
    ]
    assert [e.name for e in (await tools.list_directory("adir")).entries] == ["inner.txt"]
    assert (await tools.list_directory("zdir")).entries == []
    assert (await tools.list_directory(str(workspace / "adir"))).resolved_path == real(workspace / "adir")


async def test_list_directory_shows_git_and_ignored(tools: ToolClient, project: Path, tool_home: str) -> None:
    if tool_home == "remote":
        pytest.skip("a lane on another machine gets a copy of the workspace without what .gitignore excludes (docs/remote-lanes.md)")
    names = [e.name for e in (await tools.list_directory()).entries]
    assert ".git" in names and "build" in names and "debug.log" in names


async def test_list_directory_bad_input(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "f.txt", "x")
    await fails(tools.list_directory("f.txt"), "not_a_directory")
    await fails(tools.list_directory("missing"), "not_found")


# --- tree ---------------------------------------------------------------------------------------


async def test_tree_renders_and_counts(tools: ToolClient, workspace: Path) -> None:
    for rel in ("b.txt", "a/one.txt", "a/deep/two.txt", ".hidden/h.txt", "c/x/y/z/far.txt"):
        write(workspace / rel, "")
    r = await tools.tree()
    assert r.rendered.split("\n") == [
        "./",
        "  .hidden/",
        "    h.txt",
        "  a/",
        "    deep/",
        "      two.txt",
        "    one.txt",
        "  b.txt",
        "  c/",
        "    x/",
        "      y/",
    ]
    assert (r.directories, r.files, r.truncated) == (6, 4, False)
    r = await tools.tree(max_depth=1)
    assert r.rendered.split("\n") == ["./", "  .hidden/", "  a/", "  b.txt", "  c/"]
    assert (r.directories, r.files) == (3, 1)
    r = await tools.tree(max_depth=10)
    assert "          far.txt" in r.rendered.split("\n")
    assert (r.directories, r.files) == (7, 5)
    r = await tools.tree("a")
    assert r.rendered.split("\n") == ["a/", "  deep/", "    two.txt", "  one.txt"]
    r = await tools.tree(str(workspace / "a" / "deep"))
    assert r.rendered.split("\n") == ["a/deep/", "  two.txt"]


async def test_tree_entry_limit(tools: ToolClient, workspace: Path) -> None:
    for i in range(10):
        write(workspace / f"f{i}.txt", "")
    r = await tools.tree(max_entries=10)
    assert (r.files, r.truncated) == (10, False)
    r = await tools.tree(max_entries=4)
    assert (r.directories + r.files, r.truncated) == (4, True)
    lines = r.rendered.split("\n")
    assert lines[:5] == ["./", "  f0.txt", "  f1.txt", "  f2.txt", "  f3.txt"]
    assert len(lines) == 6 and "4" in lines[5]  # a last line says where it stopped


async def test_tree_honours_gitignore_and_skips_git(tools: ToolClient, project: Path) -> None:
    r = await tools.tree(max_depth=5)
    assert r.rendered.split("\n") == [
        "./",
        "  .config/",
        "    settings.py",
        "  .gitignore",
        "  .hidden.py",
        "  README.md",
        "  a.b",
        "  a.py",
        "  b.b",
        "  docs/",
        "    h.md",
        "  keep.log",
        "  lib/",
        "    e.py",
        "    g.pyc",
        "  src/",
        "    .gitignore",
        "    b.py",
        "    f.txt",
        "    generated.py",
        "    x/",
        "      c.py",
        "  vendor/",
        "    v.py",
    ]
    assert (r.directories, r.files, r.truncated) == (6, 17, False)


async def test_tree_bad_input(tools: ToolClient, workspace: Path) -> None:
    write(workspace / "f.txt", "x")
    await fails(tools.tree("f.txt"), "not_a_directory")
    await fails(tools.tree("missing"), "not_found")
    await fails(tools.tree(max_depth=-1), "invalid_argument")
    await fails(tools.tree(max_entries=-1), "invalid_argument")
