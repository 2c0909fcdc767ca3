"""What a running subagent costs the broker, and how soon a spawned child asks the model.

Overhead per child: a lead session (OpenAI provider, local ToolService, journal on) asks a slow
model server (in a process of its own, every reply delayed) and then spawns 8 children with
`spawn_subagent`; each child, and the lead, then waits on the slow model. The broker's resident
memory and CPU time over a window of that wait are compared with the same window while the lead
alone waited (the floor): the difference, divided by 8, is the cost of one waiting child. Goals:
at most 10 MB per child, and CPU near zero while they wait (no busy waiting).

Spawn-to-first-request: a lead spawns one child sharing its ToolService home; the time from the
`spawn_subagent` call's event to the child's first request arriving at the loopback model server.
Its floor: a started session's `submit` to its first request's arrival. Goal: at most 20 ms.

Rounds interleave both measurements; the load average is printed beside every figure.

    .venv/bin/python bench/subagents.py [--rounds 3] [--wait 6] [--spawns 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import figure  # noqa: E402

from osprey.config import load_settings  # noqa: E402
from osprey.events import Event, ToolCallEvent, UserMessageEvent  # noqa: E402
from osprey.session.core import Session, SessionOptions  # noqa: E402
from osprey.sessions.journal import Journal, journal_path  # noqa: E402
from osprey.testing.model_server import ModelServer, Reply, ToolCall  # noqa: E402

CHILDREN = 8
PERSONA = "---\nname: helper\nspawnable: true\ntools: [read_file]\n---\n\nHelp with what you are asked.\n"
MARK = "Help with what you are asked."

# The slow server runs in a process of its own, so that its threads' CPU and memory are not the broker's.
SERVER = r"""
import json, sys, time
from osprey.testing.model_server import ModelServer, Reply, ToolCall
wait, children = float(sys.argv[1]), int(sys.argv[2])
spawns = [ToolCall("spawn_subagent", {"persona": "helper", "task": f"Task {n}: wait for the answer."}) for n in range(children)]
script = [Reply.delay(wait, Reply.tool_calls(spawns))] + [Reply.delay(wait, Reply.text("done"))] * (children + 1)
with ModelServer(script) as server:
    print(json.dumps({"base_url": server.base_url}), flush=True)
    sys.stdin.read()
"""


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def options(workspace: Path, home: Path, base_url: str) -> SessionOptions:
    flags = {"provider": "openai", "model": "bench-model", "base_url": base_url, "approval_policy": "never"}
    settings = load_settings(workspace, flags, {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "bench"})
    return SessionOptions(settings=settings)


async def window(seconds: float) -> tuple[float, float, float]:
    """CPU seconds the broker spent over `seconds` of waiting, its resident memory (MB) then, and
    the Python heap then (MB, as tracemalloc counts it)."""
    cpu = time.process_time()
    await asyncio.sleep(seconds)
    return time.process_time() - cpu, rss_mb(), tracemalloc.get_traced_memory()[0] / 2**20


def slow_server(wait: float) -> tuple[subprocess.Popen[str], str]:
    """The slow model server's process, and its base URL."""
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(wait), str(CHILDREN)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    return server, json.loads(server.stdout.readline())["base_url"]


def stop(server: subprocess.Popen[str]) -> None:
    if server.stdin is not None:
        server.stdin.close()
    server.wait(10)


async def overhead(workspace: Path, home: Path, wait: float) -> dict[str, float]:
    """The lead alone waiting, then the lead and 8 children waiting: CPU per second and memory."""
    server, base_url = slow_server(wait)
    tracemalloc.start()  # its cost is in both windows alike; the latency rounds run without it
    try:
        events: list[Event] = []
        session = Session(options(workspace, home, base_url), emit=events.append, journal=Journal(journal_path(home)))
        await session.start()
        try:
            working = asyncio.ensure_future(session.submit("Delegate the waiting."))
            measured = wait - 2.0
            await asyncio.sleep(1.0)  # the lead's request is out; the server holds it
            alone_cpu, alone_rss, alone_heap = await window(measured)
            deadline = time.monotonic() + wait + 30
            while sum(1 for e in events if isinstance(e, UserMessageEvent) and e.agent_id is not None) < CHILDREN:
                if time.monotonic() > deadline:
                    raise SystemExit("the children did not start")
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # their requests are out; the server holds them
            busy_cpu, busy_rss, busy_heap = await window(measured)
            await working
            for child in session.children:
                await child.wait()
        finally:
            await session.close()
    finally:
        tracemalloc.stop()
        stop(server)
    return {"alone_cpu": alone_cpu / measured * 1e3, "busy_cpu": busy_cpu / measured * 1e3, "alone_rss": alone_rss, "busy_rss": busy_rss,
            "heap": busy_heap - alone_heap}


class TimedServer(ModelServer):
    """The scripted server, noting when each request arrives and whether a child sent it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arrivals: list[float] = []

    def _handle(self, h: Any) -> None:
        self.arrivals.append(time.monotonic())
        super()._handle(h)


async def spawn_latency(workspace: Path, home: Path) -> tuple[float, float]:
    """(spawn-to-first-request, submit-to-first-request) in ms, for one lead and its one child."""
    script = [Reply.tool_calls([ToolCall("spawn_subagent", {"persona": "helper", "task": "Say done."})]), Reply.text("done"), Reply.text("done")]
    server = TimedServer(script)
    with server:
        marks: dict[str, float] = {}

        def emit(event: Event) -> None:
            if isinstance(event, ToolCallEvent) and event.name == "spawn_subagent":
                marks["spawn"] = time.monotonic()

        session = Session(options(workspace, home, server.base_url), emit=emit)
        await session.start()
        try:
            submitted = time.monotonic()
            await session.submit("Delegate.")
            for child in list(session.children):
                await child.wait()
        finally:
            await session.close()
        requests, arrivals = server.requests, server.arrivals
    child_first = next(at for r, at in zip(requests, arrivals, strict=True) if MARK in str(r.body["messages"][0]["content"]))
    return (child_first - marks["spawn"]) * 1e3, (arrivals[0] - submitted) * 1e3


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(min(values))} to {fmt.format(max(values))} (median {fmt.format(statistics.median(values))})"


async def measure(rounds: int, wait: float, spawns: int) -> None:
    with tempfile.TemporaryDirectory(prefix="osprey-subagents-bench-") as tmp:
        workspace, home = Path(tmp) / "ws", Path(tmp) / "home"
        (workspace / ".osprey" / "personas").mkdir(parents=True)
        (workspace / ".osprey" / "personas" / "helper.md").write_text(PERSONA)
        home.mkdir()
        await spawn_latency(workspace, home)  # warm up imports and caches
        per_child_mb, per_child_heap, per_child_cpu, alone_cpu, busy_cpu, loads = [], [], [], [], [], []
        latency, floor = [], []
        for n in range(rounds):
            result = await overhead(workspace, home, wait)
            per_child_mb.append((result["busy_rss"] - result["alone_rss"]) / CHILDREN)
            per_child_heap.append(result["heap"] / CHILDREN)
            per_child_cpu.append((result["busy_cpu"] - result["alone_cpu"]) / CHILDREN)
            alone_cpu.append(result["alone_cpu"])
            busy_cpu.append(result["busy_cpu"])
            round_latency, round_floor = [], []
            for _ in range(spawns):
                spawned, submitted = await spawn_latency(workspace, home)
                round_latency.append(spawned)
                round_floor.append(submitted)
            latency += round_latency
            floor += round_floor
            loads.append(os.getloadavg()[0])
            print(f"round {n + 1}: RSS lead alone {result['alone_rss']:.1f} MB, with {CHILDREN} children {result['busy_rss']:.1f} MB "
                  f"(heap +{result['heap']:.2f} MB); CPU {result['alone_cpu']:.2f} / {result['busy_cpu']:.2f} ms per s; "
                  f"spawn-to-first-request median {statistics.median(round_latency):.1f} ms (floor {statistics.median(round_floor):.1f} ms); "
                  f"load {loads[-1]:.2f}", flush=True)
        print(f"\nper waiting child: resident memory {spread(per_child_mb)} MB (goal <= 10 MB), Python heap {spread(per_child_heap)} MB; "
              f"CPU {spread(per_child_cpu, '{:.3f}')} ms per s of waiting")
        print(f"broker CPU while waiting: lead alone {spread(alone_cpu)} ms/s (floor), lead + {CHILDREN} children {spread(busy_cpu)} ms/s")
        print(f"spawn-to-first-request {spread(latency)} ms (goal <= 20 ms); floor, submit-to-first-request {spread(floor)} ms")
        print(f"load average {spread(loads)}")
        figure("subagents: memory per waiting child", statistics.median(per_child_mb), "MB")
        figure("subagents: Python heap per waiting child", statistics.median(per_child_heap), "MB")
        figure("subagents: CPU while 8 children wait", statistics.median(busy_cpu), "ms/s", floor=statistics.median(alone_cpu))
        figure("subagents: spawn-to-first-request", statistics.median(latency), "ms", floor=statistics.median(floor))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wait", type=float, default=6.0, help="seconds the slow server delays each reply")
    parser.add_argument("--spawns", type=int, default=8, help="spawn-latency samples per round")
    args = parser.parse_args()
    asyncio.run(measure(args.rounds, args.wait, args.spawns))


if __name__ == "__main__":
    main()
