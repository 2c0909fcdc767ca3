"""Added cost of one ToolService call through the local dispatcher over calling the tool directly.

Measures `read_file` of a small file: the tool function in-process versus the same call
through ToolClient -> gRPC over the private unix socket -> servicer. Goal: <= 0.5 ms at p50.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import figure, percentile  # noqa: E402

from osprey.toolservice.homes import open_tool_service  # noqa: E402
from osprey_sidecar.files import read_file  # noqa: E402
from osprey_sidecar.paths import Roots  # noqa: E402

CALLS = 3000
WARMUP = 300


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "small.py").write_text("".join(f"line {i} of a small file\n" for i in range(40)))
        roots = Roots([tmp])
        direct = []
        for i in range(CALLS + WARMUP):
            start = time.perf_counter()
            read_file(roots, "small.py")
            if i >= WARMUP:
                direct.append(time.perf_counter() - start)
        async with open_tool_service([tmp]) as service:
            client = service.client
            remote = []
            for i in range(CALLS + WARMUP):
                start = time.perf_counter()
                await client.read_file("small.py")
                if i >= WARMUP:
                    remote.append(time.perf_counter() - start)
    d50, d99 = percentile(direct, 50) * 1e3, percentile(direct, 99) * 1e3
    r50, r99 = percentile(remote, 50) * 1e3, percentile(remote, 99) * 1e3
    print(f"read_file direct:            p50 {d50:.3f} ms  p99 {d99:.3f} ms")
    print(f"read_file via local ToolService: p50 {r50:.3f} ms  p99 {r99:.3f} ms")
    print(f"added cost of the ToolService: p50 {r50 - d50:.3f} ms  p99 {r99 - d99:.3f} ms  (goal: p50 <= 0.5 ms)")
    figure("read_file added by the ToolService, p50", r50 - d50, "ms", floor=d50)


if __name__ == "__main__":
    asyncio.run(main())
