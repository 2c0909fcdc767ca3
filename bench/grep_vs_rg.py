"""grep and find_files (through the local ToolService) against ripgrep given the same flags.

Trees (made in a temporary directory): 1,000 and 50,000 small files, 100 a directory, and one big
file (BIG_MB). Patterns: broad (every line matches), narrow (one line in 1,000 files) and
none (nothing matches: the whole tree is read).

Like-for-like floor. The tool walks in path order (hidden files searched, .gitignore honoured,
binary files skipped), returns the first `limit` matches and counts on to COUNT_LIMIT, then
stops. ripgrep gets the same flags: `--sort path --hidden --no-require-git`, and its output is
cut where the tool stops reading: after COUNT_LIMIT lines (grep) or paths (find_files), by
killing it there, as `| head -n COUNT_LIMIT` would. `rg -m N` is not the floor: it caps each
file, not the search. Where the tool reads everything (no match), the unsorted multi-threaded
`rg` is printed too, as the best ripgrep can do. find_files is also set beside `find -name`.

Every round calls the tool and its floors in turn (the order alternating), so load from other
work on the machine hits both; medians and p90 of ROUNDS rounds, the ratio of medians beside,
and the paired ratios (each round's tool time over its floor's: median, min-max) with the load
average. Goal: grep and find_files within 1.3x of `rg` given the same flags.
The service's CPU for each call (all its threads, from schedstat; ripgrep's own CPU is not in it)
is printed beside: what a call costs beyond ripgrep, fixed and scaling with the results.

With --baseline-python PY, a second service runs the sidecar that PY imports (e.g. a copy of the
venv whose editable finder points at a git worktree of HEAD), and every round calls both and the
floor in turn: each round's time and CPU over the baseline's, paired.
Usage: grep_vs_rg.py [--rounds N] [--baseline-python PY] [FILES[,FILES...]] [BIG_MB]
(defaults 1000,50000 and 200; BIG_MB 0 for none; --help for the options)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import figure, median, percentile  # noqa: E402

from osprey.toolservice.client import ToolClient  # noqa: E402
from osprey.toolservice.homes import open_tool_service  # noqa: E402
from osprey_sidecar.search import COUNT_LIMIT  # noqa: E402

ROUNDS = 5
NARROW_EVERY = 1000  # one file in this many holds the narrow pattern
LINE = "the quick brown fox jumps over the lazy dog {i}\n"


def make_tree(root: Path, files: int) -> None:
    per_dir = 100
    for d in range(files // per_dir):
        folder = root / f"d{d:04d}"
        folder.mkdir()
        for f in range(per_dir):
            n = d * per_dir + f
            text = "".join(LINE.format(i=i) for i in range(20))
            if n % NARROW_EVERY == 0:
                text += "needle_in_haystack here\n"
            (folder / f"f{f:03d}.txt").write_text(text)


def make_big(path: Path, size_mb: int) -> None:
    block = (LINE.format(i=0) * (1024 * 1024 // len(LINE))).encode()
    with path.open("wb") as fh:
        for _ in range(size_mb):
            fh.write(block)
        fh.write(b"needle_in_haystack at the end\n")


def head_run(cmd: list[str], cwd: str, lines: int) -> float:
    """Wall time of `cmd` until it exits or has printed `lines` lines (then it is killed)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    seen = 0
    while seen < lines:
        chunk = proc.stdout.read1(1 << 16)
        if not chunk:
            break
        seen += chunk.count(b"\n")
    proc.kill()
    proc.wait()
    proc.stdout.close()
    return time.perf_counter() - start


def fmt(samples: list[float]) -> str:
    return f"p50 {median(samples) * 1e3:7.1f} ms  p90 {percentile(samples, 90) * 1e3:7.1f} ms"


def paired(tool: list[float], floor: list[float]) -> str:
    """The round-by-round ratios tool/floor: median (min-max)."""
    ratios = [t / f for t, f in zip(tool, floor, strict=True)]
    return f"paired {median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def _children() -> set[int]:
    me = os.getpid()
    return {int(pid) for task in os.listdir(f"/proc/{me}/task") for pid in Path(f"/proc/{me}/task/{task}/children").read_text().split()}


def service_cpu(pid: int) -> float:
    """CPU seconds the process `pid` has run, all its threads (schedstat: nanoseconds)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
    return total / 1e9


@contextlib.asynccontextmanager
async def service(roots: list[str], python: str | None = None) -> AsyncIterator[tuple[ToolClient, int]]:
    """A local ToolService (its dispatcher started by `python`, else this interpreter) and its pid."""
    before = _children()
    saved = sys.executable
    if python:
        sys.executable = python  # the dispatcher is started with sys.executable
    try:
        async with contextlib.AsyncExitStack() as stack:
            home = await stack.enter_async_context(open_tool_service(roots))
            sys.executable = saved
            (pid,) = _children() - before
            yield home.client, pid
    finally:
        sys.executable = saved


class Services:
    """The service measured, and the baseline service if any."""

    def __init__(self, tool: tuple[ToolClient, int], baseline: tuple[ToolClient, int] | None) -> None:
        self.tool, self.baseline = tool, baseline


Call = Callable[[ToolClient], Awaitable[str]]


async def compare(name: str, services: Services, call: Call, floors: dict[str, Callable[[], float]]) -> None:
    sides = {"tool": services.tool, **({"baseline": services.baseline} if services.baseline else {})}
    note = ""
    for client, _ in sides.values():
        note = await call(client)  # warm the page cache and the service
    for floor in floors.values():
        floor()
    times: dict[str, list[float]] = {k: [] for k in [*sides, *floors]}
    cpus: dict[str, list[float]] = {k: [] for k in sides}
    loads: list[float] = []
    for r in range(ROUNDS):
        order = [*sides, *floors]
        order = order[r % len(order) :] + order[: r % len(order)]  # each goes first in turn
        for k in order:
            start = time.perf_counter()
            if k in floors:
                floors[k]()
            else:
                client, pid = sides[k]
                cpu = service_cpu(pid)
                await call(client)
                cpus[k].append(service_cpu(pid) - cpu)
            times[k].append(time.perf_counter() - start)
        loads.append(os.getloadavg()[0])
    print(f"{name}: {note} (load average {min(loads):.2f}-{max(loads):.2f})")
    for k in sides:
        print(f"  {k:<11} {fmt(times[k])}   service CPU p50 {median(cpus[k]) * 1e3:.2f} ms")
    for k in floors:
        line = f"  {k:<11} {fmt(times[k])}   ratio tool/{k} {median(times['tool']) / median(times[k]):.2f}, {paired(times['tool'], times[k])}"
        if "baseline" in sides:
            line += f"; baseline {paired(times['baseline'], times[k])}"
        print(line)
    if "baseline" in sides:
        print(f"  tool/baseline: time {paired(times['tool'], times['baseline'])}, service CPU {paired(cpus['tool'], cpus['baseline'])}")
    first = next(iter(floors))
    figure(f"{name} against {first}", median(times["tool"]) / median(times[first]), "x", floor=1.0)


async def run(tree: str, big: str, files: int, big_mb: int, baseline: str | None) -> None:
    rg = shutil.which("rg")
    if rg is None:
        print("rg is not on PATH: nothing to compare with")
        return
    flags = [rg, "--no-config", "--sort", "path", "--hidden", "--no-require-git", "-n", "--no-heading", "--with-filename"]
    async with contextlib.AsyncExitStack() as stack:
        tool = await stack.enter_async_context(service([tree, big]))
        services = Services(tool, await stack.enter_async_context(service([tree, big], baseline)) if baseline else None)

        def grep_case(where: str, pattern: str) -> tuple[Call, dict[str, Callable[[], float]]]:
            async def call(client: ToolClient) -> str:
                r = await client.grep(pattern, path=where)
                return f"{len(r.matches)} returned, total {r.total}{'+' if r.truncated else ''}, engine {r.engine}"

            floors = {"rg|head": lambda: head_run([*flags, "-e", pattern], where, COUNT_LIMIT)}
            return call, floors

        print(f"tree: {files} files; big file: {big_mb} MB; rounds: {ROUNDS}; COUNT_LIMIT {COUNT_LIMIT}")
        for label, pattern in (("broad", "quick"), ("narrow", "needle_in_haystack"), ("none", "zzz_not_there")):
            call, floors = grep_case(tree, pattern)
            if label != "broad":
                floors["rg (full)"] = lambda p=pattern: head_run([rg, "--no-config", "-n", "-e", p], tree, 1 << 62)
            await compare(f"grep {label} {pattern!r} over {files} files", services, call, floors)
        if big_mb:
            for label, pattern in (("broad", "quick"), ("narrow", "needle_in_haystack")):
                call, floors = grep_case(big, pattern)
                await compare(f"grep {label} {pattern!r} over one {big_mb} MB file", services, call, floors)

        for label, glob in (("broad", "*.txt"), ("narrow", "f007.txt"), ("none", "*.nothing")):
            async def find_call(client: ToolClient, g: str = glob) -> str:
                r = await client.find_files(g, path=tree)
                return f"{len(r.paths)} returned, total {r.total}{'+' if r.truncated else ''}"

            find_floors = {
                "rg --files": lambda g=glob: head_run([rg, "--no-config", "--files", "--sort", "path", "--hidden", "--no-require-git", "-g", g], tree, COUNT_LIMIT),
                "find": lambda g=glob: head_run(["find", ".", "-type", "f", "-name", g], tree, COUNT_LIMIT),
            }
            await compare(f"find_files {label} {glob!r} over {files} files", services, find_call, find_floors)


def main() -> None:
    global ROUNDS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="?", default="1000,50000", help="tree sizes, comma-separated (default 1000,50000)")
    parser.add_argument("big_mb", nargs="?", type=int, default=200, help="size of the one big file in MB, 0 for none (default 200)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds per case (default {ROUNDS})")
    parser.add_argument("--baseline-python", metavar="PY", help="also run the sidecar PY imports, paired round by round")
    args = parser.parse_args()
    ROUNDS = args.rounds
    sizes = [int(n) for n in args.files.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp, "big")
        big.mkdir()
        make_big(big / "big.txt", args.big_mb)
        for index, files in enumerate(sizes):
            tree = Path(tmp, f"tree{files}")
            tree.mkdir()
            start = time.perf_counter()
            make_tree(tree, files)
            os.sync()
            print(f"made the tree of {files} files in {time.perf_counter() - start:.1f} s")
            # The big file is searched once, with the last tree.
            asyncio.run(run(str(tree), str(big), files, args.big_mb if index == len(sizes) - 1 else 0, args.baseline_python))


if __name__ == "__main__":
    main()
