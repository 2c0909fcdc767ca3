"""Peak memory of grep and find_files against ripgrep's, on a 50,000-file tree and a big file.

Each case starts a fresh local dispatcher (the ToolService's servicer as a session runs it),
makes one call, and reports the growth of the servicer's peak RSS (VmHWM after the call minus
before it) beside the peak RSS of `rg` run with the same flags (`--sort path --hidden
--no-require-git`, its output cut after COUNT_LIMIT lines, as `| head` would, which is where the
tool stops too). The tool's own ripgrep or Python worker is measured apart, in a fresh process
that calls `osprey_sidecar.search` directly (its largest child's peak by ru_maxrss: an upper
bound, as it counts the pages the child shared with that process before exec). "holding all" is what
the matching lines themselves take, a lower bound for a search that held every match.
Goal: tens of MB whatever the tree or file size; the servicer's growth far below "holding all".
Usage: grep_memory.py [FILES] [SIZE_MB]   (defaults 50000 and 300; made in a temporary directory)
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import figure  # noqa: E402

from osprey.toolservice.homes import open_tool_service  # noqa: E402
from osprey_sidecar.search import COUNT_LIMIT  # noqa: E402

LINE = b"the quick brown fox jumps over the lazy dog 0123456789 abcdefghijklmnopqrstuvwxyz\n"
TREE_LINES = 40  # per file of the tree, every one matching the broad pattern

PROBE = r"""
import json, resource, sys, time
from osprey_sidecar.errors import ToolFailure
from osprey_sidecar.paths import Roots
from osprey_sidecar.search import grep
root, pattern, engine = sys.argv[1:4]
extra = json.loads(sys.argv[4])
start = time.perf_counter()
try:
    r = grep(Roots([root]), pattern, engine=engine, **extra)
    outcome = {"matches": len(r.match_lines), "total": r.total, "truncated": r.truncated, "engine": r.engine}
except ToolFailure as exc:
    outcome = {"failure": exc.category}
outcome["seconds"] = round(time.perf_counter() - start, 3)
# VmHWM, not ru_maxrss: the latter keeps the peak of whatever process forked this one.
outcome["self_mb"] = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
outcome["child_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps(outcome))
"""


def probe(root: Path, pattern: str, engine: str, **extra: object) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", PROBE, str(root), pattern, engine, json.dumps(extra)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def vm_hwm_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:")) / 1024


def rg_peak(cmd: list[str], cwd: Path) -> tuple[float | None, float]:
    """Peak RSS (MB, by GNU time: a child forked from this process would count this process's
    pages too) and wall time of `cmd`, its output cut after COUNT_LIMIT lines (it then dies of
    SIGPIPE, as under `| head`)."""
    time_cmd = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)
    with tempfile.NamedTemporaryFile("r") as report:
        full = [time_cmd, "-f", "%M", "-o", report.name, *cmd] if time_cmd else cmd
        start = time.perf_counter()
        proc = subprocess.Popen(full, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None
        seen = 0
        while seen < COUNT_LIMIT and (chunk := proc.stdout.read1(1 << 16)):
            seen += chunk.count(b"\n")
        proc.stdout.close()
        proc.wait()
        seconds = time.perf_counter() - start
        lines = report.read().split()
    return (int(lines[-1]) / 1024 if time_cmd and lines and lines[-1].isdigit() else None), seconds


async def servicer_case(root: Path, call: str, pattern: str) -> tuple[float, float, float, str]:
    """(servicer peak before, growth, seconds, outcome) of one call in a fresh dispatcher."""
    async with open_tool_service([str(root)]) as service:
        pid = service.proc.pid  # type: ignore[attr-defined]
        before = vm_hwm_mb(pid)
        start = time.perf_counter()
        if call == "grep":
            r = await service.client.grep(pattern)
            outcome = f"{len(r.matches)} returned, total {r.total}{'+' if r.truncated else ''}"
        else:
            f = await service.client.find_files(pattern)
            outcome = f"{len(f.paths)} returned, total {f.total}{'+' if f.truncated else ''}"
        seconds = time.perf_counter() - start
        return before, vm_hwm_mb(pid) - before, seconds, outcome


def make_tree(root: Path, files: int) -> None:
    text = LINE * TREE_LINES
    for d in range(files // 100):
        folder = root / f"d{d:04d}"
        folder.mkdir()
        for f in range(100):
            (folder / f"f{f:03d}.txt").write_bytes(text)


def make_file(path: Path, size_mb: int) -> None:
    block = LINE * (1024 * 1024 // len(LINE))
    with path.open("wb") as fh:
        written = 0
        while written < size_mb * 1024 * 1024:
            fh.write(block)
            written += len(block)


def main() -> None:
    files = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    size_mb = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    rg = shutil.which("rg")
    with tempfile.TemporaryDirectory() as tmp:
        tree, big = Path(tmp, "tree"), Path(tmp, "big")
        tree.mkdir()
        big.mkdir()
        start = time.perf_counter()
        make_tree(tree, files)
        make_file(big / "big.txt", size_mb)
        print(f"made {files} files of {TREE_LINES} lines and a {size_mb} MB file in {time.perf_counter() - start:.1f} s; COUNT_LIMIT {COUNT_LIMIT}")
        cases = [
            ("grep broad (every line) over the tree", tree, "grep", "quick", files * TREE_LINES * len(LINE)),
            ("grep none over the tree", tree, "grep", "zzz_not_there", 0),
            (f"grep broad over {size_mb} MB", big, "grep", "quick", size_mb * 1024 * 1024),
            ('grep "." over the tree', tree, "grep", ".", files * TREE_LINES * len(LINE)),
            ("find_files broad over the tree", tree, "find", "*.txt", files * len(str(tree / "d0000/f000.txt"))),
            ("find_files none over the tree", tree, "find", "*.nothing", 0),
        ]
        for name, root, call, pattern, all_bytes in cases:
            before, growth, seconds, outcome = asyncio.run(servicer_case(root, call, pattern))
            line = f"{name}: {outcome}; servicer +{growth:.1f} MB (from {before:.0f} MB) in {seconds * 1e3:.0f} ms"
            figure(f"{name}: servicer memory growth", growth, "MB")
            if rg is not None:
                flags = [rg, "--no-config", "--sort", "path", "--hidden", "--no-require-git"]
                cmd = [*flags, "--files", "-g", pattern] if call == "find" else [*flags, "-n", "-e", pattern]
                peak, rg_s = rg_peak(cmd, root)
                line += f"; rg {'?' if peak is None else f'{peak:.1f}'} MB in {rg_s * 1e3:.0f} ms"
            if all_bytes:
                line += f"; holding all would take >= {all_bytes / 2**20:.0f} MB"
            print(line)
        for engine in ("ripgrep", "python"):
            print(f'tool\'s own child, grep "." over {size_mb} MB ({engine}): {probe(big, ".", engine)}')
            print(f"tool's own child, grep broad over the tree ({engine}): {probe(tree, 'quick', engine)}")
        redos = Path(tmp, "redos")
        redos.mkdir()
        (redos / "a.txt").write_text("a" * 40 + "\n")
        print(f"(?=(a+)+b) over 40 a's, budget 2 s: {probe(redos, '(?=(a+)+b)', 'python', budget_s=2.0)}")


if __name__ == "__main__":
    main()
