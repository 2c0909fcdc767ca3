"""Concurrent grep and find_files through the real ToolService (the local dispatcher) against as
many concurrent `rg` processes given the same flags: the floor curve beside Osprey's.

Tree (made in a temporary directory): FILES small files, 100 a directory (default 5,000). Kinds:
narrow grep (one file in 1,000 holds the pattern), broad grep (every line matches: the tool stops
at COUNT_LIMIT, and `rg` is cut there too, as `| head` would), find_files of one name.

For N = 1, 2, 4, 8, 16, one round starts N calls at once (asyncio.gather over one client) and,
in turn, N `rg` processes at once (the order alternating round by round, so load from other work
on the machine hits both), and times each batch to its last answer. Printed per kind and N: the
median (min-max) of the tool's batch and of the floor's, each curve relative to its own N = 1,
and the paired ratio tool/floor (median, min-max over the rounds). Also the dispatcher's own CPU
per call (its threads' CPU time, not its children's: the Python work of a call) and the load average.
Goal: Osprey's curve within 1.5x of the floor's at every N.

    .venv/bin/python bench/grep_concurrency.py [FILES] [ROUNDS] [KIND...]   (defaults 5000, 5, all three;
    kinds: narrow-grep broad-grep find_files)
"""

from __future__ import annotations

import asyncio
import os
import selectors
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import ensure_bytecode, figure  # noqa: E402
from grep_vs_rg import make_tree  # noqa: E402

from osprey.toolservice.homes import open_tool_service  # noqa: E402
from osprey_sidecar.search import COUNT_LIMIT  # noqa: E402

LEVELS = (1, 2, 4, 8, 16)
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """The CPU time of the process `pid` (its own threads', not its children's): from each
    thread's schedstat, in nanoseconds, where the system has it (utime + stime count whole clock
    ticks, 10 ms, longer than a call), else utime + stime."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass  # the thread ended meanwhile
        return total / 1e9
    except OSError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK


def rg_batch(cmds: list[list[str]], cwd: str, head: int) -> float:
    """Wall time until every command has exited or printed `head` lines or names (then it is killed).
    A line of matches ends with a newline, and a name of `--files --null` with a NUL: one of the
    two is counted (with `--null`, a line of matches holds both)."""
    files = "--files" in cmds[0]
    ends = b"\0" if files else b"\n"
    start = time.perf_counter()
    procs = [subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for cmd in cmds]
    seen = {proc.stdout.fileno(): 0 for proc in procs if proc.stdout is not None}
    by_fd = {proc.stdout.fileno(): proc for proc in procs if proc.stdout is not None}
    with selectors.DefaultSelector() as selector:
        for fd in by_fd:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            for key, _ in selector.select():
                chunk = os.read(key.fd, 1 << 16)
                seen[key.fd] += chunk.count(ends)
                if not chunk or seen[key.fd] >= head:
                    selector.unregister(key.fd)
                    by_fd[key.fd].kill()
    for proc in procs:
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    return time.perf_counter() - start


async def tool_batch(call: Callable[[], Awaitable[object]], n: int) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(call() for _ in range(n)))
    return time.perf_counter() - start


def spread(samples: list[float], scale: float = 1e3) -> str:
    return f"{statistics.median(samples) * scale:7.1f} ({min(samples) * scale:.1f}-{max(samples) * scale:.1f})"


async def run(tree: str, files: int, rounds: int, only: list[str]) -> None:
    rg = shutil.which("rg")
    if rg is None:
        print("rg is not on PATH: nothing to compare with")
        return
    flags = [rg, "--no-config", "--sort", "path", "--hidden", "--no-require-git", "-n", "--null", "--no-heading", "--with-filename"]
    async with open_tool_service([tree]) as service:
        client = service.client
        pid = service.proc.pid  # type: ignore[attr-defined]
        kinds: dict[str, tuple[Callable[[], Awaitable[object]], list[str]]] = {
            "narrow grep": (lambda: client.grep("needle_in_haystack", path=tree), [*flags, "-e", "needle_in_haystack", "."]),
            "broad grep": (lambda: client.grep("quick", path=tree), [*flags, "-e", "quick", "."]),
            "find_files": (
                lambda: client.find_files("f007.txt", path=tree),
                [rg, "--no-config", "--files", "--null", "--sort", "path", "--hidden", "--no-require-git", "-g", "f007.txt", "."],
            ),
        }
        print(f"tree: {files} files; rounds: {rounds}; load average at start {os.getloadavg()}")
        for kind, (call, cmd) in kinds.items():
            if only and kind not in only:
                continue
            await call()  # warm the page cache and the service
            rg_batch([cmd], tree, COUNT_LIMIT)
            tool: dict[int, list[float]] = {n: [] for n in LEVELS}
            floor: dict[int, list[float]] = {n: [] for n in LEVELS}
            cpu: dict[int, list[float]] = {n: [] for n in LEVELS}
            for r in range(rounds):
                for n in LEVELS:
                    if r % 2:
                        floor[n].append(rg_batch([cmd] * n, tree, COUNT_LIMIT))
                    before = cpu_s(pid)
                    tool[n].append(await tool_batch(call, n))
                    cpu[n].append((cpu_s(pid) - before) / n)
                    if not r % 2:
                        floor[n].append(rg_batch([cmd] * n, tree, COUNT_LIMIT))
            print(f"\n{kind} (load average {os.getloadavg()[0]:.2f})")
            print(f"  {'N':>2}  {'osprey ms':>22}  {'rg ms':>22}  curve osprey  curve rg  ratio osprey/rg (min-max)  dispatcher CPU/call ms")
            base_t, base_f = statistics.median(tool[1]), statistics.median(floor[1])
            for n in LEVELS:
                ratios = [t / f for t, f in zip(tool[n], floor[n], strict=True)]
                print(
                    f"  {n:>2}  {spread(tool[n]):>22}  {spread(floor[n]):>22}  {statistics.median(tool[n]) / base_t:12.2f}"
                    f"  {statistics.median(floor[n]) / base_f:8.2f}  {spread(ratios, 1):>25}  {spread(cpu[n])}"
                )
            top = LEVELS[-1]
            figure(f"{kind}, {top} at once against {top} rg processes", statistics.median(tool[top]) / statistics.median(floor[top]), "x", floor=1.0)
            figure(f"{kind}, service CPU per call at {top} at once", statistics.median(cpu[top]) * 1e3, "ms")


def main() -> None:
    files = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    only = [k.replace("-", " ") for k in sys.argv[3:]]  # e.g. narrow-grep find_files
    ensure_bytecode()
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp, "tree")
        tree.mkdir()
        make_tree(tree, files)
        os.sync()
        asyncio.run(run(str(tree), files, rounds, only))


if __name__ == "__main__":
    main()
