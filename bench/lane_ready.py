"""Sandbox lane start-up and round trips.

- Lane ready time: from asking for a lane to its first `read_file` answered, p50 and p95, against
  `docker run --rm IMAGE true` in the same run. Goal: ratio <= 1.5.
- `read_file` round trip through the lane versus through the local dispatcher. Goal: <= +1 ms p50.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import percentile, time_command  # noqa: E402

from osprey.config import SandboxSettings  # noqa: E402
from osprey.dispatch import open_tool_service  # noqa: E402
from osprey.lane_image import docker_client, ensure_image  # noqa: E402

STARTS = 15
CALLS = 2000


async def lane_ready_times(workspace: str) -> list[float]:
    times = []
    for i in range(STARTS):
        start = time.perf_counter()
        async with open_tool_service([workspace], sandbox=SandboxSettings(enabled=True), session_id=f"bench-{i}") as service:
            await service.client.read_file("small.txt")
            times.append(time.perf_counter() - start)
    return times


async def round_trips(workspace: str, sandbox: bool) -> list[float]:
    options = SandboxSettings(enabled=True) if sandbox else None
    async with open_tool_service([workspace], sandbox=options, session_id="bench-rt") as service:
        samples = []
        for i in range(CALLS + 200):
            start = time.perf_counter()
            await service.client.read_file("small.txt")
            if i >= 200:
                samples.append(time.perf_counter() - start)
        return samples


def main() -> None:
    image = ensure_image(docker_client())
    with tempfile.TemporaryDirectory() as workspace:
        (Path(workspace) / "small.txt").write_text("".join(f"line {i}\n" for i in range(40)))
        time_command(["docker", "run", "--rm", "--network", "none", "--entrypoint", "true", image], 1)
        baseline = time_command(["docker", "run", "--rm", "--network", "none", "--entrypoint", "true", image], STARTS)
        ready = asyncio.run(lane_ready_times(workspace))
        local = asyncio.run(round_trips(workspace, sandbox=False))
        lane = asyncio.run(round_trips(workspace, sandbox=True))
    b50, b95 = percentile(baseline, 50), percentile(baseline, 95)
    r50, r95 = percentile(ready, 50), percentile(ready, 95)
    print(f"image {image}")
    print(f"docker run --rm IMAGE true:    p50 {b50 * 1e3:.0f} ms  p95 {b95 * 1e3:.0f} ms")
    print(f"lane ready (to first answer):  p50 {r50 * 1e3:.0f} ms  p95 {r95 * 1e3:.0f} ms  ratio p50 {r50 / b50:.2f} (goal <= 1.5)")
    l50, n50 = percentile(local, 50), percentile(lane, 50)
    print(f"read_file local dispatcher:    p50 {l50 * 1e3:.3f} ms  p99 {percentile(local, 99) * 1e3:.3f} ms")
    print(f"read_file through the lane:    p50 {n50 * 1e3:.3f} ms  p99 {percentile(lane, 99) * 1e3:.3f} ms  (+{(n50 - l50) * 1e3:.3f} ms p50; goal <= +1 ms)")


if __name__ == "__main__":
    main()
