"""Skill discovery and the memory snapshot at start-up: 200 skills across four roots (the project's `.agents/skills`, two
`--skill-dir` roots and the user root, 50 each, with realistic YAML frontmatter and 8 KiB bodies)
against the same roots empty, and against no skills at all (not even the bundled ones, so PyYAML is
never imported).

Each run is a fresh interpreter that imports what a session has imported before it discovers skills
(the session core, the tools), then times `discover_skills` and the prompt block, and counts the
bytes the process read meanwhile (the kernel's `rchar`): with every body 8 KiB, a count near the
frontmatter total shows that no body was read. The variants alternate run by run; the wall time of
each whole process is printed beside `python -c pass` and beside the same interpreter doing
nothing after its imports (the floors).

The full tree also has a full built-in memory (both targets at their limits, 2,200 and 1,375
characters): the snapshot the system prompt shows is taken in the same timed span, as a session's
start takes it; the empty tree's memory files are missing. A session start checks each memory
entry against the injection patterns unless an earlier check of the same text is on record
(`.checked`), and parses each SKILL.md's frontmatter unless an earlier discovery read the same
file (`$OSPREY_HOME/cache/skills.json`); the "cold" variant removes both first, as the first
session after the skills and memory all changed finds them.

Goal: the 200 skills and a full memory snapshot add at most 30 ms over a session without them.

    .venv/bin/python bench/skills_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import ensure_bytecode, figure, median, percentile  # noqa: E402

SKILLS = 200
BODY_BYTES = 8 * 1024

# What a session start has imported before it discovers skills is not counted in "discovery".
CHILD = """
import json, sys, time
import asyncio, osprey.session.core, osprey.tools
from pathlib import Path
mode, cwd, home = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
dirs = [Path(p) for p in sys.argv[4:]]

def rchar():
    try:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))
    except OSError:
        return -1

if mode == "floor":
    print(json.dumps({"seconds": 0.0}))
    raise SystemExit
if mode == "cold":  # nothing on record: the first session after the skills and memory changed
    (home / "memory" / ".checked").unlink(missing_ok=True)
    (home / "cache" / "skills.json").unlink(missing_ok=True)
start = time.perf_counter()
from osprey.skills import discover_skills
kwargs = {"bundled_root": home / "no-bundled"} if mode == "nothing" else {"cache": home / "cache" / "skills.json"}
warnings = []
registry = discover_skills(cwd=cwd, workspace_root=cwd, skill_dirs=dirs, user_root=home / "skills", warn=warnings.append, **kwargs)
block = registry.prompt_block()
if mode != "nothing":
    from osprey.memory.builtin import BuiltinMemory
    memory = asyncio.run(BuiltinMemory(home / "memory").snapshot())
else:
    memory = ""
seconds = time.perf_counter() - start
yaml_loaded = "yaml" in sys.modules
# Again, with every import done and no cache: what the process reads now is discovery's own reading.
kwargs.pop("cache", None)
import yaml  # noqa: F401  # its import reads files too: done before counting
before = rchar()
again = discover_skills(cwd=cwd, workspace_root=cwd, skill_dirs=dirs, user_root=home / "skills", warn=warnings.append, **kwargs)
after = rchar()
print(json.dumps({"seconds": seconds, "skills": len(registry.skills), "warnings": warnings, "rchar": after - before,
                  "bytes_read": again.bytes_read, "prompt_chars": len(block), "memory_chars": len(memory), "yaml": yaml_loaded}))
"""

FRONT = """---
name: {name}
description: >
  Use this skill when the task involves area {n}: it explains the conventions, the commands to run
  and the checks to make before the work is handed back. Covers the usual failures and their fixes.
license: Apache-2.0
allowed-tools:
  - Bash
  - Read
metadata:
  version: "1.{n}"
  short-description: Area {n} conventions
---
"""


def build(tmp: Path, full: bool) -> tuple[Path, Path, list[Path]]:
    """A workspace, a home and two skill dirs; with `full`, 50 skills in each of the four roots."""
    kind = "full" if full else "empty"
    workspace, home = tmp / kind / "ws", tmp / kind / "home"
    dirs = [tmp / kind / "team-skills", tmp / kind / "more-skills"]
    roots = [workspace / ".agents" / "skills", *dirs, home / "skills"]
    (workspace / ".git").mkdir(parents=True)
    (home / "no-bundled").mkdir(parents=True)
    for root in roots:
        root.mkdir(parents=True, exist_ok=True)
    if full:
        for n in range(SKILLS):
            name = f"area-{n}-skill"
            folder = roots[n % len(roots)] / name
            (folder / "scripts").mkdir(parents=True)
            front = FRONT.format(name=name, n=n)
            body = f"# Area {n}\n\n" + ("Follow the steps. " * 60 + "\n") * (BODY_BYTES // 1081 + 1)
            (folder / "SKILL.md").write_text(front + body[:BODY_BYTES])
            (folder / "scripts" / "check.sh").write_text("#!/bin/sh\nexit 0\n")
        fill_memory(home / "memory")
    return workspace, home, dirs


def fill_memory(directory: Path) -> None:
    """Both memory targets at their default limits (2,200 and 1,375 characters), in entries."""
    directory.mkdir(parents=True)
    for name, limit in (("MEMORY.md", 2200), ("USER.md", 1375)):
        entries: list[str] = []
        n = 0
        while len("\n§\n".join([*entries, f"Fact {n}: the build runs make check before a release, area {n}."])) <= limit:
            entries.append(f"Fact {n}: the build runs make check before a release, area {n}.")
            n += 1
        (directory / name).write_text("\n§\n".join(entries) + "\n")


def frontmatter_bytes(workspace: Path, home: Path, dirs: list[Path]) -> tuple[int, int]:
    """The bytes of all frontmatter blocks and of all SKILL.md files of a tree."""
    front = whole = 0
    for root in (workspace / ".agents" / "skills", *dirs, home / "skills"):
        for path in root.glob("*/SKILL.md"):
            data = path.read_bytes()
            front += data.index(b"\n---\n", 4) + 5
            whole += len(data)
    return front, whole


def main() -> None:
    ensure_bytecode()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="osprey-skills-bench-") as tmp_name:
        tmp = Path(tmp_name)
        trees = {"full": build(tmp, True), "empty": build(tmp, False)}
        variants = {
            "python -c pass": None,
            "imports only (floor)": ("floor", "empty"),
            "no skills at all": ("nothing", "empty"),
            "bundled only": ("bundled", "empty"),
            f"{SKILLS} skills, 4 roots": ("bundled", "full"),
            "the same, memory cold": ("cold", "full"),
        }
        wall: dict[str, list[float]] = {name: [] for name in variants}
        inner: dict[str, list[float]] = {name: [] for name in variants}
        last: dict[str, dict] = {}
        env = dict(os.environ, OSPREY_HOME=str(tmp / "unused-home"))
        for run in range(args.runs + 1):  # the first round warms the page cache and is not counted
            for name, variant in variants.items():
                if variant is None:
                    cmd = [sys.executable, "-c", "pass"]
                else:
                    mode, tree = variant
                    workspace, home, dirs = trees[tree]
                    cmd = [sys.executable, "-c", CHILD, mode, str(workspace), str(home), *map(str, dirs)]
                start = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
                elapsed = time.perf_counter() - start
                if proc.returncode != 0:
                    raise SystemExit(f"{name}: exit {proc.returncode}: {proc.stderr[-2000:]}")
                if run == 0:
                    continue
                wall[name].append(elapsed)
                if variant is not None:
                    out = json.loads(proc.stdout)
                    inner[name].append(out["seconds"])
                    last[name] = out
        front, whole = frontmatter_bytes(*trees["full"])
    full_name = f"{SKILLS} skills, 4 roots"  # and a full memory
    print(f"skill discovery at start-up, {args.runs} runs each, interleaved, medians (load average {os.getloadavg()[0]:.2f})")
    print(f"  floors: python -c pass {median(wall['python -c pass']) * 1e3:.1f} ms; the same interpreter with a session's "
          f"imports and nothing else {median(wall['imports only (floor)']) * 1e3:.1f} ms")
    for name in ("no skills at all", "bundled only", full_name, "the same, memory cold"):
        out = last[name]
        print(f"  {name:>18}: discovery {median(inner[name]) * 1e3:6.1f} ms (p90 {percentile(inner[name], 90) * 1e3:.1f}), "
              f"whole process {median(wall[name]) * 1e3:6.1f} ms; {out['skills']} skills, prompt block {out['prompt_chars']} chars, "
              f"memory snapshot {out['memory_chars']} chars, "
              f"PyYAML imported: {out['yaml']}")
    added = median(inner[full_name]) - median(inner["bundled only"])
    added_wall = median(wall[full_name]) - median(wall["bundled only"])
    print(f"  added by {SKILLS} skills and a full memory over a session without them: {added * 1e3:.1f} ms in discovery and snapshot, "
          f"{added_wall * 1e3:.1f} ms of whole-process time (goal <= 30 ms)")
    figure(f"added by {SKILLS} skills and a full memory", added * 1e3, "ms")
    cold = median(inner["the same, memory cold"]) - median(inner["bundled only"])
    print(f"  the same with nothing on record (the first session after every skill and memory entry changed): {cold * 1e3:.1f} ms")
    figure(f"added by {SKILLS} skills and a full memory, nothing on record", cold * 1e3, "ms")
    from_nothing = median(inner[full_name]) - median(inner["no skills at all"])
    print(f"  over a session with no skills at all (no bundled ones, PyYAML never imported, no memory): {from_nothing * 1e3:.1f} ms")
    feature = median(inner["bundled only"]) - median(inner["no skills at all"])
    print(f"  the bundled skills themselves (read from the cache; PyYAML imported: {last['bundled only']['yaml']}): {feature * 1e3:.1f} ms")
    out = last[full_name]
    if out["warnings"]:
        print(f"  warnings: {out['warnings'][:3]}")
    print(f"  SKILL.md bytes read by discovery: {out['bytes_read']}; the process read {out['rchar']} bytes in all during it "
          f"(kernel rchar, a second discovery with imports done); the {SKILLS} files hold {front} bytes of frontmatter, {whole} in all")
    if 0 <= out["rchar"] < front + SKILLS * 1024 < whole:
        print("  no SKILL.md body was read: each read stops at most one 1 KiB chunk past the frontmatter's closing line")
    else:
        print("  BODIES WERE READ (or /proc/self/io is missing)")


if __name__ == "__main__":
    main()
