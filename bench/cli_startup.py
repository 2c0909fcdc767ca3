"""`osprey` start-up against the floor of its imports: `--help`, `agent --help`, and a real one-turn
`osprey agent` session against the loopback model server (local ToolService, journal on as by
default), beside `python -c "import asyncio, pydantic, httpx"` (the libraries every run needs,
imported and nothing done with them) and `python -c pass`.

All commands alternate run by run, in rounds; each figure is the median of a round's runs and its
ratio to the import floor is the median of the runs' paired ratios (a run of the command over the
floor run next to it), so a change in the machine's load falls on both. Goals: `osprey --help`
within 2x the import floor, a real one-turn session within 1.5x. Then one `-X importtime` run of
the real session: where its import time goes, skill discovery (its PyYAML included) apart.
The CPU time of each command (its reaped children's included) is printed beside: on a loaded
machine it varies much less than the wall time.

`--before DIR` adds the same one-turn session run from another copy of Osprey's `host` directory
(a checkout before a change, say), interleaved with the rest, and prints the paired ratio of the
two, in wall and in CPU time. `--after DIR` runs this checkout's one-turn session from a copy as
well (a snapshot of a change, while the checkout itself goes on changing), so that both sides of
the pair load the same way.

    .venv/bin/python bench/cli_startup.py [--rounds 3] [--runs 5] [--before /tmp/before/host] [--after /tmp/after/host]
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import ensure_bytecode, figure, median  # noqa: E402

from osprey.testing.model_server import ModelServer, Reply  # noqa: E402

FLOOR = "import asyncio, pydantic, httpx"
# Goals, as ratios to the import floor.
GOALS = {"osprey --help": 2.0, "osprey agent --help": 2.0, "osprey agent (one turn)": 1.5}
SESSION = "osprey agent (one turn)"
BEFORE = "osprey agent (one turn), --before"


# CPU seconds (user + system) of each command, its reaped children (the local dispatcher) included,
# by command name: on a loaded machine they vary far less than wall time does.
CPU: dict[str, list[float]] = {}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str], env: dict[str, str], name: str = "") -> float:
    cpu = cpu_seconds()
    start = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    CPU.setdefault(name, []).append(cpu_seconds() - cpu)
    return elapsed


def import_profile(cmd: list[str], env: dict[str, str], top: int = 12) -> None:
    """The largest top-level imports (cumulative) of one run under -X importtime, and what skill
    discovery's imports (PyYAML among them) add."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env=env, check=False, text=True)
    rows, own = [], {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative, name = line.split(":", 1)[1].split("|")
        own[name.strip()] = int(self_us) / 1e3
        if not name.startswith("  "):  # top level: its cumulative time holds its children's
            rows.append((int(cumulative) / 1e3, name.strip()))
    print(f"\n-X importtime of the real session: {sum(ms for ms, _ in rows):.0f} ms in top-level imports (importtime inflates it); largest:")
    for ms, name in sorted(rows, reverse=True)[:top]:
        print(f"  {ms:7.1f} ms  {name}")
    skills = sum(ms for name, ms in own.items() if name == "yaml" or name.startswith(("yaml.", "osprey.skills")))
    print(f"  skill discovery's own modules (osprey.skills.*, yaml.*): {skills:.1f} ms of it")


def main() -> None:
    ensure_bytecode()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5, help="runs of each command per round")
    parser.add_argument("--before", type=Path, help="another copy's host directory: its one-turn session runs interleaved too")
    parser.add_argument("--after", type=Path, help="a copy's host directory to run the one-turn session from, instead of this checkout")
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
                "import floor": [sys.executable, "-c", FLOOR],
                "python -c pass": [sys.executable, "-c", "pass"],
                "osprey --help": [*osprey, "--help"],
                "osprey agent --help": [*osprey, "agent", "--help"],
                "osprey agent (one turn)": session,
            }
            envs = {name: env for name in commands}
            for option, copy in (("--before", args.before), ("--after", args.after)):
                if copy is not None:
                    if not (copy / "osprey" / "__init__.py").is_file():
                        raise SystemExit(f"{option} {copy}: not a host directory holding the osprey package")
                    compileall.compile_dir(copy, quiet=1)  # as `ensure_bytecode` does for this checkout
            if args.after is not None:
                envs[SESSION] = dict(env, PYTHONPATH=str(args.after.resolve()))
            if args.before is not None:
                commands[BEFORE] = session
                envs[BEFORE] = dict(env, PYTHONPATH=str(args.before.resolve()))
            for name in [SESSION, *([BEFORE] if args.before is not None else [])]:
                server.add(Reply.text("done"))
                timed(session, envs[name])  # warm the page cache and the journal
            summary: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
            loads = []
            rounds_of: dict[str, list[list[float]]] = {SESSION: [], BEFORE: []}
            cpu_rounds_of: dict[str, list[list[float]]] = {SESSION: [], BEFORE: []}
            for round_number in range(1, args.rounds + 1):
                times: dict[str, list[float]] = {name: [] for name in commands}
                for _ in range(args.runs):
                    for name, cmd in commands.items():
                        if name in (SESSION, BEFORE):
                            server.add(Reply.text("done"))
                        times[name].append(timed(cmd, envs[name], name))
                if args.before is not None:
                    rounds_of[SESSION].append(times[SESSION])
                    rounds_of[BEFORE].append(times[BEFORE])
                    cpu_rounds_of[SESSION].append(CPU[SESSION][-args.runs:])
                    cpu_rounds_of[BEFORE].append(CPU[BEFORE][-args.runs:])
                load = os.getloadavg()[0]
                loads.append(load)
                floor = median(times["import floor"])
                print(f"round {round_number} of {args.rounds}: {args.runs} runs each, interleaved; load average {load:.2f}; "
                      f"import floor `{FLOOR}` median {floor * 1e3:.0f} ms")
                for name, samples in times.items():
                    ratio = median([s / f for s, f in zip(samples, times["import floor"], strict=True)])
                    summary[name].append((median(samples), ratio))
                    goal = f" (goal <= {GOALS[name]})" if name in GOALS else ""
                    print(f"  {name}: median {median(samples) * 1e3:.0f} ms (range {min(samples) * 1e3:.0f}-{max(samples) * 1e3:.0f}), "
                          f"import floor {floor * 1e3:.0f} ms, ratio {ratio:.2f}{goal}")
                    if name in GOALS:
                        figure(f"{name} against the import floor", ratio, "x", floor=1.0)
                        figure(f"{name}", median(samples) * 1e3, "ms", floor=floor * 1e3)
            if args.before is not None:
                paired = [median([a / b for a, b in zip(after, before, strict=True)]) for after, before in zip(rounds_of[SESSION], rounds_of[BEFORE], strict=True)]
                print(f"\nthe one-turn session over the --before copy's, paired run by run: {min(paired):.2f}-{max(paired):.2f}x (each round's median)")
                paired_cpu = [median([a / b for a, b in zip(after, before, strict=True)])
                              for after, before in zip(cpu_rounds_of[SESSION], cpu_rounds_of[BEFORE], strict=True)]
                print(f"  in CPU time: {min(paired_cpu):.2f}-{max(paired_cpu):.2f}x (each round's median)")
            print(f"\nover {args.rounds} rounds (load average {min(loads):.2f}-{max(loads):.2f}): median ms, and ratio to the import floor")
            for name, rows in summary.items():
                ms, ratios = [m * 1e3 for m, _ in rows], [r for _, r in rows]
                print(f"  {name}: {min(ms):.0f}-{max(ms):.0f} ms, {min(ratios):.2f}-{max(ratios):.2f}x the import floor"
                      + (f" (goal <= {GOALS[name]})" if name in GOALS else ""))
            floor_cpu = median(CPU["import floor"])
            print(f"\nCPU time (user + system, the dispatcher's included), median over all rounds; import floor {floor_cpu * 1e3:.0f} ms:")
            for name in commands:
                print(f"  {name}: {median(CPU[name]) * 1e3:.0f} ms, {median(CPU[name]) / floor_cpu:.2f}x the import floor's")
            server.add(Reply.text("done"))
            import_profile(session, envs[SESSION])


if __name__ == "__main__":
    main()
