"""Time from a session's start to its first tool result, with the ToolService coming up behind the
first model request (as sessions do) and without (started and waited for first, as before), for a
loopback model server that answers the first turn in 0, 200 and 1,000 ms with one tool call.

Subjects, per model latency, alternated round by round in one run:

- `overlap`: the session starts its home in the background (`Session.start()` as shipped);
- `serial`: the home is started and waited for, then handed to the session (the old order);
- `ready`: a home started before the clock starts, handed to the session: a lane that is
  simply always ready, the floor.

Added latency = subject - ready. Goal (issue 10): with the overlap it is about 0 once the model's
first turn takes longer than the ToolService's start. `--lane` measures sandbox lanes (Docker;
the image must be built: `osprey sandbox build`), otherwise the local dispatcher.

`--process` measures whole launches instead: `osprey agent` with and without `--sandbox`, from
the process's start to the first tool result on its JSON Lines output, the model answering at
once; the two alternate run by run, and the gap is sandbox - host for each pair.
Goal: a gap of at most +250 ms.

    .venv/bin/python bench/tool_service_overlap.py [--lane] [--rounds 7]
    .venv/bin/python bench/tool_service_overlap.py --process [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import ensure_bytecode, figure, median  # noqa: E402

from osprey.config import load_settings  # noqa: E402
from osprey.events import Event, ToolResultEvent  # noqa: E402
from osprey.session.core import Session, SessionOptions  # noqa: E402
from osprey.testing.model_server import ModelServer, Reply  # noqa: E402
from osprey.toolservice.homes import ToolServiceHome, make_home  # noqa: E402

LATENCIES_MS = (0, 200, 1000)
SUBJECTS = ("overlap", "serial", "ready")


async def first_tool_result(settings: Any, subject: str, server: ModelServer, latency_s: float, serial_no: int) -> float:
    """Seconds from the start of the session (its home included) to its first tool result."""
    server.add(Reply.delay(latency_s, Reply.tool_call("read_file", {"path": "notes.txt"})), Reply.text("done"))
    options = SessionOptions(settings=settings, session_id=f"overlap-{os.getpid()}-{serial_no}")
    got: list[float] = []

    def emit(event: Event) -> None:
        if isinstance(event, ToolResultEvent) and not got:
            if not event.ok:
                raise SystemExit(f"the tool call failed: {event.output}")
            got.append(time.perf_counter())

    def home_for() -> ToolServiceHome:
        return make_home([str(settings.cwd)], sandbox=settings.sandbox, session_id=options.session_id, home=settings.home)

    home: ToolServiceHome | None = None
    if subject == "ready":
        home = home_for()
        await home.start()
    start = time.perf_counter()
    if subject == "serial":
        home = home_for()
        await home.start()
    session = Session(options, emit=emit, home=home)
    try:
        await session.start()
        end = await session.submit("Read notes.txt.")
        if end.outcome != "Completed":
            raise SystemExit(f"the session ended {end.outcome}: {end.error}")
    finally:
        await session.close()
    return got[0] - start


def launch_to_first_tool_result(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds from starting `cmd` (an `osprey agent --events-jsonl` run) to its first tool result."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    got = None
    for line in proc.stdout:
        if got is None and b'"tool_result"' in line:
            got = time.perf_counter() - start
    err = proc.stderr.read()
    if proc.wait() != 0 or got is None:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode} without a tool result: {err.decode(errors='replace')[-2000:]}")
    return got


def processes(rounds: int) -> None:
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="osprey-overlap-bench-") as tmp:
        workspace, home = Path(tmp) / "ws", Path(tmp) / "home"
        workspace.mkdir()
        home.mkdir()
        (workspace / "notes.txt").write_text("one\ntwo\n")
        env = dict(os.environ, OSPREY_HOME=str(home), OPENAI_API_KEY="bench")
        with ModelServer() as server:
            agent = [sys.executable, "-m", "osprey", "agent", "-C", str(workspace), "--provider", "openai", "--model", "bench-model",
                     "--base-url", server.base_url, "--events-jsonl"]
            commands = {"host": [*agent, "Read notes.txt."], "sandbox": [*agent, "--sandbox", "Read notes.txt."]}
            times: dict[str, list[float]] = {name: [] for name in commands}
            for round_no in range(rounds + 1):  # the first round warms the caches and is dropped
                for name in (list(commands) if round_no % 2 else list(commands)[::-1]):
                    server.add(Reply.tool_call("read_file", {"path": "notes.txt"}), Reply.text("done"))
                    took = launch_to_first_tool_result(commands[name], env)
                    if round_no:
                        times[name].append(took)
                loads.append(os.getloadavg()[0])
    gaps = [s - h for s, h in zip(times["sandbox"], times["host"], strict=True)]
    print(f"osprey agent, launch to first tool result, model answering at once; {rounds} interleaved rounds, "
          f"load average {min(loads):.2f}-{max(loads):.2f}")
    for name, samples in times.items():
        print(f"  {name:8} min {min(samples) * 1e3:6.0f}  median {median(samples) * 1e3:6.0f}  max {max(samples) * 1e3:6.0f} ms")
    print(f"  gap      min {min(gaps) * 1e3:+6.0f}  median {median(gaps) * 1e3:+6.0f}  max {max(gaps) * 1e3:+6.0f} ms (goal <= +250)")
    figure("osprey agent --sandbox, first tool result over the host run", median(gaps) * 1e3, "ms", floor=median(times["host"]) * 1e3)


async def main() -> None:
    ensure_bytecode()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lane", action="store_true", help="sandbox lanes instead of the local dispatcher")
    parser.add_argument("--process", action="store_true", help="whole `osprey agent` launches, host against --sandbox")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if args.process:
        processes(args.rounds)
        return
    with tempfile.TemporaryDirectory(prefix="osprey-overlap-bench-") as tmp:
        workspace, home = Path(tmp) / "ws", Path(tmp) / "home"
        workspace.mkdir()
        home.mkdir()
        (workspace / "notes.txt").write_text("one\ntwo\n")
        with ModelServer() as server:
            flags: dict[str, Any] = {"provider": "openai", "model": "bench-model", "base_url": server.base_url,
                                     "approval_policy": "never", "sandbox": {"enabled": args.lane}}
            settings = load_settings(workspace, flags, {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "bench"})
            times: dict[tuple[int, str], list[float]] = {(ms, s): [] for ms in LATENCIES_MS for s in SUBJECTS}
            serial_no = 0
            await first_tool_result(settings, "overlap", server, 0, serial_no)  # warm the caches
            for round_no in range(args.rounds):
                for ms in LATENCIES_MS:
                    order = SUBJECTS[round_no % 3:] + SUBJECTS[:round_no % 3]
                    for subject in order:
                        serial_no += 1
                        times[(ms, subject)].append(await first_tool_result(settings, subject, server, ms / 1000, serial_no))
    where = "sandbox lane" if args.lane else "local dispatcher"
    print(f"launch to first tool result, {where}, {args.rounds} rounds, medians (load average {os.getloadavg()[0]:.2f})")
    print(f"{'model latency':>14} {'ready (floor)':>14} {'overlap':>16} {'serial':>16}")
    for ms in LATENCIES_MS:
        floor = median(times[(ms, 'ready')])
        cells = []
        for subject in ("overlap", "serial"):
            mid = median(times[(ms, subject)])
            cells.append(f"{mid * 1e3:7.0f} ms (+{(mid - floor) * 1e3:4.0f})")
        print(f"{ms:>11} ms {floor * 1e3:11.0f} ms {cells[0]:>16} {cells[1]:>16}")
        figure(f"{where}, model at {ms} ms: first tool result over an always-ready home", (median(times[(ms, 'overlap')]) - floor) * 1e3, "ms", floor=floor * 1e3)


if __name__ == "__main__":
    asyncio.run(main())
