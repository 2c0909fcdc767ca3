"""The grep tool (through the local ToolService) versus the `rg` command on the same large tree.

The tree is this Python's standard library directory (site-packages included) unless a path is
given. Both sides search the whole tree; the tool also parses, sorts and caps its result.
Goal: tool / rg wall-time ratio <= 1.5. Where rg is absent the baseline is `grep -rn`.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import sysconfig
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import median, time_command  # noqa: E402

from osprey.dispatch import open_tool_service  # noqa: E402

RUNS = 7
PATTERNS = [r"def test_\w+", r"class \w+Error\(", r"TODO|FIXME"]


async def tool_times(tree: str, pattern: str) -> tuple[list[float], int, str]:
    async with open_tool_service([tree]) as service:
        times = []
        total, engine = 0, ""
        await service.client.grep(pattern)  # warm the page cache like the baseline's first run
        for _ in range(RUNS):
            start = time.perf_counter()
            result = await service.client.grep(pattern)
            times.append(time.perf_counter() - start)
            total, engine = result.total, result.engine
        return times, total, engine


def main() -> None:
    tree = sys.argv[1] if len(sys.argv) > 1 else sysconfig.get_paths()["stdlib"]
    rg = shutil.which("rg")
    print(f"tree: {tree}")
    for pattern in PATTERNS:
        baseline_cmd = [rg, "-n", pattern, "."] if rg else ["grep", "-rnE", pattern, "."]
        time_command(baseline_cmd, 1, cwd=tree)
        base = median(time_command(baseline_cmd, RUNS, cwd=tree))
        times, total, engine = asyncio.run(tool_times(tree, pattern))
        tool = median(times)
        name = "rg" if rg else "grep -rn"
        print(f"pattern {pattern!r}: {total} matching lines; {name} {base * 1e3:.0f} ms, grep tool ({engine}) {tool * 1e3:.0f} ms, ratio {tool / base:.2f} (goal <= 1.5)")


if __name__ == "__main__":
    main()
