"""Extension discovery: a workspace 50 directories deep with a `.osprey` layer in each (one of every
kind of artifact: SYSTEM.md, APPEND_SYSTEM.md, AGENTS.md, tool-descriptions.toml, toolsets.toml,
hooks.toml, and `--tools-per-layer` custom tool manifests with their programs) against an empty one.

- cold: a fresh interpreter that imports what a session has imported by then (the session core,
  the tools), then times the imports of discovery and one `discover()` (what a session start
  pays for it), empty tree and full tree alternated;
- warm: `discover()` again in this process (what `/reload` pays).

Goal (issue 11): discovery adds at most 50 ms to start-up.

    .venv/bin/python bench/extension_discovery.py [--runs 11]
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

from _stats import ensure_bytecode, figure, median  # noqa: E402

DEPTH = 50

# What a session start has imported before it discovers extensions is not counted.
COLD = """
import sys, time
import asyncio, osprey.session.core, osprey.tools
from osprey.config import load_settings
settings = load_settings(sys.argv[1], {}, {"OSPREY_HOME": sys.argv[2], "OPENAI_API_KEY": "x"})
start = time.perf_counter()
from osprey.extensions.discovery import discover
found = discover(settings, {"read_file", "write_file", "edit_file", "bash", "find_files", "grep", "list_directory", "tree"})
print(time.perf_counter() - start, len(found.artifacts))
"""


def build(root: Path, full: bool, tools_per_layer: int = 1) -> Path:
    (root / ".git").mkdir(parents=True)
    directory = root
    for depth in range(DEPTH):
        if full:
            layer = directory / ".osprey"
            (layer / "tools").mkdir(parents=True)
            (layer / "SYSTEM.md").write_text(f"base prompt {depth}\n" * 20)
            (layer / "APPEND_SYSTEM.md").write_text(f"append {depth}\n" * 20)
            (directory / "AGENTS.md").write_text(f"instructions {depth}\n" * 10)
            (layer / "tool-descriptions.toml").write_text(f'grep = "grep at depth {depth}"\n')
            (layer / "toolsets.toml").write_text(f'[toolsets.s{depth}]\ntools = ["read_file"]\n')
            (layer / "hooks.toml").write_text('[[hooks.PreToolUse]]\nmatcher = "bash"\n[[hooks.PreToolUse.hooks]]\ncommand = "./guard.sh"\n')
            for n in range(tools_per_layer):
                program = layer / "tools" / f"t{n}.sh"
                program.write_text("#!/bin/sh\ncat\n")
                program.chmod(0o755)
                (layer / "tools" / f"t{n}.toml").write_text(
                    f'name = "tool_{depth}_{n}"\ndescription = "a tool"\ncommand = ["./t{n}.sh"]\n'
                    '[parameters.text]\ntype = "string"\nrequired = true\n')
        directory = directory / f"d{depth}"
        directory.mkdir()
    return directory


def main() -> None:
    ensure_bytecode()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--tools-per-layer", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="osprey-discovery-bench-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        trees = {"empty": build(Path(tmp) / "empty", False), "full": build(Path(tmp) / "full", True, args.tools_per_layer)}
        cold: dict[str, list[float]] = {"empty": [], "full": []}
        counts: dict[str, int] = {}
        env = dict(os.environ, OSPREY_HOME=str(home))
        for _ in range(args.runs):
            for name, cwd in trees.items():
                out = subprocess.run([sys.executable, "-c", COLD, str(cwd), str(home)], env=env, capture_output=True, text=True, check=True)
                seconds, count = out.stdout.split()
                cold[name].append(float(seconds))
                counts[name] = int(count)
        from osprey.config import load_settings
        from osprey.extensions.discovery import discover

        warm: dict[str, list[float]] = {"empty": [], "full": []}
        for _ in range(args.runs):
            for name, cwd in trees.items():
                settings = load_settings(cwd, {}, {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "x"})
                start = time.perf_counter()
                discover(settings, {"read_file", "grep", "bash"})
                warm[name].append(time.perf_counter() - start)
    print(f"extension discovery, {DEPTH} layers deep, {args.tools_per_layer} tools a layer, {args.runs} runs, medians (load average {os.getloadavg()[0]:.2f})")
    for name in ("empty", "full"):
        print(f"  {name:>5} tree ({counts[name]:4d} artifacts): cold {median(cold[name]) * 1e3:6.1f} ms (imports included), "
              f"warm {median(warm[name]) * 1e3:6.1f} ms")
    added = median(cold["full"]) - median(cold["empty"])
    print(f"  added by 50 full layers at start-up: {added * 1e3:.1f} ms; whole cold discovery of the full tree: "
          f"{median(cold['full']) * 1e3:.1f} ms (goal <= 50 ms)")
    figure("cold discovery of 50 full layers (imports included)", median(cold["full"]) * 1e3, "ms", floor=median(cold["empty"]) * 1e3)
    figure("warm discovery of 50 full layers", median(warm["full"]) * 1e3, "ms", floor=median(warm["empty"]) * 1e3)


if __name__ == "__main__":
    main()
