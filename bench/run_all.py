"""Run every benchmark (or those named) for several rounds, interleaved, and print each headline
figure as a range over the rounds with the load average beside it.

The scripts (all but `image_build.py`, which runs only when named) run in turn, round after round (A B C, A B C, ...), so a change in the machine's load
falls on every script alike; each script interleaves its own variants too. A script reports its
headline figures as `FIGURE {json}` lines (`_stats.figure`); everything else it prints is passed
through. `docs/performance.md` quotes the table printed at the end.

    .venv/bin/python bench/run_all.py [--rounds 3] [--only cli_startup.py,grep_vs_rg.py]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from _stats import FIGURE_PREFIX, median

HERE = Path(__file__).resolve().parent

SCRIPTS = (
    "toolservice_overhead.py", "file_scaling.py", "bash_latency.py", "parallel_calls.py", "policy_overhead.py", "grep_vs_rg.py",
    "grep_concurrency.py", "grep_memory.py", "provider_connections.py", "loop_overhead.py", "cli_startup.py", "tool_service_overlap.py",
    "extension_discovery.py", "lane_ready.py", "tui_latency.py", "tui_first_screen.py", "skills_startup.py", "subagents.py",
    "session_search.py", "mcp_overhead.py", "remote_lanes.py",
)
# Run only when named with --only: it removes and rebuilds the lane image, which lanes started
# meanwhile (a test run, another benchmark) would miss.
ALONE = ("image_build.py",)


def run(script: str, figures: dict[str, list[dict]]) -> tuple[float, int]:
    """Run one script, passing its output through and collecting its figures; its duration and
    exit status."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(HERE / script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(FIGURE_PREFIX):
            record = json.loads(line[len(FIGURE_PREFIX):])
            figures[f"{script.removesuffix('.py')}: {record['key']}"].append(record)
        else:
            sys.stdout.write(line)
            sys.stdout.flush()
    return time.perf_counter() - start, proc.wait()


def shown(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.2f}×"
    if not unit:
        return f"{value:g}"
    digits = 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0
    return f"{value:,.{digits}f} {unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated script names")
    args = parser.parse_args()
    scripts = [s for s in SCRIPTS if (HERE / s).exists()]
    if args.only:
        scripts += [s for s in ALONE if (HERE / s).exists()]
        wanted = {name if name.endswith(".py") else f"{name}.py" for name in args.only.split(",")}
        unknown = wanted - set(scripts)
        if unknown:
            raise SystemExit(f"unknown benchmark(s): {', '.join(sorted(unknown))}; the benchmarks are: {', '.join(scripts)}")
        scripts = [s for s in scripts if s in wanted]
    figures: dict[str, list[dict]] = defaultdict(list)
    failed: list[str] = []
    for round_number in range(1, args.rounds + 1):
        for script in scripts:
            print(f"== {script} (round {round_number} of {args.rounds}, load average {os.getloadavg()[0]:.2f})", flush=True)
            seconds, status = run(script, figures)
            print(f"== {script} took {seconds:.0f} s", flush=True)
            if status != 0:
                # The other scripts still run: one broken benchmark should not cost the round.
                print(f"== {script} failed with exit status {status}", flush=True)
                failed.append(f"{script} (round {round_number}, exit status {status})")
    print(f"\nheadline figures over {args.rounds} rounds (min–max, median; floor where there is one; load average min–max)")
    for key, records in figures.items():
        values = [r["value"] for r in records]
        unit = records[0]["unit"]
        floors = [r["floor"] for r in records if r["floor"] is not None]
        loads = [r["load"] for r in records]
        floor = f"; floor {shown(min(floors), unit)}–{shown(max(floors), unit)}" if floors else ""
        print(f"  {key}: {shown(min(values), unit)}–{shown(max(values), unit)} (median {shown(median(values), unit)}, "
              f"{len(values)} runs{floor}; load {min(loads):.1f}–{max(loads):.1f})")
    if failed:
        raise SystemExit("failed: " + ", ".join(failed))


if __name__ == "__main__":
    main()
