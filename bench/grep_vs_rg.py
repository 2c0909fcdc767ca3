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
Usage: grep_vs_rg.py [FILES[,FILES...]] [BIG_MB]   (defaults 1000,50000 and 200; BIG_MB 0 for none)
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import figure, median, percentile  # noqa: E402

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


async def compare(name: str, tool: Callable[[], Awaitable[str]], floors: dict[str, Callable[[], float]]) -> None:
    note = await tool()  # warm the page cache and the service
    for floor in floors.values():
        floor()
    tool_t: list[float] = []
    floor_t: dict[str, list[float]] = {k: [] for k in floors}
    for r in range(ROUNDS):
        if r % 2:
            for k, floor in floors.items():
                floor_t[k].append(floor())
        start = time.perf_counter()
        await tool()
        tool_t.append(time.perf_counter() - start)
        if not r % 2:
            for k, floor in floors.items():
                floor_t[k].append(floor())
    print(f"{name}: {note} (load average {os.getloadavg()[0]:.2f})")
    print(f"  tool        {fmt(tool_t)}")
    for k, samples in floor_t.items():
        print(f"  {k:<11} {fmt(samples)}   ratio tool/{k} {median(tool_t) / median(samples):.2f}, {paired(tool_t, samples)}")
    first = next(iter(floor_t))
    figure(f"{name} against {first}", median(tool_t) / median(floor_t[first]), "x", floor=1.0)


async def run(tree: str, big: str, files: int, big_mb: int) -> None:
    rg = shutil.which("rg")
    if rg is None:
        print("rg is not on PATH: nothing to compare with")
        return
    flags = [rg, "--no-config", "--sort", "path", "--hidden", "--no-require-git", "-n", "--no-heading", "--with-filename"]
    async with open_tool_service([tree, big]) as service:
        client = service.client

        def grep_case(where: str, pattern: str) -> tuple[Callable[[], Awaitable[str]], dict[str, Callable[[], float]]]:
            async def tool() -> str:
                r = await client.grep(pattern, path=where)
                return f"{len(r.matches)} returned, total {r.total}{'+' if r.truncated else ''}, engine {r.engine}"

            floors = {"rg|head": lambda: head_run([*flags, "-e", pattern], where, COUNT_LIMIT)}
            return tool, floors

        print(f"tree: {files} files; big file: {big_mb} MB; rounds: {ROUNDS}; COUNT_LIMIT {COUNT_LIMIT}")
        for label, pattern in (("broad", "quick"), ("narrow", "needle_in_haystack"), ("none", "zzz_not_there")):
            tool, floors = grep_case(tree, pattern)
            if label != "broad":
                floors["rg (full)"] = lambda p=pattern: head_run([rg, "--no-config", "-n", "-e", p], tree, 1 << 62)
            await compare(f"grep {label} {pattern!r} over {files} files", tool, floors)
        if big_mb:
            for label, pattern in (("broad", "quick"), ("narrow", "needle_in_haystack")):
                tool, floors = grep_case(big, pattern)
                await compare(f"grep {label} {pattern!r} over one {big_mb} MB file", tool, floors)

        for label, glob in (("broad", "*.txt"), ("narrow", "f007.txt"), ("none", "*.nothing")):
            async def find_tool(g: str = glob) -> str:
                r = await client.find_files(g, path=tree)
                return f"{len(r.paths)} returned, total {r.total}{'+' if r.truncated else ''}"

            find_floors = {
                "rg --files": lambda g=glob: head_run([rg, "--no-config", "--files", "--sort", "path", "--hidden", "--no-require-git", "-g", g], tree, COUNT_LIMIT),
                "find": lambda g=glob: head_run(["find", ".", "-type", "f", "-name", g], tree, COUNT_LIMIT),
            }
            await compare(f"find_files {label} {glob!r} over {files} files", find_tool, find_floors)


def main() -> None:
    sizes = [int(n) for n in (sys.argv[1] if len(sys.argv) > 1 else "1000,50000").split(",")]
    big_mb = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp, "big")
        big.mkdir()
        make_big(big / "big.txt", big_mb)
        for index, files in enumerate(sizes):
            tree = Path(tmp, f"tree{files}")
            tree.mkdir()
            start = time.perf_counter()
            make_tree(tree, files)
            os.sync()
            print(f"made the tree of {files} files in {time.perf_counter() - start:.1f} s")
            # The big file is searched once, with the last tree.
            asyncio.run(run(str(tree), str(big), files, big_mb if index == len(sizes) - 1 else 0))


if __name__ == "__main__":
    main()
