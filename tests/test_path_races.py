"""Path checks must hold while the filesystem changes under them.

A swapper process exchanges a directory inside the workspace with a symlink to a
directory outside it (renameat2 RENAME_EXCHANGE) as fast as it can, while each tool
is called again and again on a path through that directory. Any call that reads,
writes, edits, lists or runs in the outside directory is an escape; there must be none.

The outside directory is one the home can reach: beside the workspace for the local
home, under the lane's own /tmp for a lane (the lane sees nothing of the host's). It
holds a file of the same name as the one inside, with a secret in it, and a marker file.
Run with `-s` to see the tries and escapes per tool.
"""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from osprey.errors import ToolError
from osprey.toolservice.client import ToolClient

TRIES = 300
TRIES_IN_PROCESS = 1000  # calls in this process are quick
TIME_CAP_S = 10.0
CALL_BOUND_S = 30.0
SECRET = "SECRET-OUTSIDE"
LANE_OUTSIDE = "/tmp/osprey-race-outside"

# renameat2 by architecture; RENAME_EXCHANGE swaps two names atomically.
RENAMEAT2 = {"x86_64": 316, "aarch64": 276}

SWAPPER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
number, workspace, a, b, seconds = int(sys.argv[1]), sys.argv[2], os.fsencode(sys.argv[3]), os.fsencode(sys.argv[4]), float(sys.argv[5])
dir_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
deadline = time.monotonic() + seconds
swaps = 0
print("ready", flush=True)
while time.monotonic() < deadline and not os.path.exists(os.path.join(workspace, "stop")):
    for _ in range(200):
        if libc.syscall(number, dir_fd, a, dir_fd, b, 2) != 0:
            print("error", ctypes.get_errno(), flush=True)
            sys.exit(1)
    swaps += 200
print("swaps", swaps, flush=True)
"""


def renameat2_number() -> int:
    number = RENAMEAT2.get(platform.machine())
    if number is None:
        pytest.skip(f"no renameat2 number known for {platform.machine()}")
    return number


class Swapper:
    """The swapping process: `d` (a directory) and `s` (a symlink out), or the paths `swap`
    names below the workspace, trade places until stopped."""

    def __init__(self, workspace: Path, swap: tuple[str, str] = ("d", "s")) -> None:
        self.workspace = workspace
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SWAPPER, str(renameat2_number()), str(workspace), *swap, str(TIME_CAP_S * 3)],
            stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> int:
        """Stop it; the number of swaps made."""
        (self.workspace / "stop").write_text("")
        try:
            out, _ = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        (self.workspace / "stop").unlink()
        assert self.proc.returncode == 0, out
        return int(out.split()[-1])


class Outside:
    """The directory the symlink leads to, seen from the home under test."""

    def __init__(self, tools: ToolClient, home: str, tmp_path: Path) -> None:
        self.tools = tools
        self.lane = home == "lane"
        self.path = LANE_OUTSIDE if self.lane else str(tmp_path / "outside")

    async def create(self) -> None:
        if self.lane:
            r = await self.tools.bash(
                f"rm -rf {self.path} && mkdir {self.path} && printf '{SECRET} needle\\n' > {self.path}/target.txt"
                f" && : > {self.path}/marker-outside.txt && mkdir {self.path}/sub"
            )
            assert r.exit_code == 0, r.output
        else:
            os.mkdir(self.path)
            Path(self.path, "target.txt").write_text(f"{SECRET} needle\n")
            Path(self.path, "marker-outside.txt").write_text("")
            os.mkdir(Path(self.path, "sub"))

    async def state(self) -> tuple[list[str], str]:
        """Every path in the outside directory, and its target file's content."""
        if self.lane:
            r = await self.tools.bash(f"cd {self.path} && find . -mindepth 1; echo ---; cat target.txt")
            names, _, content = r.output.partition("---\n")
            return sorted(names.split()), content
        return _listing(Path(self.path)), Path(self.path, "target.txt").read_text()


def _listing(top: Path) -> list[str]:
    """Every path below `top`, as `find . -mindepth 1` prints them."""
    return sorted("./" + str(p.relative_to(top)) for p in top.rglob("*"))


@pytest.fixture
async def race(tools: ToolClient, tool_home: str, workspace: Path, tmp_path: Path) -> Race:
    outside = Outside(tools, tool_home, tmp_path)
    await outside.create()
    (workspace / "d" / "sub").mkdir(parents=True)
    (workspace / "d" / "target.txt").write_text("inside needle\n")
    (workspace / "d" / "marker-inside.txt").write_text("")
    (workspace / "s").symlink_to(outside.path, target_is_directory=True)
    return Race(tools, tool_home, workspace, outside)


class Race:
    def __init__(self, tools: ToolClient, home: str, workspace: Path, outside: Outside) -> None:
        self.tools, self.home, self.workspace, self.outside = tools, home, workspace, outside

    async def run(self, tool: str, call: Callable[[int], Awaitable[Any]], escaped: Callable[[Any], bool] = lambda r: False) -> None:
        """Call the tool TRIES times (or for TIME_CAP_S) against the swapper and count escapes:
        calls whose result came from outside, and names added outside."""
        before = await self.outside.state()
        swapper = Swapper(self.workspace)
        tries = escapes = 0
        failures: dict[str, int] = {}
        try:
            deadline = time.monotonic() + TIME_CAP_S
            while tries < TRIES and time.monotonic() < deadline:
                tries += 1
                try:
                    result = await asyncio.wait_for(call(tries), CALL_BOUND_S)
                except ToolError as exc:
                    # Refused or failed while the path was changing: never an escape.
                    failures[exc.category] = failures.get(exc.category, 0) + 1
                    continue
                if escaped(result):
                    escapes += 1
        finally:
            swaps = swapper.stop()
        names, content = await self.outside.state()
        added = sorted(set(names) - set(before[0]))
        temps = [n for n in added if n.rsplit("/", 1)[-1].startswith(".osprey-")]
        print(f"\n[{self.home}] {tool}: {tries} tries, {escapes} escapes, {len(added)} names added outside"
              f" ({len(temps)} temporary files), outside file {'unchanged' if content == before[1] else 'CHANGED'};"
              f" failed calls {failures or 'none'}, {swaps} swaps")
        assert swaps > tries, "the swapper must keep swapping while the tool runs"
        assert escapes == 0, f"{tool}: {escapes} of {tries} calls escaped the workspace"
        assert added == [], f"{tool} left files outside the workspace: {added[:10]}"
        assert content == before[1], f"{tool} changed the file outside the workspace"


async def test_read_file_race(race: Race) -> None:
    await race.run("read_file", lambda i: race.tools.read_file("d/target.txt"), lambda r: SECRET in r.content)


async def test_write_file_race(race: Race) -> None:
    async def write(i: int) -> Any:
        return await race.tools.write_file(f"d/new-{i}.txt", "written\n")

    await race.run("write_file", write)


async def test_write_file_new_dirs_race(race: Race) -> None:
    async def write(i: int) -> Any:
        return await race.tools.write_file(f"d/sub/n{i}/new.txt", "written\n")

    await race.run("write_file (new dirs)", write)


async def test_edit_file_race(race: Race) -> None:
    # The inside file has no SECRET: an edit can only succeed on the outside one.
    await race.run("edit_file", lambda i: race.tools.edit_file("d/target.txt", SECRET, "EDITED"), lambda r: True)


async def test_list_directory_race(race: Race) -> None:
    await race.run("list_directory", lambda i: race.tools.list_directory("d"), lambda r: any(e.name == "marker-outside.txt" for e in r.entries))


async def test_tree_race(race: Race) -> None:
    await race.run("tree", lambda i: race.tools.tree("d"), lambda r: "marker-outside" in r.rendered)


async def test_find_files_race(race: Race) -> None:
    await race.run("find_files", lambda i: race.tools.find_files("*", "d"), lambda r: any("marker-outside" in p for p in r.paths))


async def test_find_files_from_above_race(race: Race) -> None:
    # The swapped directory is inside the searched tree rather than the searched path.
    await race.run("find_files (from above)", lambda i: race.tools.find_files("**/marker-*", ""), lambda r: any("marker-outside" in p for p in r.paths))


async def test_grep_directory_race(race: Race) -> None:
    await race.run("grep (directory)", lambda i: race.tools.grep("needle", "d"), lambda r: any(SECRET in m.text for m in r.matches))


async def test_grep_file_race(race: Race) -> None:
    await race.run("grep (file)", lambda i: race.tools.grep("needle", "d/target.txt"), lambda r: any(SECRET in m.text for m in r.matches))


async def test_grep_from_above_race(race: Race) -> None:
    await race.run("grep (from above)", lambda i: race.tools.grep("needle", ""), lambda r: any(SECRET in m.text for m in r.matches))


async def test_bash_workdir_race(race: Race) -> None:
    await race.run("bash workdir", lambda i: race.tools.bash("cat target.txt; ls", workdir="d"), lambda r: SECRET in r.output or "marker-outside" in r.output)


# --- the same in this process, with the component walk that stands in for openat2 --------------


@pytest.fixture
def no_openat2(monkeypatch: pytest.MonkeyPatch) -> None:
    from osprey_sidecar import paths

    monkeypatch.setattr(paths, "_openat2", False, raising=False)


@pytest.fixture
def local_race(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    workspace = tmp_path / "workspace"
    outside = tmp_path / "outside"
    (workspace / "d" / "sub").mkdir(parents=True)
    (workspace / "d" / "target.txt").write_text("inside needle\n")
    (workspace / "d" / "marker-inside.txt").write_text("")
    (outside / "sub").mkdir(parents=True)
    (outside / "target.txt").write_text(f"{SECRET} needle\n")
    (outside / "marker-outside.txt").write_text("")
    (workspace / "s").symlink_to(outside, target_is_directory=True)
    yield workspace, outside


def race_in_process(
    workspace: Path, outside: Path, label: str, call: Callable[[int], Any], escaped: Callable[[Any], bool], tries: int,
    swap: tuple[str, str] = ("d", "s"),
) -> None:
    """Call `call` up to `tries` times (or for TIME_CAP_S) in this process against the swapper and count escapes."""
    from osprey_sidecar.errors import ToolFailure

    swapper = Swapper(workspace, swap)
    done = escapes = 0
    try:
        deadline = time.monotonic() + TIME_CAP_S
        while done < tries and time.monotonic() < deadline:
            done += 1
            try:
                if escaped(call(done)):
                    escapes += 1
            except ToolFailure:
                pass
    finally:
        swaps = swapper.stop()
    added = sorted(set(_listing(outside)) - {"./marker-outside.txt", "./target.txt", "./sub"})
    content = (outside / "target.txt").read_text()
    print(f"\n[in-process] {label}: {done} tries, {escapes} escapes, {len(added)} names added outside,"
          f" outside file {'unchanged' if content == f'{SECRET} needle' + chr(10) else 'CHANGED'}; {swaps} swaps")
    assert swaps > done
    assert escapes == 0, f"{label}: {escapes} of {done} calls escaped the workspace"
    assert added == [], f"{label} left files outside the workspace: {added[:10]}"
    assert content == f"{SECRET} needle\n", f"{label} changed the file outside the workspace"


def test_component_walk_race(no_openat2: None, local_race: tuple[Path, Path]) -> None:
    from osprey_sidecar.files import edit_file, list_directory, read_file, tree, write_file
    from osprey_sidecar.paths import Roots
    from osprey_sidecar.search import find_files, grep
    from osprey_sidecar.shell import BashRun

    workspace, outside = local_race
    roots = Roots([str(workspace)])

    def bash(i: int) -> str:
        run = BashRun(roots, "cat target.txt; ls", workdir="d")
        return "".join((e.exit.tail if e.HasField("exit") else e.output.data).decode() for e in run.events())

    def grep_secret(r: Any) -> bool:
        return any(SECRET in m.text for m in r.matches)

    calls: dict[str, tuple[Callable[[int], Any], Callable[[Any], bool]]] = {
        "read_file": (lambda i: read_file(roots, "d/target.txt"), lambda r: SECRET in r.content),
        "write_file": (lambda i: write_file(roots, f"d/n{i}.txt", "x"), lambda r: False),
        "write_file (new dirs)": (lambda i: write_file(roots, f"d/sub/n{i}/new.txt", "x"), lambda r: False),
        "edit_file": (lambda i: edit_file(roots, "d/target.txt", SECRET, "EDITED"), lambda r: True),
        "list_directory": (lambda i: list_directory(roots, "d"), lambda r: any(e.name == "marker-outside.txt" for e in r.entries)),
        "tree": (lambda i: tree(roots, "d"), lambda r: "marker-outside" in r.rendered),
        "find_files": (lambda i: find_files(roots, "**/marker-*", ""), lambda r: any("marker-outside" in p for p in r.paths)),
        "grep (directory)": (lambda i: grep(roots, "needle", "d"), grep_secret),
        "grep (file)": (lambda i: grep(roots, "needle", "d/target.txt"), grep_secret),
        "grep (from above)": (lambda i: grep(roots, "needle", ""), grep_secret),
        "bash workdir": (bash, lambda out: SECRET in out or "marker-outside" in out),
    }
    for tool, (call, escaped) in calls.items():
        slow = tool == "bash workdir" or tool.startswith("grep")  # each call starts a process
        race_in_process(workspace, outside, f"{tool}, no openat2", call, escaped, TRIES if slow else TRIES_IN_PROCESS)


@pytest.mark.parametrize("engine", ["ripgrep", "python"])
def test_grep_engines_race(local_race: tuple[Path, Path], engine: str) -> None:
    # The Python engine's worker opens files itself: it must not follow a swapped-in symlink either.
    from osprey_sidecar.paths import Roots
    from osprey_sidecar.search import grep

    if engine == "ripgrep" and shutil.which("rg") is None:
        pytest.skip("ripgrep (rg) is not on PATH")
    workspace, outside = local_race
    roots = Roots([str(workspace)])

    def escaped(r: Any) -> bool:
        assert r.engine == engine
        return any(SECRET in m.text for m in r.matches)

    for label, path in (("directory", "d"), ("file", "d/target.txt"), ("from above", "")):
        race_in_process(workspace, outside, f"grep {engine} ({label})", lambda i, path=path: grep(roots, "needle", path, engine=engine), escaped, TRIES // 3)
    # The file itself trades places with a symlink to the outside file.
    (workspace / "d" / "link.txt").symlink_to(outside / "target.txt")
    for label, path in (("file swapped, named", "d/target.txt"), ("file swapped, in a directory", "d")):
        race_in_process(
            workspace, outside, f"grep {engine} ({label})", lambda i, path=path: grep(roots, "needle", path, engine=engine), escaped, TRIES // 3,
            swap=("d/target.txt", "d/link.txt"),
        )


def test_the_component_walk_is_what_runs(no_openat2: None, tmp_path: Path) -> None:
    # A guard on the test above: with openat2 off, opening still works and refuses symlinks.
    from osprey_sidecar import paths

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "d")
    root = os.open(tmp_path, os.O_PATH)
    try:
        os.close(paths.open_beneath(root, "d/f", os.O_RDONLY))
        with pytest.raises(OSError) as info:
            paths.open_beneath(root, "link/f", os.O_RDONLY)
        assert info.value.errno == 40  # ELOOP
        assert paths._kernel_openat2() is None
    finally:
        os.close(root)
