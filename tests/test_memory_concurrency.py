"""The built-in memory under real concurrency: several processes adding and replacing in one
directory at once lose nothing and never leave a file a reader cannot parse; a writer killed with
SIGKILL at random points leaves the previous content (or the next one), never a mix."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from osprey.memory.builtin import SEPARATOR, drift

WORKERS = 6
ITEMS = 24  # per worker

# One writer process: waits for the start file, then adds ITEMS entries, replaces every other one
# (v0 -> v1) and adds a user fact for every fifth, each a separate locked write.
WORKER = r"""
import asyncio, sys, time
from pathlib import Path
from osprey.memory.builtin import BuiltinMemory

directory, worker, items, go = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])

async def main() -> None:
    store = BuiltinMemory(directory, memory_char_limit=100_000, user_char_limit=100_000, lock_timeout=60)
    while not go.exists():
        time.sleep(0.001)
    for j in range(items):
        await store.add(f"note w{worker}-{j:03d} version 0")
        if j % 2 == 0:
            await store.replace(f"note w{worker}-{j:03d} version 0", f"note w{worker}-{j:03d} version 1")
        if j % 5 == 0:
            await store.add(f"user fact w{worker}-{j:03d}", "user")

asyncio.run(main())
"""

# A writer that moves the counter entry on and on (each replace rewrites a file of ~270 KB, so a
# kill often lands between the temporary file and the rename); it prints each counter it wrote.
COUNTER = r"""
import asyncio, sys
from pathlib import Path
from osprey.memory.builtin import BuiltinMemory

async def main() -> None:
    store = BuiltinMemory(Path(sys.argv[1]), memory_char_limit=1_000_000, lock_timeout=60)
    [entry] = await store.recall("counter")
    k = int(entry.text.split("=")[1])
    while True:
        await store.replace(f"counter={k:06d}", f"counter={k + 1:06d}")
        k += 1
        print(k, flush=True)

asyncio.run(main())
"""

NOTE = re.compile(r"note w\d-\d{3} version [01]")
USER_FACT = re.compile(r"user fact w\d-\d{3}")


def python(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def parse(path: Path) -> list[str]:
    """The entries of a memory file, failing the test when it is not well formed."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    text = data.decode("utf-8")
    assert data == b"" or text.endswith("\n"), f"{path} is cut short: {text[-80:]!r}"
    problem = drift(text)
    assert problem is None, f"{path} is corrupt: {problem}"
    return text.strip().split(SEPARATOR) if text.strip() else []


def test_writers_in_several_processes_lose_nothing_and_files_always_parse(tmp_path: Path) -> None:
    directory = tmp_path / "memory"
    go = tmp_path / "go"
    workers = [python(WORKER, str(directory), str(i), str(ITEMS), str(go)) for i in range(WORKERS)]
    reads = 0
    seen = {"MEMORY.md": 0, "USER.md": 0}  # entries are only added or replaced: never fewer
    try:
        time.sleep(0.5)  # let the interpreters start, so the writes overlap
        go.touch()
        while any(w.poll() is None for w in workers):
            for name, pattern in (("MEMORY.md", NOTE), ("USER.md", USER_FACT)):
                entries = parse(directory / name)
                for entry in entries:
                    assert pattern.fullmatch(entry), entry
                assert len(entries) >= seen[name], f"{name} went from {seen[name]} entries to {len(entries)}"
                seen[name] = len(entries)
            reads += 1
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    for w in workers:
        _, err = w.communicate(timeout=60)
        assert w.returncode == 0, err
    assert reads >= 10  # the reader really ran while the writers did

    entries = parse(directory / "MEMORY.md")
    expected = {f"note w{i}-{j:03d} version {1 if j % 2 == 0 else 0}" for i in range(WORKERS) for j in range(ITEMS)}
    assert len(entries) == len(expected) == WORKERS * ITEMS
    assert set(entries) == expected
    users = parse(directory / "USER.md")
    assert sorted(users) == sorted(f"user fact w{i}-{j:03d}" for i in range(WORKERS) for j in range(0, ITEMS, 5))
    # Each worker's entries are in the order it added them.
    for i in range(WORKERS):
        mine = [e for e in entries if e.startswith(f"note w{i}-")]
        assert mine == sorted(mine)
    assert not list(directory.glob("*.tmp"))


def test_a_writer_killed_at_random_points_leaves_the_previous_content(tmp_path: Path) -> None:
    directory = tmp_path / "memory"
    directory.mkdir(mode=0o700)
    padding = [c * 90_000 for c in "pqr"]  # large, so each write takes a while
    path = directory / "MEMORY.md"
    path.write_text(SEPARATOR.join([*padding, "counter=000000"]) + "\n", encoding="utf-8")
    rng = random.Random(21)
    committed = 0
    mid_write = 0
    for _ in range(30):
        writer = python(COUNTER, str(directory))
        assert writer.stdout is not None
        first = writer.stdout.readline()  # a first replace is done: the writer is in its loop
        assert first.strip().isdigit(), writer.stderr.read() if writer.stderr else first
        time.sleep(rng.uniform(0, 0.04))
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
        # Read the rest through the same buffered reader `readline` used: `communicate` reads the
        # pipes' descriptors and would miss lines that reader already holds.
        out = writer.stdout.read()
        if writer.stderr is not None:
            writer.stderr.close()
        writer.stdout.close()
        assert writer.returncode == -signal.SIGKILL
        printed = [int(line) for line in (first + out).split()]
        assert printed == list(range(committed + 1, committed + 1 + len(printed)))
        last = printed[-1]
        # The file is the state after the last write the writer reported, or after the one it was
        # in when it died (renamed, not yet reported): whole either way.
        entries = parse(path)
        assert entries[:3] == padding
        assert len(entries) == 4
        counter = int(entries[3].removeprefix("counter="))
        assert counter in (last, last + 1), (counter, last)
        committed = counter
        mid_write += bool(list(directory.glob("MEMORY.md.*.tmp")))
    # Some kills landed between the temporary file and the rename (its leftover proves it), and the
    # next writer removed what they left.
    assert mid_write >= 1
    assert committed >= 30
