"""Provider connections and per-turn latency over 100-turn sessions, against keep-alive loopback servers.

Each provider (OpenAI-compatible and Anthropic), built as a session builds it (`Session._make_provider`,
its own httpx client), runs TURNS turns against its own keep-alive ModelServer. Beside it, turn by turn,
the floor: a raw httpx loop on its own client and server that POSTs the same body and reads the stream
to its end. A third column, a raw loop that opens a new connection for every request (`Connection:
close`), shows what a connection per turn costs even on loopback without TLS.

Two sessions per provider: "clean" (streamed text and tool calls) and "mixed" (every tenth turn an HTTP
429, every tenth a stream the provider refuses mid-way, each followed by success). Printed: TCP
connections each server accepted, per-turn p50/p90/p99 in ms, and the provider's p50 over the floor's.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import figure, median, percentile  # noqa: E402

from osprey.config import load_settings  # noqa: E402
from osprey.errors import ProviderError  # noqa: E402
from osprey.messages import ModelRequest, ToolSpec, UserMessage  # noqa: E402
from osprey.session.core import Session, SessionOptions  # noqa: E402
from osprey.testing.model_server import ModelServer, Reply  # noqa: E402

TURNS = 100
ROUNDS = 2
TOOLS = [ToolSpec(name="read_file", description="Read a file.", parameters={"type": "object", "properties": {"path": {"type": "string"}}})]
REQUEST = ModelRequest(system="You are terse.", messages=[UserMessage(content="Say hello.")], tools=TOOLS)


def reply(turn: int, mixed: bool) -> Reply:
    if mixed and turn % 10 == 3:
        return Reply.error(429)
    if mixed and turn % 10 == 7:
        return Reply.garbage()
    if turn % 2:
        return Reply.tool_call("read_file", {"path": f"f{turn}.txt"}, text="Reading.")
    return Reply.text(f"Answer number {turn}, streamed in pieces.")


async def session_provider(dialect: str, base_url: str, home: Path) -> tuple[Session, Any]:
    env = {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "sk-bench", "ANTHROPIC_API_KEY": "sk-ant-bench"}
    settings = load_settings(home, {"provider": dialect, "base_url": base_url, "model": "bench-model"}, env)
    session = Session(SessionOptions(settings=settings), emit=lambda _: None)
    return session, await session._make_provider()


def raw_turn(client: httpx.AsyncClient, url: str, headers: dict[str, str], body: dict[str, Any]) -> Callable[[], Awaitable[None]]:
    async def turn() -> None:
        async with client.stream("POST", url, json=body, headers=headers) as response:
            async for _ in response.aiter_bytes():
                pass
    return turn


async def run(dialect: str, mixed: bool, home: Path) -> dict[str, tuple[int, list[float]]]:
    servers = {name: ModelServer().start() for name in ("provider", "floor", "per-turn")}
    for server in servers.values():
        server.add(*(reply(n, mixed) for n in range(TURNS)))
    session, provider = await session_provider(dialect, servers["provider"].base_url, home)
    path = "/chat/completions" if dialect == "openai" else "/messages"
    headers = {"Authorization": "Bearer sk-bench", "x-api-key": "sk-ant-bench", "anthropic-version": "2023-06-01",
               "Accept": "text/event-stream", "Accept-Encoding": "identity"}
    # The session's provider may be wrapped (`ImagesAsked`); the request body is the inner provider's.
    body = getattr(provider, "inner", provider).body(REQUEST)
    times: dict[str, list[float]] = {name: [] for name in servers}
    async with httpx.AsyncClient() as floor, httpx.AsyncClient() as fresh:
        subjects: dict[str, Callable[[], Awaitable[Any]]] = {
            "provider": lambda: provider.complete(REQUEST),
            "floor": raw_turn(floor, servers["floor"].base_url + path, headers, body),
            "per-turn": raw_turn(fresh, servers["per-turn"].base_url + path, {**headers, "Connection": "close"}, body),
        }
        order = list(subjects)
        for n in range(TURNS):
            for name in order[n % 3:] + order[:n % 3]:  # rotate who goes first
                started = time.perf_counter()
                try:
                    await subjects[name]()
                except ProviderError:
                    pass
                times[name].append(time.perf_counter() - started)
    await session._stack.aclose()
    result = {}
    for name, server in servers.items():
        result[name] = (server.accepted_connections, times[name])
        server.close()
    return result


def row(label: str, connections: int, samples: list[float], floor: list[float]) -> str:
    ms = [s * 1000 for s in samples]
    ratio = median(samples) / median(floor)
    return (f"  {label:<22} connections {connections:>3}   p50 {median(ms):6.2f}  p90 {percentile(ms, 90):6.2f}  "
            f"p99 {percentile(ms, 99):6.2f} ms   p50 / floor {ratio:4.2f}x")


async def main() -> None:
    print(f"Provider connections and per-turn latency, {TURNS} turns per session, {ROUNDS} rounds (keep-alive loopback HTTP/1.1)")
    with tempfile.TemporaryDirectory(prefix="osprey-bench-") as tmp:
        home = Path(tmp)
        for round_ in range(ROUNDS):
            for mixed in (False, True):
                for dialect in ("openai", "anthropic"):
                    result = await run(dialect, mixed, home)
                    print(f"{dialect} {'mixed (429 and refused streams)' if mixed else 'clean'}, round {round_ + 1}:")
                    floor = result["floor"][1]
                    print(row("provider (session)", *result["provider"], floor))
                    print(row("floor: raw httpx", *result["floor"], floor))
                    print(row("raw, conn. per turn", *result["per-turn"], floor))
                    if round_ == ROUNDS - 1:
                        kind = f"{dialect} {'with errors' if mixed else 'clean'}"
                        figure(f"{kind}: connections for {TURNS} turns", result["provider"][0], "", floor=result["floor"][0])
                        figure(f"{kind}: turn p50 against raw httpx", median(result["provider"][1]) / median(floor), "x", floor=1.0)


if __name__ == "__main__":
    asyncio.run(main())
