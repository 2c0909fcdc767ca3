"""Small helpers the benchmark scripts share."""

from __future__ import annotations

import compileall
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def time_command(cmd: Sequence[str], runs: int, **kwargs: object) -> list[float]:
    """Wall times (seconds) of `runs` runs of a command, output discarded."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, **kwargs)  # type: ignore[arg-type]
        times.append(time.perf_counter() - start)
    return times


def ensure_bytecode() -> None:
    """Compile Osprey's modules to bytecode, as an install has them. Where PYTHONDONTWRITEBYTECODE
    is set (it is on some machines), an editable checkout would otherwise compile every changed
    module from source at each start, and start-up figures would measure the compiler."""
    for package in ("host", "sidecar"):
        compileall.compile_dir(REPO / package, quiet=1)


FIGURE_PREFIX = "FIGURE "


def figure(key: str, value: float, unit: str, *, floor: float | None = None) -> None:
    """Print one headline figure in the form `run_all.py` collects (a line `FIGURE {json}`): `key`
    names it across runs, `value` is in `unit` ("ms", "x" for a ratio, "MB"), `floor` is the
    figure it is compared with, when there is one. The load average at the time goes with it."""
    import json
    import os

    record = {"key": key, "value": value, "unit": unit, "floor": floor, "load": os.getloadavg()[0]}
    print(FIGURE_PREFIX + json.dumps(record), flush=True)


def serve_grpc_floor(socket_path: str, handlers: dict[str, object]) -> None:
    """A bare grpcio server with the sidecar's workers and channel options, serving `handlers`
    (method name to grpcio method handler) as the service `floor.Floor` on a unix socket: the
    floor of the ToolService benchmarks. Says "ready" on stdout once it listens, and stops when
    its stdin closes (run it in a child process, `start_grpc_floor`)."""
    import sys
    from concurrent import futures

    import grpc

    from osprey_sidecar.server import MAX_WORKERS
    from osprey_sidecar.wire import CHANNEL_OPTIONS

    handler = grpc.method_handlers_generic_handler("floor.Floor", handlers)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=MAX_WORKERS), options=list(CHANNEL_OPTIONS))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix:{socket_path}")
    server.start()
    print("ready", flush=True)
    sys.stdin.read()
    server.stop(0)


def start_grpc_floor(script: str, socket_path: str, cwd: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`script --floor-server SOCKET` in a child process, once it listens; it stops when its
    stdin closes."""
    import sys

    server = subprocess.Popen([sys.executable, script, "--floor-server", socket_path], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env=env, cwd=cwd)
    assert server.stdout is not None
    server.stdout.readline()
    return server
