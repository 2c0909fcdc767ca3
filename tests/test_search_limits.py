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
import threading
import time
from pathlib import Path

import pytest
from grep_answers import grep
from test_search_engines import require_rg, write

from osprey.errors import ToolError
from osprey.toolservice.client import ToolClient
from osprey_sidecar import search
from osprey_sidecar.errors import ToolFailure
from osprey_sidecar.paths import Roots
from osprey_sidecar.search import find_files

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
        matches = [[r.paths[i], line, text] for i, line, text in zip(r.match_paths, r.match_lines, r.match_texts)]
        outcome.update(matches=matches, total=r.total, truncated=r.truncated, engine=r.engine)
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
thread.join()
def task_children(task):
    try:  # a thread (the reaper of a killed ripgrep) may end between the listing and the read
        return open(f"/proc/self/task/{task}/children").read().split()
    except FileNotFoundError:
        return []
outcome["children_left"] = [p for t in os.listdir("/proc/self/task") for p in task_children(t)]
# VmHWM, not ru_maxrss: the latter keeps the peak of whatever process forked this one.
outcome["self_mb"] = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")) / 1024
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


# --- hostile .gitignore files ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["dev-zero", "fifo"])
def test_a_gitignore_that_is_not_a_regular_file_is_not_read(tmp_path: Path, kind: str) -> None:
    # The descriptor walk reads ignore files (regular ones only); ripgrep is handed files, never a
    # directory, so it reads no ignore file of its own.
    require_rg()
    write(tmp_path, "a.txt", "needle\n")
    if kind == "fifo":
        os.mkfifo(tmp_path / ".gitignore")
    else:
        (tmp_path / ".gitignore").symlink_to("/dev/zero")
    r = probe(tmp_path, "needle", "ripgrep", BUDGET_S, address_space=3 * 1024**3)
    assert r.get("engine") == "ripgrep", r
    assert [m[:2] for m in r["matches"]] == [["a.txt", 1]]
    assert r["seconds"] < BUDGET_S
    assert r["self_mb"] < SMALL_MB and r["child_mb"] < SMALL_MB
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


def brace_bomb() -> str:
    """A short glob whose braces spell out 3**5 = 243 alternatives, over the limit of 64."""
    return "{a,b,c}" * 5 + "*.txt"


@pytest.mark.parametrize("engine", engines())
def test_globs_compile_glob_refuses_are_refused_by_both_engines(tmp_path: Path, engine: str) -> None:
    need(engine)
    write(tmp_path, "a.txt", "needle\n")
    roots = Roots([str(tmp_path)])
    for glob in (brace_bomb(), "{x,y}" * 7, " " * 10 + "*" * 4095):
        with pytest.raises(ToolFailure) as info:
            grep(roots, "needle", glob=glob, engine=engine)
        assert info.value.category == "invalid_argument", f"{glob[:30]}: {info.value.category}: {info.value.message[:200]}"
        assert len(info.value.message) < 400
    # A glob under the limits still filters, in either engine.
    assert [m.path for m in grep(roots, "needle", glob="{a,b}.txt", engine=engine).matches] == ["a.txt"]


@pytest.mark.parametrize("engine", engines())
def test_messages_do_not_echo_long_arguments(tmp_path: Path, engine: str) -> None:
    need(engine)
    write(tmp_path, "a.txt", "needle\n")
    roots = Roots([str(tmp_path)])
    cases = {
        # re's own message quotes the group name it refuses.
        "bad group name": lambda: grep(roots, "(?P<" + "x-" * 1500 + ">a)", engine=engine),
        "unknown group": lambda: grep(roots, "(?P=" + "y" * 3000 + ")", engine=engine),
        "missing path": lambda: grep(roots, "needle", "zz/" * 1000, engine=engine),
        "missing path, find_files": lambda: find_files(roots, "*", "zz/" * 1000),
        "a file, find_files": lambda: find_files(roots, "*", "./" * 1500 + "a.txt"),
    }
    for name, call in cases.items():
        with pytest.raises(ToolFailure) as info:
            call()
        assert len(info.value.message) < 400, f"{name}: {len(info.value.message)} characters"
        assert info.value.category in ("invalid_argument", "not_found", "not_a_directory"), name


# --- few descriptors left -----------------------------------------------------------------------

FD_PROBE = r"""
import json, os, resource, sys
from osprey_sidecar.errors import ToolFailure
from osprey_sidecar.paths import Roots
from osprey_sidecar.search import grep
root, free = sys.argv[1], int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
grep(Roots([root]), "needle", engine="ripgrep")  # imports and probes done while descriptors last
fillers = []
while True:
    try:
        fillers.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        break
for fd in fillers[len(fillers) - free:]:
    os.close(fd)
try:
    r = grep(Roots([root]), "needle", engine="ripgrep")
    print(json.dumps({"engine": r.engine, "total": r.total}))
except ToolFailure as exc:
    print(json.dumps({"category": exc.category, "message": exc.message}))
"""


def test_running_out_of_descriptors_never_drops_files(tmp_path: Path) -> None:
    # ripgrep is handed open files; when none can be opened, those open are searched first,
    # and a search that cannot go on fails instead of leaving files out.
    require_rg()
    files = 100
    for i in range(files):
        write(tmp_path, f"f{i:03}.txt", "needle\n")
    outcomes = []
    for free in range(4, 64, 3):
        run = subprocess.run([sys.executable, "-c", FD_PROBE, str(tmp_path), str(free)], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr[-2000:]
        outcome = json.loads(run.stdout)
        outcomes.append((free, outcome))
        assert outcome.get("total", files) == files or outcome.get("category") == "io_error", (free, outcome)
    assert any(o.get("engine") == "ripgrep" for _, o in outcomes), outcomes


# --- cancelled calls ----------------------------------------------------------------------------


def children() -> set[str]:
    found: set[str] = set()
    for task in os.listdir("/proc/self/task"):
        try:  # a thread may end between the listing and the read
            found.update(Path(f"/proc/self/task/{task}/children").read_text().split())
        except FileNotFoundError:
            pass
    return found


def cancel_after(seconds: float) -> threading.Event:
    event = threading.Event()
    timer = threading.Timer(seconds, event.set)
    timer.daemon = True
    timer.start()
    return event


def test_a_cancelled_process_is_killed_at_once() -> None:
    before = children()
    start = time.monotonic()
    with pytest.raises(search._Cancelled):
        search._stream(["sleep", "30"], stdin=b"", deadline=time.monotonic() + 30, feed=lambda data: False, cancelled=cancel_after(0.2))
    assert time.monotonic() - start < 0.2 + 1.0
    assert children() - before == set(), "the process must be gone once the call has answered"


def test_a_cancelled_grep_stops_before_its_budget(redos_tree: Path) -> None:
    # The Python engine's worker is stuck in a catastrophic pattern; only a kill stops it.
    before = children()
    start = time.monotonic()
    with pytest.raises(ToolFailure) as info:
        grep(Roots([str(redos_tree)]), REDOS, engine="python", budget_s=30.0, cancelled=cancel_after(0.5))
    assert time.monotonic() - start < 0.5 + GRACE_S
    assert info.value.category == "timeout" and "cancelled" in info.value.message
    assert children() - before == set()


@pytest.mark.parametrize("engine", engines())
def test_a_search_already_cancelled_does_not_run(tmp_path: Path, engine: str) -> None:
    need(engine)
    for i in range(20):
        write(tmp_path, f"d{i % 4}/f{i}.txt", "needle\n")
    roots = Roots([str(tmp_path)])
    cancelled = threading.Event()
    assert grep(roots, "needle", engine=engine, cancelled=cancelled).total == 20
    assert find_files(roots, "*.txt", cancelled=cancelled).total == 20
    cancelled.set()
    for call in (
        lambda: grep(roots, "needle", engine=engine, cancelled=cancelled),
        lambda: grep(roots, "needle", "d0/f0.txt", engine=engine, cancelled=cancelled),
        lambda: find_files(roots, "*.txt", cancelled=cancelled),
    ):
        with pytest.raises(ToolFailure) as info:
            call()
        assert info.value.category == "timeout" and "cancelled" in info.value.message


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
    error = await refused(tools.grep("(?P<" + "x-" * 1500 + ">a)"), "invalid_argument")
    assert len(str(error)) < 400
    error = await refused(tools.grep("needle", glob=brace_bomb()), "invalid_argument")
    assert "alternatives" in str(error) and len(str(error)) < 400
    error = await refused(tools.grep("needle", "zz/" * 1000), "not_found")
    assert len(str(error)) < 400
    assert [(m.path, m.line) for m in (await tools.grep("needle")).matches] == [("a.txt", 1)]


async def test_broad_search_through_the_service_stops_counting(tools: ToolClient, workspace: Path) -> None:
    write(workspace, "many.txt", "hit\n" * (search.COUNT_LIMIT + 5000))
    write(workspace, "z.txt", "hit\n")
    r = await tools.grep("hit")
    assert len(r.matches) == search.DEFAULT_MAX_MATCHES and r.truncated
    assert r.total == search.COUNT_LIMIT
    r = await tools.grep("hit", "z.txt")
    assert (r.total, r.truncated, [m.line for m in r.matches]) == (1, False, [1])
