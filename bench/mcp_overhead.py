"""What MCP servers cost a run: the first model request's delay, and a tool call's added cost.

Start-up: `osprey agent "hi"` against the loopback model server (answering at once, no tool call),
with five stdio MCP servers configured in `$OSPREY_HOME/config.toml` (the SDK test server,
tests/mcp_servers/sdk_server.py) and without any, alternating run by run. The figure is the time
from the process's launch to the first model request's arrival at the server (polled every
millisecond); its floor is the run without servers, and the added delay is the median of the
paired differences. Goal: at most 10 ms added.

Per call: `echo` calls to one SDK test server over stdio, through Osprey's runtime
(`McpServers`, the program running under the local dispatcher through the Program stream), and
through the SDK's own `Client` with its own stdio transport (the floor), in alternating blocks.
The added cost is the median of Osprey's call times minus the floor's. Goal: at most 2 ms.

The load average is printed beside every figure.

    .venv/bin/python bench/mcp_overhead.py [--rounds 3] [--runs 5] [--calls 200] [--servers 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import REPO, ensure_bytecode, figure, median  # noqa: E402

from osprey.testing.model_server import ModelServer, Reply  # noqa: E402

SERVER = REPO / "tests" / "mcp_servers" / "sdk_server.py"
OSPREY = str(Path(sys.executable).parent / "osprey")


def _load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def _home(root: Path, servers: int) -> Path:
    home = root / f"home-{servers}"
    home.mkdir(parents=True, exist_ok=True)
    lines = []
    for n in range(servers):
        lines += [f"[mcp_servers.s{n}]", f"command = {sys.executable!r}", f"args = [{str(SERVER)!r}]", ""]
    (home / "config.toml").write_text("\n".join(lines))
    return home


def _first_request(server: ModelServer, home: Path, workspace: Path) -> tuple[float, float]:
    """Seconds from launch to the first request's arrival, and to the process's end."""
    before = server.request_count
    server.add(Reply.text("done"))
    env = {**os.environ, "OSPREY_HOME": str(home), "OPENAI_API_KEY": "x"}
    start = time.perf_counter()
    process = subprocess.Popen([OSPREY, "agent", "--base-url", server.base_url, "--model", "m", "hi"], cwd=workspace, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    arrived = None
    while process.poll() is None or arrived is None:
        if arrived is None and server.request_count > before:
            arrived = time.perf_counter() - start
        if process.poll() is not None and arrived is None:
            if server.request_count > before:
                arrived = time.perf_counter() - start
            else:
                raise SystemExit(f"osprey agent ended (exit {process.returncode}) without a model request")
        time.sleep(0.001)
    return arrived, time.perf_counter() - start


def start_up(rounds: int, runs: int, servers: int) -> None:
    print(f"\n== first model request, {servers} stdio MCP servers configured vs none ==")
    root = Path(tempfile.mkdtemp(prefix="osprey-bench-mcp-"))
    try:
        workspace = root / "work"
        workspace.mkdir()
        plain, with_servers = _home(root, 0), _home(root, servers)
        with ModelServer([]) as server:
            _first_request(server, plain, workspace)  # warm the caches of both kinds of run
            _first_request(server, with_servers, workspace)
            for r in range(rounds):
                floor, added, ends = [], [], []
                for _ in range(runs):
                    a, _end_a = _first_request(server, plain, workspace)
                    b, end_b = _first_request(server, with_servers, workspace)
                    floor.append(a)
                    added.append(b - a)
                    ends.append(end_b)
                print(f"round {r + 1}: first request {median(floor) * 1000:.0f} ms without servers; "
                      f"added with {servers}: median {median(added) * 1000:+.1f} ms (min {min(added) * 1000:+.1f}, "
                      f"max {max(added) * 1000:+.1f}); the run with servers ended after {median(ends) * 1000:.0f} ms; {_load()}")
                figure("mcp.first_request_added", median(added) * 1000, "ms", floor=median(floor) * 1000)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _per_call(rounds: int, calls: int) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from osprey.config.mcp import McpServerSpec
    from osprey.mcp.connection import McpServers
    from osprey.toolservice.homes import make_home

    print(f"\n== one echo call: Osprey's runtime over the Program stream vs the SDK's own stdio client, {calls} calls a block ==")
    workdir = tempfile.mkdtemp(prefix="osprey-bench-mcp-")
    home = make_home([workdir])
    await home.begin()
    spec = McpServerSpec(name="bench", origin="user", transport="stdio", command=sys.executable, args=(str(SERVER),))
    servers = McpServers([spec], client=home.client, workdir=workdir)
    servers.start()
    await servers.wait_started(60)
    ours = servers.servers["bench"]
    if ours.state != "ready":
        raise SystemExit(f"the server did not start: {ours.error}")
    try:
        async with Client(StdioServerParameters(command=sys.executable, args=[str(SERVER)]), mode="legacy") as direct:
            async def osprey_call() -> None:
                result = await ours.call_tool("echo", {"text": "hi"})
                assert result.text == "hi", result

            async def sdk_call() -> None:
                result = await direct.call_tool("echo", {"text": "hi"})
                assert not result.is_error

            for _ in range(20):  # warm both paths
                await osprey_call()
                await sdk_call()
            for r in range(rounds):
                times: dict[str, list[float]] = {"osprey": [], "sdk": []}
                for block in range(4):
                    order = [("osprey", osprey_call), ("sdk", sdk_call)]
                    for name, call in order if block % 2 == 0 else reversed(order):
                        for _ in range(calls // 4):
                            start = time.perf_counter()
                            await call()
                            times[name].append(time.perf_counter() - start)
                o, s = median(times["osprey"]) * 1000, median(times["sdk"]) * 1000
                print(f"round {r + 1}: Osprey {o:.2f} ms (p90 {statistics.quantiles(times['osprey'], n=10)[-1] * 1000:.2f}), "
                      f"the SDK's stdio client {s:.2f} ms (p90 {statistics.quantiles(times['sdk'], n=10)[-1] * 1000:.2f}); "
                      f"added {o - s:+.2f} ms; {_load()}")
                figure("mcp.call_added", o - s, "ms", floor=s)
    finally:
        await servers.close()
        await home.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--servers", type=int, default=5)
    parser.add_argument("--only", choices=("start", "call"))
    args = parser.parse_args()
    ensure_bytecode()
    if args.only != "call":
        start_up(args.rounds, args.runs, args.servers)
    if args.only != "start":
        asyncio.run(_per_call(args.rounds, args.calls))


if __name__ == "__main__":
    main()
