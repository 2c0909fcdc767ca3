"""What the agent loop adds per turn over the raw HTTP round trip and the tool call.

The subject: a session of N turns, each turn one `read_file` of a small file, through the real
Session (OpenAI provider, local ToolService, events written as JSON Lines to /dev/null as
`osprey agent` writes them), against the loopback model server; journal off, and on as
`osprey agent` runs by default. The floor: the same request bodies the session sent, posted with a
raw httpx client to a server playing the same script (response read to its end), each followed by
the same `read_file` made directly through a ToolClient. Session and floor alternate round by
round in one run. Per-turn cost at turns 1-10 against the last ten turns shows whether the loop's
cost grows faster than the request it sends (the floor's cost grows with the request too).
Goal: the loop adds at most 2 ms per turn over the floor.

    .venv/bin/python bench/loop_overhead.py [--turns 100] [--rounds 5] [--long 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from _stats import figure  # noqa: E402

from osprey.config import load_settings  # noqa: E402
from osprey.events import Event, ToolResultEvent  # noqa: E402
from osprey.render import JsonlWriter  # noqa: E402
from osprey.session.core import Session, SessionOptions  # noqa: E402
from osprey.sessions.journal import Journal, journal_path  # noqa: E402
from osprey.testing.model_server import ModelServer, Reply  # noqa: E402
from osprey.toolservice.homes import LocalDispatcher  # noqa: E402

FILE = "notes.txt"

def script(turns: int) -> list[Reply]:
    return [*(Reply.tool_call("read_file", {"path": FILE}) for _ in range(turns)), Reply.text("done")]


async def session_run(workspace: Path, home: Path, turns: int, journal: bool, sink: Any) -> tuple[list[float], list[Any]]:
    """Per-turn wall times of one session, and the request bodies it sent."""
    with ModelServer(script(turns)) as server:
        env = {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "bench"}
        flags = {"provider": "openai", "model": "bench-model", "base_url": server.base_url,
                 "approval_policy": "never", "max_turns": turns + 5}
        settings = load_settings(workspace, flags, env)
        marks: list[float] = []
        writer = JsonlWriter(sink)

        def emit(event: Event) -> None:
            writer(event)
            if isinstance(event, ToolResultEvent):
                marks.append(time.perf_counter())

        recorder = Journal(journal_path(home)) if journal else None
        session = Session(SessionOptions(settings=settings), emit=emit, journal=recorder)
        await session.start()
        try:
            started = time.perf_counter()
            end = await session.submit("Read the notes again and again.")
        finally:
            await session.close()
        if end.outcome != "Completed" or len(marks) != turns:
            raise SystemExit(f"the session ended {end.outcome} after {len(marks)} tool results: {end.error}")
        bodies = [r.body for r in server.requests[:turns]]
    return [b - a for a, b in zip([started, *marks[:-1]], marks, strict=True)], bodies


async def floor_run(client: Any, bodies: list[Any]) -> list[float]:
    """Per-turn wall times of the same bodies over raw HTTP plus the same tool call."""
    times = []
    with ModelServer(script(len(bodies))) as server:
        url = f"{server.base_url}/chat/completions"
        headers = {"Authorization": "Bearer bench", "Accept": "text/event-stream"}
        async with httpx.AsyncClient(timeout=30) as http:
            for body in bodies:
                start = time.perf_counter()
                async with http.stream("POST", url, json=body, headers=headers) as response:
                    await response.aread()
                await client.read_file(FILE)
                times.append(time.perf_counter() - start)
    return times


def window(samples: list[list[float]], first: int, last: int) -> float:
    """Median per-turn time (ms) over turns first..last (1-based) of every round."""
    return statistics.median(t for run in samples for t in run[first - 1:last]) * 1e3


def report(label: str, subject: dict[str, list[list[float]]], floor: list[list[float]], turns: int) -> None:
    spans = [(1, 10), (turns // 2 - 4, turns // 2 + 5), (turns - 9, turns)]
    print(f"\n{label}: median per-turn ms (floor = recorded bodies over raw httpx + direct ToolClient.read_file)")
    print(f"  {'turns':>10} {'floor':>8} " + " ".join(f"{name:>10} {'+ms':>6} {'x':>5}" for name in subject))
    for first, last in spans:
        base = window(floor, first, last)
        cells = []
        for runs in subject.values():
            value = window(runs, first, last)
            cells.append(f"{value:10.2f} {value - base:+6.2f} {value / base:5.2f}")
        print(f"  {first:>4}-{last:<5} {base:8.2f} " + " ".join(cells))
    whole = statistics.median(t for run in floor for t in run) * 1e3
    for name, runs in subject.items():
        mean = statistics.median(t for run in runs for t in run) * 1e3
        print(f"  {name}: all turns {mean:.2f} ms vs floor {whole:.2f} ms, adds {mean - whole:+.2f} ms per turn (goal <= +2 ms)")
        figure(f"{label}, {name}: added per turn", mean - whole, "ms", floor=whole)


async def measure(turns: int, rounds: int, modes: tuple[str, ...]) -> None:
    with tempfile.TemporaryDirectory(prefix="osprey-loop-bench-") as tmp:
        workspace, home = Path(tmp) / "ws", Path(tmp) / "home"
        workspace.mkdir()
        home.mkdir()
        (workspace / FILE).write_text("".join(f"line {i}: the loop reads this file every turn\n" for i in range(20)))
        subject: dict[str, list[list[float]]] = {mode: [] for mode in modes}
        floor: list[list[float]] = []
        sizes: list[int] = []
        with open(os.devnull, "w") as sink:
            async with LocalDispatcher([str(workspace)]) as home_service:
                client = home_service.client
                await session_run(workspace, home, 5, False, sink)  # warm up imports and caches
                for _ in range(rounds):
                    for mode in modes:
                        times, bodies = await session_run(workspace, home, turns, mode == "journal", sink)
                        subject[mode].append(times)
                        floor.append(await floor_run(client, bodies))
                        sizes = [len(httpx.Request("POST", "http://x", json=b).content) for b in bodies]
        report(f"{turns}-turn session, {rounds} rounds", subject, floor, turns)
        print(f"  request body: turn 1 {sizes[0] / 1024:.1f} KiB, turn {turns} {sizes[-1] / 1024:.1f} KiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--long", type=int, default=300, help="turns of the scaling case (0: skip)")
    parser.add_argument("--long-rounds", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(measure(args.turns, args.rounds, ("no-journal", "journal")))
    if args.long:
        asyncio.run(measure(args.long, args.long_rounds, ("journal",)))


if __name__ == "__main__":
    main()
