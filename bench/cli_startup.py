"""`osprey` start-up: `--help`, `agent --help`, and a real one-turn `osprey agent` session against
the loopback model server (local ToolService, journal on as by default), beside `python -c pass`.
The commands alternate run by run. Goals: --help <= 4x, a real session <= 8x `python -c pass`.
Then one `-X importtime` run of the real session: where its import time goes.

    .venv/bin/python bench/cli_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import ensure_bytecode, median, percentile  # noqa: E402

from osprey.testing.model_server import ModelServer, Reply  # noqa: E402


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    return elapsed


def import_profile(cmd: list[str], env: dict[str, str], top: int = 12) -> None:
    """The largest top-level imports (cumulative) of one run under -X importtime."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env=env, check=False, text=True)
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, cumulative, name = line.split(":", 1)[1].split("|")
        if not name.startswith("  "):  # top level: its cumulative time holds its children's
            rows.append((int(cumulative) / 1e3, name.strip()))
    print(f"\n-X importtime of the real session: {sum(ms for ms, _ in rows):.0f} ms in top-level imports (importtime inflates it); largest:")
    for ms, name in sorted(rows, reverse=True)[:top]:
        print(f"  {ms:7.1f} ms  {name}")


def main() -> None:
    ensure_bytecode()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="osprey-startup-bench-") as tmp:
        workspace, home = Path(tmp) / "ws", Path(tmp) / "home"
        workspace.mkdir()
        home.mkdir()
        env = dict(os.environ, OSPREY_HOME=str(home), OPENAI_API_KEY="bench")
        with ModelServer() as server:
            osprey = [sys.executable, "-m", "osprey"]
            session = [*osprey, "agent", "-C", str(workspace), "--provider", "openai", "--model", "bench-model",
                       "--base-url", server.base_url, "Say done."]
            commands = {
                "python -c pass": [sys.executable, "-c", "pass"],
                "osprey --help": [*osprey, "--help"],
                "osprey agent --help": [*osprey, "agent", "--help"],
                "osprey agent (one turn)": session,
            }
            times: dict[str, list[float]] = {name: [] for name in commands}
            server.add(Reply.text("done"))
            timed(session, env)  # warm the page cache and the journal
            for _ in range(args.runs):
                for name, cmd in commands.items():
                    if cmd is session:
                        server.add(Reply.text("done"))
                    times[name].append(timed(cmd, env))
            base = median(times["python -c pass"])
            goals = {"osprey --help": 4, "osprey agent --help": 4, "osprey agent (one turn)": 8}
            print(f"{args.runs} runs each, interleaved; floor python -c pass: median {base * 1e3:.1f} ms")
            for name, samples in times.items():
                if name in goals:
                    mid = median(samples)
                    print(f"  {name}: median {mid * 1e3:.1f} ms, p90 {percentile(samples, 90) * 1e3:.1f} ms, "
                          f"ratio {mid / base:.2f} (goal <= {goals[name]})")
            server.add(Reply.text("done"))
            import_profile(session, env)


if __name__ == "__main__":
    main()
