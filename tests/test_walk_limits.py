"""Read-only tools must not exhaust the machine, whatever the workspace holds or a call asks.

Hostile ignore files (a symlink to /dev/zero, a FIFO), globs that make a backtracking
matcher explode, a directory tree deeper than Python's recursion limit, and paths or
commands that are malformed or huge. Every service call is bounded by CALL_BOUND_S, so
a hang fails the test instead of stalling it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest

from osprey.errors import ToolError
from osprey.toolservice.client import ToolClient

CALL_BOUND_S = 20.0
# A regression guard, not a benchmark: the backtracking matcher took ~11 s here.
LISTING_BOUND_S = 1.0
DEEP = 1100


async def bounded(call: Awaitable[Any]) -> Any:
    return await asyncio.wait_for(call, CALL_BOUND_S)


async def refused(call: Awaitable[Any], category: str = "invalid_argument") -> ToolError:
    with pytest.raises(ToolError) as info:
        await bounded(call)
    assert info.value.category == category, f"{info.value.category}: {str(info.value)[:300]}"
    return info.value


def make_deep(top: Path, levels: int, leaf: str, content: str) -> None:
    """`levels` nested directories named `d` in `top`, with the file `leaf` in the deepest
    (made through descriptors: os.makedirs recurses once per level, and long paths fail)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        leaf_fd = os.open(leaf, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf_fd, content.encode())
        os.close(leaf_fd)
    finally:
        os.close(fd)


def remove_deep(path: Path) -> None:
    # shutil.rmtree recurses once per level and fails on a tree this deep; rm does not.
    subprocess.run(["rm", "-rf", str(path)], check=True)


# --- hostile ignore files ----------------------------------------------------------------------


@pytest.fixture(params=["dev-zero", "fifo"])
def hostile_ignores(request: pytest.FixtureRequest, workspace: Path) -> str:
    """A directory `w` whose ignore files, its own, its subdirectory's and the workspace's
    above it, are each a symlink to /dev/zero, or a FIFO."""
    (workspace / "w" / "sub").mkdir(parents=True)
    (workspace / "w" / "a.txt").write_text("needle\n")
    (workspace / "w" / "sub" / "b.txt").write_text("needle\n")
    for ignore in (workspace / ".gitignore", workspace / "w" / ".gitignore", workspace / "w" / "sub" / ".gitignore"):
        if request.param == "dev-zero":
            ignore.symlink_to("/dev/zero")
        else:
            os.mkfifo(ignore)
    return request.param


async def test_tree_reads_no_hostile_ignore_file(tools: ToolClient, hostile_ignores: str) -> None:
    r = await bounded(tools.tree("w"))
    assert r.rendered.split("\n") == ["w/", "  a.txt", "  sub/", "    b.txt"]
    r = await bounded(tools.tree("w/sub"))  # the others are ancestors' files here
    assert r.rendered.split("\n") == ["w/sub/", "  b.txt"]
    assert "w/" in (await bounded(tools.tree())).rendered


async def test_find_files_reads_no_hostile_ignore_file(tools: ToolClient, hostile_ignores: str) -> None:
    assert (await bounded(tools.find_files("*", "w"))).paths == ["w/a.txt", "w/sub/b.txt"]
    assert (await bounded(tools.find_files("*", "w/sub"))).paths == ["w/sub/b.txt"]
    assert (await bounded(tools.find_files("*.txt"))).paths == ["w/a.txt", "w/sub/b.txt"]


async def test_grep_reads_no_hostile_ignore_file(tools: ToolClient, hostile_ignores: str) -> None:
    r = await bounded(tools.grep("needle", "w"))
    assert [(m.path, m.line) for m in r.matches] == [("w/a.txt", 1), ("w/sub/b.txt", 1)]


def test_python_grep_reads_no_hostile_ignore_file(workspace: Path, hostile_ignores: str) -> None:
    from grep_answers import grep

    from osprey_sidecar.paths import Roots

    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.update(r=grep(Roots([str(workspace)]), "needle", "w", engine="python")), daemon=True)
    thread.start()
    thread.join(CALL_BOUND_S)
    assert not thread.is_alive(), "grep hung on the ignore file"
    assert [(m.path, m.line) for m in outcome["r"].matches] == [("w/a.txt", 1), ("w/sub/b.txt", 1)]


async def test_a_huge_ignore_file_is_read_in_part(tools: ToolClient, workspace: Path) -> None:
    # Over 1 MiB of (few, long) rules that match nothing, then one that would: it is past the cap, so unread.
    filler = (b"n" * 3999 + b"\n") * 263
    (workspace / ".gitignore").write_bytes(filler + b"a.txt\n")
    (workspace / "a.txt").write_text("")
    (workspace / "b.txt").write_text("")
    r = await bounded(tools.find_files("*.txt"))
    assert r.paths == ["a.txt", "b.txt"]


# --- globs that make a backtracking matcher explode --------------------------------------------

REDOS_GLOB = "*a" * 12 + "*b"
LONG_NAME = "a" * 120


@pytest.fixture
def redos_workspace(workspace: Path) -> Path:
    (workspace / ".gitignore").write_text(REDOS_GLOB + "\n" + "**/a/" * 6 + "b\n")
    (workspace / LONG_NAME).write_text("needle\n")
    deep = workspace.joinpath(*["a"] * 40)
    os.makedirs(deep)
    (deep / "c").write_text("needle\n")
    return workspace


async def timed(call: Awaitable[Any]) -> tuple[Any, float]:
    started = time.monotonic()
    result = await bounded(call)
    return result, time.monotonic() - started


async def test_ignore_glob_matching_is_not_exponential(tools: ToolClient, redos_workspace: Path) -> None:
    r, seconds = await timed(tools.tree(max_depth=100))
    assert LONG_NAME in r.rendered and "  " * 41 + "c" in r.rendered
    assert seconds < LISTING_BOUND_S, f"tree took {seconds:.2f} s"
    r, seconds = await timed(tools.find_files("c"))
    assert r.paths == ["/".join(["a"] * 40) + "/c"]
    assert seconds < LISTING_BOUND_S, f"find_files took {seconds:.2f} s"


async def test_user_glob_matching_is_not_exponential(tools: ToolClient, redos_workspace: Path) -> None:
    r, seconds = await timed(tools.find_files(REDOS_GLOB))
    assert r.paths == []
    assert seconds < LISTING_BOUND_S, f"find_files took {seconds:.2f} s"
    r, seconds = await timed(tools.find_files("**/a/" * 8 + "b"))
    assert r.paths == []
    assert seconds < LISTING_BOUND_S, f"find_files took {seconds:.2f} s"
    r, seconds = await timed(tools.grep("needle", glob=REDOS_GLOB))
    assert r.matches == []
    assert seconds < LISTING_BOUND_S, f"grep took {seconds:.2f} s"


# --- a tree deeper than the recursion limit ----------------------------------------------------


@pytest.fixture
def deep_workspace(workspace: Path) -> Iterator[Path]:
    """`w/d/d/.../d/deep.txt`, DEEP levels of `d`, and `w/top.txt`."""
    (workspace / "w").mkdir()
    make_deep(workspace / "w", DEEP, "deep.txt", "needle\n")
    (workspace / "w" / "top.txt").write_text("needle\n")
    yield workspace / "w"
    remove_deep(workspace / "w")


async def test_tree_of_a_deep_directory(tools: ToolClient, deep_workspace: Path) -> None:
    r = await bounded(tools.tree("w", max_depth=DEEP + 10, max_entries=DEEP + 10))
    lines = r.rendered.split("\n")
    assert (r.directories, r.files, r.truncated) == (DEEP, 2, False)
    assert lines[-2] == "  " * (DEEP + 1) + "deep.txt"
    assert lines[-1] == "  top.txt"
    r = await bounded(tools.tree("w", max_depth=5))
    assert (r.directories, r.files) == (5, 1)


async def test_searches_of_a_deep_directory(tools: ToolClient, deep_workspace: Path) -> None:
    deep_file = "w/" + "/".join(["d"] * DEEP) + "/deep.txt"
    assert (await bounded(tools.find_files("deep.txt"))).paths == [deep_file]
    r = await bounded(tools.grep("needle", "w"))
    assert [m.path for m in r.matches] == [deep_file, "w/top.txt"]


def test_deep_walk_needs_few_descriptors(deep_workspace: Path) -> None:
    # With 64 descriptors a walk that held one per level could not get past level ~60.
    script = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
        "from osprey_sidecar.ignore import walk\n"
        "entries = list(walk(sys.argv[1], sys.argv[1]))\n"
        "print(len(entries), max(e.depth for e in entries))\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(deep_workspace)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [str(DEEP + 2), str(DEEP + 1)]


def test_walk_stops_where_paths_outgrow_path_max(tmp_path: Path) -> None:
    from osprey_sidecar.ignore import walk
    from osprey_sidecar.paths import PATH_MAX

    top = tmp_path / "top"
    top.mkdir()
    make_deep(top, 2500, "f", "")  # about 5000 bytes of path: more than PATH_MAX
    try:
        entries = list(walk(str(top), str(tmp_path)))
        assert entries, "the walk should list what it can"
        longest = max(len(os.fsencode(e.path)) for e in entries)
        assert PATH_MAX - 10 < longest < PATH_MAX + 10
        assert all(e.is_dir for e in entries)  # "f" is past the limit
    finally:
        remove_deep(top)


# --- malformed and huge arguments --------------------------------------------------------------


async def test_a_nul_escape_in_a_path_is_refused(tools: ToolClient, workspace: Path) -> None:
    (workspace / "dir").mkdir()
    before = sorted(os.listdir(workspace))
    bad = "a\\x00b"  # the wire form from_wire turns into a NUL byte
    for call in (
        tools.read_file(bad), tools.write_file(bad, "x"), tools.edit_file(bad, "a", "b"), tools.list_directory(bad),
        tools.tree(bad), tools.find_files("*", bad), tools.grep("x", bad), tools.bash("true", workdir=bad),
        tools.read_file("dir/" + bad),
    ):
        error = await refused(call)
        assert "NUL" in str(error)
    assert sorted(os.listdir(workspace)) == before


async def test_a_huge_path_is_refused_without_echoing_it(tools: ToolClient, workspace: Path) -> None:
    for path in ("a" * 10_000_000, "b" * 5000, "c/" * 2100, "\\xff/" * 2100, "\\xff" * 5000):
        for call in (tools.read_file(path), tools.write_file(path, "x"), tools.list_directory(path), tools.bash("true", workdir=path)):
            error = await refused(call)
            assert len(str(error)) < 500, str(error)[:600]
            assert "PATH_MAX" in str(error)
    # Just under the limit, the path is looked up (and is simply not there).
    await refused(tools.read_file("x" * 200 + "/" + "y" * 200), "not_found")


async def test_messages_echo_a_long_path_in_part(tools: ToolClient, workspace: Path) -> None:
    long_outside = "/" + "o" * 3000
    error = await refused(tools.read_file(long_outside), "outside_root")
    assert len(str(error)) < 1000 and "more characters" in str(error)
    error = await refused(tools.read_file("m" * 250), "not_found")
    assert len(str(error)) < 500


async def test_a_nul_in_a_bash_command_is_refused(tools: ToolClient) -> None:
    error = await refused(tools.bash("echo a\x00b"))
    assert "command contains a NUL character" in str(error)
