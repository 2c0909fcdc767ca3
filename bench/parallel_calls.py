"""Read-only calls at the same time: concurrency curves for each read-only tool, and one model
turn of 16 `read_file` calls against the slowest of them alone.

Curves. For each read-only tool (read_file, list_directory, tree, find_files, grep), 1, 2, 4, 8
and 16 calls at once through the real ToolClient of a started home (the local dispatcher, or
with `--lane` a sandbox lane), the counts alternating round by round; the client sends the
read_file, list_directory and tree calls made together as one batched call of each kind, as a
session does. Beside each figure, its floors:
- `1 call`: one call alone, what k calls take if they run fully in parallel (the goal: k calls
  within 1.5x of it);
- `seq`: the k calls one after another (no parallelism at all);
- `grpc`: k bare gRPC unary calls at once to a bare grpcio server in a child process (same
  thread pool and channel options as the sidecar), as a ratio to one of them: what gRPC
  Python's own per-call work, which holds each process's interpreter lock, allows.

Turn. A real one-turn session (OpenAI dialect against the loopback model server, a started home
handed in, events written as JSON Lines to /dev/null) whose model asks for 16 read_file calls in
one turn (15 files of 200 lines and one of 2,000), alternating with the same 16 calls sent as
one ReadFile call each (the client's batching off) and with the session asking only for the
slowest of them (the 2,000-line file). The figure is the tool phase: from the first call event
to the last result event; the floor is the same for the slowest call alone. Beside it, the CPU
time of that phase in the broker's process (all its threads) and in the local dispatcher's, which a
loaded machine disturbs far less than the wall time.

    .venv/bin/python bench/parallel_calls.py [--lane] [--rounds 5] [--files 2000] [--only curves|turn]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import ensure_bytecode, figure, median, serve_grpc_floor, start_grpc_floor  # noqa: E402

COUNTS = (1, 2, 4, 8, 16)
TOOLS = ("read_file", "list_directory", "tree", "find_files", "grep")
TURN_CALLS = 16
ECHO = "/floor.Floor/Echo"
LINE = "the quick brown fox jumps over the lazy dog {i}\n"


def serve_floor(socket_path: str) -> None:
    """The bare grpcio server of the `grpc` floor (run in a child process)."""
    import grpc

    def echo(request: bytes, context: object) -> bytes:
        return request

    serve_grpc_floor(socket_path, {"Echo": grpc.unary_unary_rpc_method_handler(echo)})


def start_floor_server(socket_path: str, cwd: str) -> subprocess.Popen[bytes]:
    """The floor server in a child process, once it listens; it stops when its stdin closes."""
    return start_grpc_floor(__file__, socket_path, cwd)


def make_workspace(root: Path, files: int) -> None:
    """`files` small files in directories of 100 (one in 100 holds the grep's needle), and the
    turn's files: r0..r14 of 200 lines, r15 of 2,000."""
    for d in range(max(files // 100, TURN_CALLS)):
        folder = root / f"d{d:04d}"
        folder.mkdir()
        for f in range(100):
            text = "".join(LINE.format(i=i) for i in range(20))
            if f == 0:
                text += "needle_in_haystack here\n"
            (folder / f"f{f:03d}.txt").write_text(text)
    for i in range(TURN_CALLS):
        lines = 2000 if i == TURN_CALLS - 1 else 200
        (root / f"r{i}.txt").write_text("".join(f"{n:5} " + LINE.format(i=n) for n in range(lines)))


def tool_calls(client: Any, tool: str) -> Callable[[int], Awaitable[Any]]:
    """Call number i of `tool` (each call on its own path or pattern, as a model's would be)."""
    def call(i: int) -> Awaitable[Any]:
        if tool == "read_file":
            return client.read_file(f"r{i % (TURN_CALLS - 1)}.txt")
        if tool == "list_directory":
            return client.list_directory(f"d{i:04d}")
        if tool == "tree":
            return client.tree(f"d{i:04d}")
        if tool == "find_files":
            return client.find_files(f"f0{i % 10}*.txt")
        return client.grep(f"needle_in_haystack|lazy dog {100 + i}")
    return call


def cpu_seconds(pid: int | None) -> float:
    """CPU time process `pid` has used so far, all its threads (from schedstat: nanoseconds);
    0 without a pid (a lane's sidecar is in its container)."""
    if pid is None:
        return 0.0
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total / 1e9


async def timed_batch(call: Callable[[int], Awaitable[Any]], k: int, pid: int | None) -> tuple[float, float, float]:
    """(wall time of k calls at once, the service's CPU time for them, wall time of the same k
    calls one after another)."""
    cpu = cpu_seconds(pid)
    start = time.perf_counter()
    await asyncio.gather(*(call(i) for i in range(k)))
    together = time.perf_counter() - start
    cpu = cpu_seconds(pid) - cpu
    start = time.perf_counter()
    for i in range(k):
        await call(i)
    return together, cpu, time.perf_counter() - start


async def curves(client: Any, echo: Callable[[int], Awaitable[Any]], rounds: int, sidecar_pid: int | None, floor_pid: int) -> None:
    cells = [(t, k) for t in (*TOOLS, "grpc") for k in COUNTS]
    together: dict[tuple[str, int], list[float]] = {cell: [] for cell in cells}
    cpu: dict[tuple[str, int], list[float]] = {cell: [] for cell in cells}
    one_by_one: dict[tuple[str, int], list[float]] = {cell: [] for cell in cells}
    calls = {tool: tool_calls(client, tool) for tool in TOOLS}
    calls["grpc"] = echo
    for call in calls.values():  # warm every path up
        for k in COUNTS:
            await timed_batch(call, k, None)
    for r in range(rounds):
        order = COUNTS[r % len(COUNTS):] + COUNTS[:r % len(COUNTS)]
        for k in order:
            for _ in range(max(1, 8 // k)):  # small batches vary most: more of them
                for tool, call in calls.items():
                    measured = await timed_batch(call, k, floor_pid if tool == "grpc" else sidecar_pid)
                    together[(tool, k)].append(measured[0])
                    cpu[(tool, k)].append(measured[1])
                    one_by_one[(tool, k)].append(measured[2])
    load = os.getloadavg()[0]
    print(f"k calls at once, medians over {rounds} rounds (load average {load:.2f}); the goal: k calls within 1.5x of one")
    print(f"  {'tool':<15} {'k':>3} {'at once':>10} {'x 1 call':>9} {'seq x':>7} {'server CPU':>11} {'grpc floor x':>13}")
    for tool in (*TOOLS, "grpc"):
        one = median(together[(tool, 1)])
        for k in COUNTS:
            value = median(together[(tool, k)])
            seq = median(one_by_one[(tool, k)])
            grpc_x = median(together[("grpc", k)]) / median(together[("grpc", 1)])
            spent = f"{median(cpu[(tool, k)]) * 1e3:8.1f} ms" if sidecar_pid is not None or tool == "grpc" else f"{'-':>11}"
            label = tool if tool != "grpc" else "grpc (floor)"
            print(f"  {label:<15} {k:>3} {value * 1e3:7.1f} ms {value / one:8.2f}x {seq / one:6.2f}x {spent:>11} {grpc_x:12.2f}x")
    print("  (seq x: the k calls one after another; server CPU: what the serving process spent on the k calls, all threads,")
    print("   under one interpreter lock; grpc floor x: k bare gRPC calls at once against one of them)")
    for tool in TOOLS:
        value = median(together[(tool, 16)]) / median(together[(tool, 1)])
        grpc16 = median(together[("grpc", 16)]) / median(together[("grpc", 1)])
        figure(f"parallel_calls.{tool}.16_at_once", value, "x", floor=grpc16)


async def one_turn(settings: Any, server: Any, home: Any, paths: list[str], serial_no: int, sink: Any) -> tuple[float, float, float, float]:
    """(tool phase, whole turn, the broker's CPU time in the tool phase, the service's CPU time in
    the turn) of a session whose model asks for read_file of `paths` in one turn."""
    from osprey.events import Event, ToolCallEvent, ToolResultEvent
    from osprey.render import JsonlWriter
    from osprey.session.core import Session, SessionOptions
    from osprey.testing.model_server import Reply, ToolCall

    server.add(Reply.tool_calls([ToolCall("read_file", {"path": p}) for p in paths]), Reply.text("done"))
    marks: dict[str, float] = {}
    failed: list[str] = []
    writer = JsonlWriter(sink)

    def emit(event: Event) -> None:
        writer(event)
        if isinstance(event, ToolCallEvent):
            if "first_call" not in marks:
                marks["first_call_cpu"] = time.process_time()
                marks["first_call"] = time.perf_counter()
        elif isinstance(event, ToolResultEvent):
            marks["last_result"] = time.perf_counter()
            marks["last_result_cpu"] = time.process_time()
            if not event.ok:
                failed.append(event.output)

    session = Session(SessionOptions(settings=settings, session_id=f"parallel-{os.getpid()}-{serial_no}"), emit=emit, home=home)
    await session.start()
    pid = sidecar_pid(home)
    try:
        service_cpu = cpu_seconds(pid)
        start = time.perf_counter()
        end = await session.submit("Read these files.")
        whole = time.perf_counter() - start
        service_cpu = cpu_seconds(pid) - service_cpu
    finally:
        await session.close()
    if end.outcome != "Completed" or failed:
        raise SystemExit(f"the session ended {end.outcome}: {end.error or failed[0]}")
    return marks["last_result"] - marks["first_call"], whole, marks["last_result_cpu"] - marks["first_call_cpu"], service_cpu


async def turn(settings: Any, server: Any, home: Any, rounds: int) -> None:
    """The 16 reads sent together (one ReadFiles call), the same 16 as one ReadFile call each
    (the client's batching off), and the slowest alone, interleaved round by round."""
    all_paths = [f"r{i}.txt" for i in range(TURN_CALLS)]
    slowest = [all_paths[-1]]
    subjects = {"16 calls": (all_paths, True), "16 calls, one RPC each": (all_paths, False), "slowest alone": (slowest, True)}
    phase: dict[str, list[float]] = {name: [] for name in subjects}
    whole: dict[str, list[float]] = {name: [] for name in subjects}
    broker_cpu: dict[str, list[float]] = {name: [] for name in subjects}
    service_cpu: dict[str, list[float]] = {name: [] for name in subjects}
    serial_no = 0
    client = home.client
    with open(os.devnull, "w") as sink:
        try:
            for paths, batch in subjects.values():  # warm up
                serial_no += 1
                client.batch_calls = batch
                await one_turn(settings, server, home, paths, serial_no, sink)
            for r in range(rounds * 2):
                names = list(subjects)[r % 3:] + list(subjects)[:r % 3]
                for name in names:
                    serial_no += 1
                    paths, client.batch_calls = subjects[name]
                    a, b, c, d = await one_turn(settings, server, home, paths, serial_no, sink)
                    phase[name].append(a)
                    whole[name].append(b)
                    broker_cpu[name].append(c)
                    service_cpu[name].append(d)
        finally:
            client.batch_calls = True
    floor = median(phase["slowest alone"])
    print(f"one turn of {TURN_CALLS} read_file calls, {rounds * 2} interleaved rounds (load average {os.getloadavg()[0]:.2f}):")
    for name in ("16 calls", "16 calls, one RPC each"):
        value = median(phase[name])
        ratios = sorted(a / b for a, b in zip(phase[name], phase["slowest alone"], strict=True))
        print(f"  {name}: tool phase (first call event to last result): {value * 1e3:.1f} ms; floor, the slowest call alone: {floor * 1e3:.1f} ms; "
              f"{value / floor:.2f}x (paired ratios {ratios[0]:.2f}-{ratios[len(ratios) // 2]:.2f}-{ratios[-1]:.2f}; goal <= 1.5x)")
        print(f"    whole turn (both model requests included): {median(whole[name]) * 1e3:.1f} ms; "
              f"the slowest alone: {median(whole['slowest alone']) * 1e3:.1f} ms")
        print(f"    CPU time of the tool phase in the broker: {median(broker_cpu[name]) * 1e3:.2f} ms (the slowest alone: "
              f"{median(broker_cpu['slowest alone']) * 1e3:.2f} ms); in the service, the whole turn: {median(service_cpu[name]) * 1e3:.2f} ms "
              f"(the slowest alone: {median(service_cpu['slowest alone']) * 1e3:.2f} ms)")
    figure("parallel_calls.turn_16_read_file", median(phase["16 calls"]) * 1e3, "ms", floor=floor * 1e3)
    figure("parallel_calls.turn_16_read_file_one_rpc_each", median(phase["16 calls, one RPC each"]) * 1e3, "ms", floor=floor * 1e3)


def sidecar_pid(home: Any) -> int | None:
    """The local dispatcher's process (None for a lane: its sidecar runs in the container)."""
    proc = getattr(home, "proc", None)
    return proc.pid if proc is not None else None


async def main() -> None:
    ensure_bytecode()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lane", action="store_true", help="a sandbox lane instead of the local dispatcher")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--files", type=int, default=2000, help="small files in the tree grep and find_files search")
    parser.add_argument("--only", choices=("curves", "turn"), help="run only the curves, or only the turn")
    parser.add_argument("--floor-server", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_server:
        serve_floor(args.floor_server)
        return

    import grpc

    from osprey.config import load_settings
    from osprey.testing.model_server import ModelServer
    from osprey.toolservice.homes import make_home
    from osprey_sidecar.wire import CHANNEL_OPTIONS

    with tempfile.TemporaryDirectory(prefix="osprey-parallel-bench-") as tmp:
        workspace, osprey_home = Path(tmp) / "ws", Path(tmp) / "home"
        workspace.mkdir()
        osprey_home.mkdir()
        make_workspace(workspace, args.files)
        floor_socket = os.path.join(tmp, "floor.sock")
        floor = start_floor_server(floor_socket, tmp)
        assert floor.stdin is not None
        channel = grpc.aio.insecure_channel(f"unix:{floor_socket}", options=list(CHANNEL_OPTIONS))
        echo_call = channel.unary_unary(ECHO)

        def echo(i: int) -> Awaitable[Any]:
            return echo_call(b"x" * 64)

        try:
            with ModelServer() as server:
                flags: dict[str, Any] = {"provider": "openai", "model": "bench-model", "base_url": server.base_url,
                                         "approval_policy": "never", "sandbox": {"enabled": args.lane}}
                settings = load_settings(workspace, flags, {"OSPREY_HOME": str(osprey_home), "OPENAI_API_KEY": "bench"})
                home = make_home([str(workspace)], sandbox=settings.sandbox, session_id=f"parallel-{os.getpid()}", home=settings.home)
                async with home:
                    print(f"{'sandbox lane' if args.lane else 'local dispatcher'}, {args.files} small files in the tree")
                    if args.only != "turn":
                        await curves(home.client, echo, args.rounds, sidecar_pid(home), floor.pid)
                    if args.only != "curves":
                        await turn(settings, server, home, args.rounds)
        finally:
            await channel.close()
            floor.stdin.close()
            floor.wait()


if __name__ == "__main__":
    asyncio.run(main())
