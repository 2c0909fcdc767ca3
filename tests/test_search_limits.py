"""grep and find_files run without approval, so each call is bounded in time and memory.

Measurements run `osprey_sidecar.search.grep` in a fresh Python process (the probe), which
reports the peak RSS of itself (the serving side) and of its largest child (ripgrep or the
Python engine's worker), and how long its main thread was kept from running while the
search ran in another thread. The probe runs in its own process group with a timeout, so a
search that hangs or eats memory fails the test instead of the machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from osprey_sidecar import search
from osprey_sidecar.errors import ToolFailure
from osprey_sidecar.paths import Roots
from osprey_sidecar.search import find_files, grep

from test_search_engines import require_rg, write

from osprey.errors import ToolError
from osprey.toolclient import ToolClient

BIG_MB = 300
SMALL_MB = 100  # peak RSS allowed to the probe and to each of its children
BUDGET_S = 2.0
GRACE_S = 2.5  # a timeout answer arrives within the budget plus this
PROBE_TIMEOUT_S = 60.0
REDOS = "(?=(a+)+b)"

PROBE = r"""
import json, os, resource, sys, threading, time
from osprey_sidecar.errors import ToolFailure
from osprey_sidecar.paths import Roots
from osprey_sidecar.search import grep
args = json.loads(sys.argv[1])
outcome = {}

def call():
    start = time.monotonic()
    try:
        budget = {} if args["budget_s"] is None else {"budget_s": args["budget_s"]}
        r = grep(Roots([args["root"]]), args["pattern"], engine=args["engine"], **budget)
        outcome.update(matches=[[m.path, m.line, m.text] for m in r.matches], total=r.total, truncated=r.truncated, engine=r.engine)
    except ToolFailure as exc:
        outcome.update(category=exc.category, message=exc.message)
    outcome["seconds"] = time.monotonic() - start

thread = threading.Thread(target=call)
thread.start()
gap, last = 0.0, time.monotonic()
while thread.is_alive():
    time.sleep(0.01)
    now = time.monotonic()
    gap, last = max(gap, now - last), now
outcome["main_thread_gap"] = gap
outcome["children_left"] = [p for t in os.listdir("/proc/self/task") for p in open(f"/proc/self/task/{t}/children").read().split()]
outcome["self_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
outcome["child_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps(outcome))
"""


def probe(root: Path, pattern: str, engine: str | None, budget_s: float | None = None, *, address_space: int | None = None) -> dict:
    """Run grep in a fresh process; fail the test if it does not answer within PROBE_TIMEOUT_S."""
    cmd = [sys.executable, "-c", PROBE, json.dumps({"root": str(root), "pattern": pattern, "engine": engine, "budget_s": budget_s})]
    if address_space is not None:
        if shutil.which("prlimit") is None:
            pytest.skip("prlimit (util-linux) is needed to guard the machine during this test")
        cmd = ["prlimit", f"--as={address_space}", "--", *cmd]  # a guard for the machine, above every cap under test
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"grep {pattern!r} ({engine or 'default'} engine) did not answer within {PROBE_TIMEOUT_S:g} s")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything it left behind
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out)


def engines() -> list:
    return [pytest.param("ripgrep", id="ripgrep"), pytest.param("python", id="python")]


def need(engine: str | None) -> None:
    if engine == "ripgrep":
        require_rg()


# --- memory -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory):
    """A directory holding one 300 MB file of ordinary lines; removed after the module."""
    root = tmp_path_factory.mktemp("big")
    assert shutil.disk_usage(root).free > 4 * BIG_MB * 1024 * 1024, "not enough free disk for the big-file tests"
    line = b"the quick brown fox jumps over the lazy dog 0123456789\n"
    block = line * (1024 * 1024 // len(line))
    with (root / "big.txt").open("wb") as fh:
        for _ in range(BIG_MB):
            fh.write(block)
    yield root
    (root / "big.txt").unlink()


@pytest.mark.parametrize("engine", engines())
def test_grep_dot_on_a_big_file_holds_only_what_it_returns(big_file: Path, engine: str) -> None:
    need(engine)
    r = probe(big_file, ".", engine)
    assert r["engine"] == engine
    assert len(r["matches"]) == search.DEFAULT_MAX_MATCHES and r["truncated"]
    assert r["matches"][0] == ["big.txt", 1, "the quick brown fox jumps over the lazy dog 0123456789"]
    assert [m[1] for m in r["matches"]] == list(range(1, 501))
    assert r["total"] == search.COUNT_LIMIT  # counting stopped there: a lower bound
    assert r["self_mb"] < SMALL_MB, f"the serving process peaked at {r['self_mb']:.0f} MB"
    assert r["child_mb"] < SMALL_MB, f"the {engine} child peaked at {r['child_mb']:.0f} MB"


@pytest.mark.parametrize("engine", engines())
def test_one_huge_line_is_not_held_whole(tmp_path: Path, engine: str) -> None:
    need(engine)
    with (tmp_path / "one-line.txt").open("wb") as fh:
        for _ in range(64):
            fh.write(b"x" * 1024 * 1024)
        fh.write(b"\nlast line x\n")
    r = probe(tmp_path, "x", engine)
    assert r["engine"] == engine
    assert [m[:2] for m in r["matches"]] == [["one-line.txt", 1], ["one-line.txt", 2]]
    assert r["matches"][0][2] == "x" * search.MAX_MATCH_CHARS + " [...]"
    assert r["self_mb"] < SMALL_MB, f"the serving process peaked at {r['self_mb']:.0f} MB"
    if engine == "python":
        assert r["child_mb"] < SMALL_MB, f"the worker peaked at {r['child_mb']:.0f} MB"


# --- time ---------------------------------------------------------------------------------------


@pytest.fixture
def redos_tree(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text("a" * 40 + "\n")
    return tmp_path


@pytest.mark.parametrize("engine", [pytest.param(None, id="default"), pytest.param("python", id="python")])
def test_catastrophic_pattern_times_out_within_its_budget(redos_tree: Path, engine: str | None) -> None:
    # ripgrep refuses the lookaround, so the default engine falls back to Python too.
    r = probe(redos_tree, REDOS, engine, BUDGET_S)
    assert r.get("category") == "timeout", r
    assert BUDGET_S - 0.1 <= r["seconds"] < BUDGET_S + GRACE_S
    assert f"longer than {BUDGET_S:g} s" in r["message"] and "simplify the pattern" in r["message"]
    assert r["children_left"] == [], "the worker must be gone once the call has answered"


def test_catastrophic_pattern_does_not_block_other_threads(redos_tree: Path) -> None:
    r = probe(redos_tree, REDOS, "python", BUDGET_S)
    assert r.get("category") == "timeout", r
    assert r["main_thread_gap"] < 0.5, f"the main thread was held for {r['main_thread_gap']:.1f} s"


def test_timeout_through_a_direct_call(redos_tree: Path) -> None:
    start = time.monotonic()
    with pytest.raises(ToolFailure) as info:
        grep(Roots([str(redos_tree)]), REDOS, budget_s=1.0)
    assert info.value.category == "timeout"
    assert time.monotonic() - start < 1.0 + GRACE_S


def test_find_files_honours_its_budget(tmp_path: Path) -> None:
    for i in range(50):
        write(tmp_path, f"d{i % 5}/f{i}.txt", "")
    assert find_files(Roots([str(tmp_path)]), "*.txt").total == 50
    with pytest.raises(ToolFailure) as info:
        find_files(Roots([str(tmp_path)]), "*.txt", budget_s=0.0)
    assert info.value.category == "timeout"
    assert "narrow the path" in info.value.message


# --- ripgrep reading hostile .gitignore files --------------------------------------------------


def test_ripgrep_does_not_eat_memory_on_a_gitignore_that_is_dev_zero(tmp_path: Path) -> None:
    require_rg()
    write(tmp_path, "a.txt", "needle\n")
    (tmp_path / ".gitignore").symlink_to("/dev/zero")
    r = probe(tmp_path, "needle", "ripgrep", 10.0, address_space=3 * 1024**3)
    assert r["seconds"] < 10.0 + GRACE_S
    assert r["child_mb"] < search.RG_MEMORY_BYTES / 1024**2 + 50, f"a child peaked at {r['child_mb']:.0f} MB"
    assert r["self_mb"] < SMALL_MB
    # ripgrep fails at its memory cap; the Python engine answers, or says why it cannot.
    if "category" in r:
        assert r["category"] in ("io_error", "timeout") and len(r["message"]) < 400, r
    else:
        assert r["engine"] == "python" and [m[:2] for m in r["matches"]] == [["a.txt", 1]]


def test_ripgrep_does_not_hang_on_a_gitignore_that_is_a_fifo(tmp_path: Path) -> None:
    require_rg()
    write(tmp_path, "a.txt", "needle\n")
    os.mkfifo(tmp_path / ".gitignore")
    r = probe(tmp_path, "needle", "ripgrep", BUDGET_S)
    assert r.get("category") == "timeout", r
    assert r["seconds"] < BUDGET_S + GRACE_S
    assert r["children_left"] == []


# --- counting stops ---------------------------------------------------------------------------


@pytest.fixture
def small_count_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(search, "COUNT_LIMIT", 100)
    return 100


@pytest.mark.parametrize("engine", engines())
def test_counting_stops_at_the_count_limit(tmp_path: Path, small_count_limit: int, engine: str) -> None:
    need(engine)
    write(tmp_path, "a.txt", "hit\n" * 150)
    write(tmp_path, "b.txt", "hit\n" * 150)
    r = grep(Roots([str(tmp_path)]), "hit", max_matches=10, engine=engine)
    assert r.engine == engine
    assert [(m.path, m.line) for m in r.matches] == [("a.txt", n) for n in range(1, 11)]
    assert (r.total, r.truncated) == (small_count_limit, True)
    r = grep(Roots([str(tmp_path)]), "hit", max_matches=200, engine=engine)
    assert len(r.matches) == 200 and r.matches[-1].path == "b.txt"
    assert (r.total, r.truncated) == (201, True)  # never less than one past what is returned


@pytest.mark.parametrize("engine", engines())
def test_a_nul_past_the_count_limit_still_makes_a_file_binary(tmp_path: Path, small_count_limit: int, engine: str) -> None:
    need(engine)
    write(tmp_path, "a.dat", b"hit\n" * 300 + b"x" * 200_000 + b"\x00\n")
    write(tmp_path, "b.txt", "hit\n" * 3)
    r = grep(Roots([str(tmp_path)]), "hit", engine=engine)
    assert [(m.path, m.line) for m in r.matches] == [("b.txt", 1), ("b.txt", 2), ("b.txt", 3)]
    assert (r.total, r.truncated) == (3, False)


def test_find_files_counting_stops_at_the_count_limit(tmp_path: Path, small_count_limit: int) -> None:
    for i in range(150):
        write(tmp_path, f"f{i:03}.txt", "")
    r = find_files(Roots([str(tmp_path)]), "*.txt", limit=10)
    assert r.paths == [f"f{i:03}.txt" for i in range(10)]
    assert (r.total, r.truncated) == (small_count_limit, True)
    r = find_files(Roots([str(tmp_path)]), "*.txt", limit=150)
    assert (len(r.paths), r.total, r.truncated) == (150, 150, False)


# --- patterns that are refused ------------------------------------------------------------------


@pytest.mark.parametrize("engine", engines())
def test_bad_patterns_are_refused_briefly(tmp_path: Path, engine: str) -> None:
    need(engine)
    write(tmp_path, "a.txt", "needle\n")
    roots = Roots([str(tmp_path)])
    cases = {
        "nul": "need\x00le",
        "too long": "needle|" * 1200,
        "invalid, long": "(" * 3000,
        "invalid, long line": "x" * 3000 + "(",
    }
    for name, pattern in cases.items():
        with pytest.raises(ToolFailure) as info:
            grep(roots, pattern, engine=engine)
        assert info.value.category == "invalid_argument", name
        assert len(info.value.message) < 400, f"{name}: {len(info.value.message)} characters"
    with pytest.raises(ToolFailure) as info:
        find_files(roots, "*" * 5000)
    assert info.value.category == "invalid_argument" and len(info.value.message) < 400


# --- through the ToolService, in both homes -----------------------------------------------------


async def refused(call, category: str) -> ToolError:
    with pytest.raises(ToolError) as info:
        await asyncio.wait_for(call, 30)
    assert info.value.category == category, f"{info.value.category}: {info.value}"
    return info.value


async def test_bad_patterns_through_the_service(tools: ToolClient, workspace: Path) -> None:
    write(workspace, "a.txt", "needle\n")
    error = await refused(tools.grep("need\x00le"), "invalid_argument")
    assert "NUL" in str(error)
    error = await refused(tools.grep("(" * 8192), "invalid_argument")
    assert len(str(error)) < 400
    error = await refused(tools.grep("x" * 3000 + "("), "invalid_argument")
    assert len(str(error)) < 400 and "x" * 100 in str(error)
    assert [(m.path, m.line) for m in (await tools.grep("needle")).matches] == [("a.txt", 1)]


async def test_broad_search_through_the_service_stops_counting(tools: ToolClient, workspace: Path) -> None:
    write(workspace, "many.txt", "hit\n" * (search.COUNT_LIMIT + 5000))
    write(workspace, "z.txt", "hit\n")
    r = await tools.grep("hit")
    assert len(r.matches) == search.DEFAULT_MAX_MATCHES and r.truncated
    assert r.total == search.COUNT_LIMIT
    r = await tools.grep("hit", "z.txt")
    assert (r.total, r.truncated, [m.line for m in r.matches]) == (1, False, [1])
