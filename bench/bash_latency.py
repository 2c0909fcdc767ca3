"""Latency of a trivial `bash` call through the ToolService, beside its floors, interleaved.

Subjects, alternated call by call in one run (the order rotates every round):

- `toolservice`: `bash "echo hi"` through the local dispatcher (ToolClient -> gRPC over its
  private unix socket -> servicer in a child process -> bash);
- `subprocess.run`: the same `bash -c "echo hi"` run in this process (the issue's floor);
- `grpc echo`: a bare grpcio server-streaming call (two replies, as bash sends an output and
  an exit event) to a child process on a unix socket, same thread pool and channel options as
  the sidecar: the transport floor;
- `grpc+run`: the same bare server whose handler runs the command with `subprocess.run` and
  streams its output back: the floor in the ToolService's own process layout.

Then 16 calls at once, each subject in turn: per-call p50/p90/p99 and the wall time of a batch.
Goal: toolservice p90 within 2x subprocess.run's; `grpc+run` is the floor of that ratio in the
ToolService's process layout (its `FIGURE` lines give it as the floor).

`--rounds N` (default 400) and `--batches N` (default 30) scale the run; the full run takes
well under a minute on two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent import futures
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import figure, percentile, serve_grpc_floor, start_grpc_floor  # noqa: E402

COMMAND = "echo hi"
CONCURRENCY = 16
ECHO = "/floor.Floor/Echo"
RUN = "/floor.Floor/Run"


def serve_floor(socket_path: str) -> None:
    """The bare grpcio server the floors talk to (run in a child process)."""
    import grpc

    def echo(request: bytes, context: object) -> Iterator[bytes]:
        yield request
        yield b"0"

    def run(request: bytes, context: object) -> Iterator[bytes]:
        done = subprocess.run(["bash", "-c", request.decode()], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, check=False)
        yield done.stdout
        yield str(done.returncode).encode()

    serve_grpc_floor(socket_path, {
        "Echo": grpc.unary_stream_rpc_method_handler(echo),
        "Run": grpc.unary_stream_rpc_method_handler(run),
    })


def start_floor_server(socket_path: str, env: dict[str, str], cwd: str) -> subprocess.Popen[bytes]:
    """The floor server in a child process, once it listens; it stops when its stdin closes."""
    return start_grpc_floor(__file__, socket_path, cwd, env)


def summary(samples: list[float]) -> tuple[float, float, float]:
    return percentile(samples, 50) * 1e3, percentile(samples, 90) * 1e3, percentile(samples, 99) * 1e3


def show(name: str, samples: list[float], floor: list[float] | None = None) -> None:
    p50, p90, p99 = summary(samples)
    line = f"  {name:<16} p50 {p50:7.3f} ms  p90 {p90:7.3f} ms  p99 {p99:7.3f} ms  (n={len(samples)})"
    if floor is not None:
        f50, f90, f99 = summary(floor)
        line += f"   x subprocess.run: p50 {p50 / f50:.2f}  p90 {p90 / f90:.2f}  p99 {p99 / f99:.2f}"
    print(line)


async def main(rounds: int, batches: int) -> None:
    import grpc

    from osprey.config import tool_environment
    from osprey.toolservice.homes import open_tool_service
    from osprey_sidecar.wire import CHANNEL_OPTIONS

    env = tool_environment()
    pool = futures.ThreadPoolExecutor(max_workers=CONCURRENCY)
    with tempfile.TemporaryDirectory() as workspace:
        floor_socket = os.path.join(workspace, "floor.sock")
        server = start_floor_server(floor_socket, env, workspace)
        assert server.stdin is not None
        channel = grpc.aio.insecure_channel(f"unix:{floor_socket}", options=list(CHANNEL_OPTIONS))
        echo_call = channel.unary_stream(ECHO)
        run_call = channel.unary_stream(RUN)
        try:
            async with open_tool_service([workspace], env=env) as service:
                client = service.client

                async def toolservice() -> None:
                    result = await client.bash(COMMAND)
                    assert result.output == "hi\n" and result.exit_code == 0, result

                def run_here() -> None:
                    done = subprocess.run(["bash", "-c", COMMAND], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=workspace, check=False)
                    assert done.stdout == b"hi\n"

                async def subprocess_run() -> None:
                    run_here()

                async def subprocess_run_threaded() -> None:
                    await asyncio.get_running_loop().run_in_executor(pool, run_here)

                async def grpc_echo() -> None:
                    replies = [reply async for reply in echo_call(COMMAND.encode())]
                    assert replies == [COMMAND.encode(), b"0"]

                async def grpc_run() -> None:
                    replies = [reply async for reply in run_call(COMMAND.encode())]
                    assert replies == [b"hi\n", b"0"]

                sequential: dict[str, Callable[[], Awaitable[None]]] = {
                    "toolservice": toolservice, "subprocess.run": subprocess_run, "grpc echo": grpc_echo, "grpc+run": grpc_run,
                }
                concurrent: dict[str, Callable[[], Awaitable[None]]] = {
                    "toolservice": toolservice, "subprocess.run": subprocess_run_threaded, "grpc echo": grpc_echo, "grpc+run": grpc_run,
                }
                for call in sequential.values():  # warm every path up
                    for _ in range(20):
                        await call()

                times: dict[str, list[float]] = {name: [] for name in sequential}
                names = list(sequential)
                for r in range(rounds):
                    for name in names[r % len(names):] + names[: r % len(names)]:
                        start = time.perf_counter()
                        await sequential[name]()
                        times[name].append(time.perf_counter() - start)

                async def timed(call: Callable[[], Awaitable[None]], into: list[float]) -> None:
                    start = time.perf_counter()
                    await call()
                    into.append(time.perf_counter() - start)

                per_call: dict[str, list[float]] = {name: [] for name in concurrent}
                walls: dict[str, list[float]] = {name: [] for name in concurrent}
                for b in range(batches):
                    for name in names[b % len(names):] + names[: b % len(names)]:
                        start = time.perf_counter()
                        await asyncio.gather(*(timed(concurrent[name], per_call[name]) for _ in range(CONCURRENCY)))
                        walls[name].append(time.perf_counter() - start)
        finally:
            await channel.close()
            server.stdin.close()
            server.wait()
            pool.shutdown()

    print(f"bash {COMMAND!r}, {rounds} interleaved rounds (one call of each subject per round):")
    floor = times["subprocess.run"]
    for name in names:
        show(name, times[name], floor if name != "subprocess.run" else None)
    t50, t90, t99 = summary(times["toolservice"])
    f50, f90, f99 = summary(floor)
    g50, g90, g99 = summary(times["grpc+run"])
    print(f"  goal: toolservice p90 <= 2x subprocess.run ({t90 / f90:.2f}x; the grpc+run floor {g90 / f90:.2f}x), p99 {t99 / f99:.2f}x")
    print(f"  toolservice over grpc+run (same layout): p50 +{t50 - g50:.3f} ms  p90 +{t90 - g90:.3f} ms  p99 +{t99 - g99:.3f} ms")
    figure("bash_latency.p90_x_subprocess_run", t90 / f90, "x", floor=g90 / f90)
    figure("bash_latency.p50_x_subprocess_run", t50 / f50, "x", floor=g50 / f50)
    print(f"{CONCURRENCY} calls at once, {batches} batches per subject, interleaved (subprocess.run from {CONCURRENCY} threads):")
    cfloor = per_call["subprocess.run"]
    for name in names:
        show(name, per_call[name], cfloor if name != "subprocess.run" else None)
    for name in names:
        w = walls[name]
        print(f"  batch wall {name:<16} p50 {percentile(w, 50) * 1e3:7.2f} ms  p90 {percentile(w, 90) * 1e3:7.2f} ms"
              f"   x subprocess.run p50 {percentile(w, 50) / percentile(walls['subprocess.run'], 50):.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--floor-server", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_server:
        serve_floor(args.floor_server)
    else:
        asyncio.run(main(args.rounds, args.batches))
