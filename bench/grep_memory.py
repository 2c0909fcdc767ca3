"""Peak memory and time of `grep "."` over one large file, per engine, and of a catastrophic pattern.

Each measurement runs `osprey_sidecar.search.grep` in a fresh Python process and reports the
peak RSS of that process (the serving side) and of its largest child (ripgrep or the Python
engine's worker). Goal: tens of MB, whatever the file's size.
Usage: grep_memory.py [SIZE_MB]   (default 300; the file is made in a temporary directory)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
    outcome = {"matches": len(r.matches), "total": r.total, "truncated": r.truncated, "engine": r.engine}
except ToolFailure as exc:
    outcome = {"failure": exc.category}
outcome["seconds"] = time.perf_counter() - start
# VmHWM, not ru_maxrss: the latter keeps the peak of whatever process forked this one.
outcome["self_mb"] = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
outcome["child_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps(outcome))
"""


def probe(root: Path, pattern: str, engine: str, **extra: object) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", PROBE, str(root), pattern, engine, json.dumps(extra)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def make_file(path: Path, size_mb: int) -> None:
    line = b"the quick brown fox jumps over the lazy dog 0123456789 abcdefghijklmnopqrstuvwxyz\n"
    block = line * (1024 * 1024 // len(line))
    with path.open("wb") as fh:
        written = 0
        while written < size_mb * 1024 * 1024:
            fh.write(block)
            written += len(block)


def main() -> None:
    size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        make_file(root / "big.txt", size_mb)
        print(f"made a {size_mb} MB file in {time.perf_counter() - start:.1f} s")
        for engine in ("ripgrep", "python"):
            r = probe(root, ".", engine)
            print(f'grep "." ({engine} requested): {r}')
        redos = root / "redos"
        redos.mkdir()
        (redos / "a.txt").write_text("a" * 40 + "\n")
        try:
            r = probe(redos, "(?=(a+)+b)", "python", budget_s=2.0)
        except subprocess.CalledProcessError as exc:  # a search without a budget parameter
            r = {"error": exc.stderr[-200:]}
        print(f"(?=(a+)+b) over 40 a's, budget 2 s: {r}")


if __name__ == "__main__":
    main()
