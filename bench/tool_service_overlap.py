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

    .venv/bin/python bench/tool_service_overlap.py [--lane] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import ensure_bytecode, median  # noqa: E402

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


async def main() -> None:
    ensure_bytecode()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lane", action="store_true", help="sandbox lanes instead of the local dispatcher")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
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


if __name__ == "__main__":
    asyncio.run(main())
