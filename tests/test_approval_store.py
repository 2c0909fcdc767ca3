"""The saved approvals file: reading what is there, changing it under a lock, surviving crashes."""

from __future__ import annotations

import fcntl
import os
import random
import select
import stat
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import tomli

from osprey.policy.rules import Rule, RuleError
from osprey.policy.store import MAX_BYTES, ApprovalStore, ApprovalStoreError, SavedRule, render


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "osprey-home"


@pytest.fixture
def warnings() -> list[str]:
    return []


@pytest.fixture
def store(home: Path, warnings: list[str]) -> ApprovalStore:
    return ApprovalStore.for_home(home, warn=warnings.append)


def _file(home: Path) -> Path:
    return home / "approvals.toml"


def _rules_in_file(home: Path) -> list[dict]:
    return tomli.loads(_file(home).read_text(encoding="utf-8")).get("rules", [])


# -- adding, revoking, covering


def test_add_saves_a_rule_in_a_private_file_and_load_reads_it(store: ApprovalStore, home: Path, warnings: list[str]) -> None:
    saved = store.add("bash(git  diff  *)", project="/work/ws")
    assert saved.rule == "bash(git diff *)"  # canonical text
    assert saved.project == "/work/ws"
    assert saved.id.startswith("r-") and len(saved.id) == 8
    assert saved.created.tzinfo is not None
    assert [r.model_dump() for r in store.load()] == [saved.model_dump()]
    assert [r.model_dump() for r in ApprovalStore.for_home(home).load()] == [saved.model_dump()]
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(_file(home)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(home / "approvals.toml.lock").st_mode) == 0o600
    on_disk = _rules_in_file(home)
    assert on_disk == [{"id": saved.id, "rule": "bash(git diff *)", "project": "/work/ws", "created": saved.created}]
    assert "Z" in _file(home).read_text()  # created is written in UTC
    assert warnings == []


def test_a_global_rule_has_no_project_key(store: ApprovalStore, home: Path) -> None:
    saved = store.add(Rule.parse("read_file"), project=None)
    assert saved.project is None
    assert "project" not in _rules_in_file(home)[0]


def test_the_same_rule_and_scope_is_saved_once(store: ApprovalStore, home: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "link").symlink_to(ws)
    first = store.add("bash(git diff *)", project=str(ws))
    assert store.add("bash(git diff    *)", project=str(ws) + "/") == first
    assert store.add(Rule.parse("bash(git diff *)"), project=str(tmp_path / "link")) == first  # same place, resolved
    glob = store.add("bash(git diff *)", project=None)
    assert glob.id != first.id
    assert store.add("bash(git diff *)", project=None) == glob
    assert len(_rules_in_file(home)) == 2


def test_add_refuses_invalid_rules_and_projects_before_touching_the_file(store: ApprovalStore, home: Path) -> None:
    with pytest.raises(RuleError, match="takes no pattern"):
        store.add("Bash(ls)", project=None)
    with pytest.raises(RuleError, match="outside the workspace"):
        store.add("read_file(/etc/**)", project="/work/ws")
    with pytest.raises(ValueError, match="absolute path"):
        store.add("read_file", project="relative/ws")
    with pytest.raises(ValueError, match="not valid Unicode"):
        store.add("read_file", project="/work/\udcffws")
    with pytest.raises(RuleError):
        store.add(Rule("bash", "'unterminated"), project=None)  # a hand-built Rule is checked too
    assert not _file(home).exists()


def test_revoke_removes_by_id_and_leaves_the_file_alone_for_an_unknown_id(store: ApprovalStore, home: Path) -> None:
    a = store.add("bash(git status)", project=None)
    b = store.add("read_file(docs/**)", project="/work/ws")
    before = os.stat(_file(home))
    assert store.revoke("r-nothere") is None
    after = os.stat(_file(home))
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert store.revoke(a.id) == a
    assert [r.id for r in store.load()] == [b.id]
    assert store.revoke(a.id) is None


def test_covering_finds_the_rule_for_this_workspace(store: ApprovalStore, tmp_path: Path) -> None:
    ws, other = tmp_path / "ws", tmp_path / "other"
    ws.mkdir()
    other.mkdir()
    (tmp_path / "ws-link").symlink_to(ws)
    project = store.add("write_file(src/**)", project=str(ws))
    everywhere = store.add("read_file", project=None)
    call = {"path": "src/a.py"}
    assert store.covering("write_file", call, cwd=str(ws), workspace=str(ws)) == project
    assert store.covering("write_file", call, cwd=str(other), workspace=str(other)) is None
    link = str(tmp_path / "ws-link")
    assert store.covering("write_file", call, cwd=link, workspace=link) == project
    assert store.covering("write_file", {"path": "lib/a.py"}, cwd=str(ws), workspace=str(ws)) is None
    assert store.covering("read_file", {"path": "/etc/hosts"}, cwd=str(other), workspace=str(other)) == everywhere
    assert project.applies_to(str(ws)) and project.applies_to(link) and not project.applies_to(str(other))
    assert everywhere.applies_to("/anywhere")


def test_load_sees_changes_other_processes_made(store: ApprovalStore, home: Path) -> None:
    store.add("read_file", project=None)
    assert len(store.load()) == 1
    ApprovalStore.for_home(home).add("tree", project=None)
    assert [r.rule for r in store.load()] == ["read_file", "tree"]
    _file(home).unlink()
    assert store.load() == []


def test_odd_text_round_trips_through_the_file(store: ApprovalStore, home: Path, tmp_path: Path) -> None:
    texts = [
        "bash(echo \"a\\\"b\" 'c\\d' é ✓ 中文 \"$x\")",
        "bash(printf 'line1\nline2\ttab\\n' \"\x01\x7f\")",
        "read_file(dir with \"quotes\"/back\\slash/ünï ☃/new\nline\ttab\rcr)",
        "write_file(''' \"\"\" #not-a-comment = [x])",
    ]
    project = str(tmp_path / "we\"ird \\ pro\nject ✓")
    saved = [store.add(text, project=project) for text in texts]
    loaded = ApprovalStore.for_home(home).load()
    assert [r.model_dump() for r in loaded] == [s.model_dump() for s in saved]
    assert [r.parsed() for r in loaded] == [Rule.parse(t) for t in texts]
    assert [r["rule"] for r in _rules_in_file(home)] == [str(Rule.parse(t)) for t in texts]
    path_rule = loaded[2].parsed()
    assert path_rule.covers("read_file", {"path": "dir with \"quotes\"/back\\slash/ünï ☃/new\nline\ttab\rcr"}, cwd=project, workspace=project)
    assert "\n" not in "".join(line for line in _file(home).read_text().splitlines() if line.startswith("rule ="))


def test_render_writes_naive_and_fractional_datetimes_faithfully() -> None:
    entries = [
        SavedRule(id="r-1", rule="tree", created=datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)),
        SavedRule(id="r-2", rule="tree", created=datetime(2026, 1, 2, 3, 4, 5)),
    ]
    data = tomli.loads(render(entries))
    assert [SavedRule.model_validate(r) for r in data["rules"]] == entries


# -- files that are missing, malformed or strange


def test_a_missing_file_is_an_empty_store_without_a_warning(store: ApprovalStore, home: Path, warnings: list[str]) -> None:
    assert store.load() == []
    assert store.covering("read_file", {"path": "a"}, cwd="/w", workspace="/w") is None
    assert store.problem() is None
    assert warnings == []
    assert not home.exists()  # reading creates nothing


MALFORMED = [
    b"[[rules]\nid = 'x'\n",
    b"rules = 3\n",
    b"[[rules]]\nid = 1\nrule = 'tree'\ncreated = 2026-01-01T00:00:00Z\n",
    b"[[rules]]\nid = 'r-1'\nrule = 'tree'\n",  # no created
    b"[[rules]]\nid = 'r-1'\nrule = 'tree'\ncreated = 2026-01-01T00:00:00Z\nnote = 'extra key'\n",
    b"[other]\nx = 1\n",
    b"\xff\xfe not utf-8",
]


@pytest.mark.parametrize("content", MALFORMED)
def test_a_malformed_file_loads_empty_and_warns_once(store: ApprovalStore, home: Path, warnings: list[str], content: bytes) -> None:
    home.mkdir()
    _file(home).write_bytes(content)
    assert store.load() == []
    assert store.load() == []
    assert len(warnings) == 1
    assert str(_file(home)) in warnings[0]
    assert "ignored until it is fixed or removed" in warnings[0]
    assert store.problem() is not None


@pytest.mark.parametrize("content", MALFORMED[:3])
def test_add_moves_a_malformed_file_aside_instead_of_dropping_it(store: ApprovalStore, home: Path, warnings: list[str], content: bytes) -> None:
    home.mkdir()
    _file(home).write_bytes(content)
    saved = store.add("read_file", project=None)
    aside = [p for p in home.iterdir() if p.name.startswith("approvals.toml.malformed-")]
    assert len(aside) == 1 and aside[0].read_bytes() == content
    assert any(f"Moved it to {aside[0]}" in w for w in warnings)
    assert [r.id for r in store.load()] == [saved.id]
    _file(home).write_bytes(content)  # broken again in the same second: a second name
    store.add("tree", project=None)
    assert len([p for p in home.iterdir() if p.name.startswith("approvals.toml.malformed-")]) == 2


def test_revoke_on_a_malformed_file_changes_nothing(store: ApprovalStore, home: Path, warnings: list[str]) -> None:
    home.mkdir()
    _file(home).write_bytes(MALFORMED[0])
    assert store.revoke("r-1") is None
    assert _file(home).read_bytes() == MALFORMED[0]
    assert any("nothing was changed" in w for w in warnings)


def test_an_entry_whose_rule_no_longer_parses_is_skipped_but_kept(store: ApprovalStore, home: Path, warnings: list[str]) -> None:
    home.mkdir()
    _file(home).write_text(
        "[[rules]]\nid = 'r-good'\nrule = 'tree'\ncreated = 2026-01-01T00:00:00Z\n"
        "[[rules]]\nid = 'r-old'\nrule = 'Bash(ls)'\ncreated = 2026-01-01T00:00:00Z\n"
    )
    assert [r.id for r in store.load()] == ["r-good"]
    assert len(warnings) == 1 and "r-old" in warnings[0] and "osprey approvals revoke r-old" in warnings[0]
    store.add("read_file", project=None)
    assert [r["id"] for r in _rules_in_file(home)][:2] == ["r-good", "r-old"]  # not dropped by a rewrite
    assert store.revoke("r-old") is not None
    assert [r["id"] for r in _rules_in_file(home)] == ["r-good", store.load()[1].id]


def _load_in_a_thread(store: ApprovalStore) -> list[SavedRule]:
    """load(), failing the test instead of hanging if it ever blocks."""
    out: list[list[SavedRule]] = []
    thread = threading.Thread(target=lambda: out.append(store.load()), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "load() blocked"
    return out[0]


def test_a_fifo_is_never_opened_for_reading_and_is_moved_aside_by_add(store: ApprovalStore, home: Path, warnings: list[str]) -> None:
    home.mkdir()
    os.mkfifo(_file(home))
    assert _load_in_a_thread(store) == []
    assert len(warnings) == 1 and "not a regular file" in warnings[0]
    store.add("tree", project=None)
    assert [r.rule for r in store.load()] == ["tree"]
    assert any(stat.S_ISFIFO(p.lstat().st_mode) for p in home.iterdir() if "malformed" in p.name)


def test_a_huge_file_is_read_no_further_than_the_limit(store: ApprovalStore, home: Path, warnings: list[str]) -> None:
    home.mkdir()
    with open(_file(home), "wb") as fh:
        fh.truncate(8 * 1024**3)  # sparse: reading it all would take long and use memory
    assert _load_in_a_thread(store) == []
    assert len(warnings) == 1 and "larger than 1 MiB" in warnings[0]


def test_a_link_to_a_device_or_a_loop_is_refused(store: ApprovalStore, home: Path, warnings: list[str]) -> None:
    home.mkdir()
    _file(home).symlink_to("/dev/zero")
    assert _load_in_a_thread(store) == []
    assert "not a regular file" in warnings[-1]
    _file(home).unlink()
    _file(home).symlink_to("approvals.toml")
    assert store.load() == []
    assert "cannot be read" in warnings[-1]


def test_a_directory_in_its_place_is_reported(store: ApprovalStore, home: Path, warnings: list[str]) -> None:
    _file(home).mkdir(parents=True)
    assert store.load() == []
    assert "a directory" in warnings[-1]
    store.add("tree", project=None)
    assert [r.rule for r in store.load()] == ["tree"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_loads_empty_with_a_warning(store: ApprovalStore, home: Path, warnings: list[str]) -> None:
    home.mkdir()
    _file(home).write_text("[[rules]]\nid = 'r-1'\nrule = 'tree'\ncreated = 2026-01-01T00:00:00Z\n")
    _file(home).chmod(0)
    assert store.load() == []
    assert "cannot be read" in warnings[0]


def test_a_file_that_would_pass_the_limit_is_not_written(store: ApprovalStore, home: Path) -> None:
    home.mkdir()
    created = datetime(2026, 1, 1, tzinfo=UTC)
    entries = [SavedRule(id=f"r-{i:06x}", rule="bash(echo " + f"{i:0100d}" + ")", created=created) for i in range(2)]
    one = len(render(entries)) - len(render(entries[:1]))
    fits = (MAX_BYTES - len(render([]))) // one
    entries = [SavedRule(id=f"r-{i:06x}", rule="bash(echo " + f"{i:0100d}" + ")", created=created) for i in range(fits)]
    text = render(entries)
    assert MAX_BYTES - 300 < len(text.encode()) <= MAX_BYTES
    _file(home).write_text(text)
    assert len(store.load()) == len(entries)
    with pytest.raises(ApprovalStoreError, match="would grow past 1 MiB"):
        store.add("bash(echo " + "y" * 300 + ")", project=None)
    assert _file(home).read_text() == text


# -- locking, concurrency and crashes


def _readline(proc: subprocess.Popen[str], timeout: float = 30) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the child said nothing"
    return proc.stdout.readline().strip()


def test_a_held_lock_makes_an_update_fail_after_a_bounded_wait(store: ApprovalStore, home: Path) -> None:
    home.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n"
    ), str(home / "approvals.toml.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert _readline(holder) == "locked"
        store.lock_timeout = 0.3
        started = time.monotonic()
        with pytest.raises(ApprovalStoreError, match="locked by another process") as info:
            store.add("tree", project=None)
        assert time.monotonic() - started < 5
        assert "approvals.toml.lock" in str(info.value)
        assert not _file(home).exists()
    finally:
        holder.kill()
        holder.wait()
    store.add("tree", project=None)  # the lock died with its holder
    assert [r.rule for r in store.load()] == ["tree"]


WRITER = """
import sys
from pathlib import Path
from osprey.policy.store import ApprovalStore
store = ApprovalStore(Path(sys.argv[1]))
store.lock_timeout = 120
for i in range(int(sys.argv[3])):
    store.add(f"bash(echo {sys.argv[2]}-{i})", project=None)
    store.add("bash(echo shared)", project=None)
"""


def test_concurrent_writer_processes_lose_nothing_and_duplicate_nothing(home: Path) -> None:
    writers, adds = 6, 25
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(_file(home)), f"w{n}", str(adds)],
                              stderr=subprocess.PIPE, text=True) for n in range(writers)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    rules = _rules_in_file(home)  # the file parses
    texts = [r["rule"] for r in rules]
    expected = {f"bash(echo w{n}-{i})" for n in range(writers) for i in range(adds)} | {"bash(echo shared)"}
    assert sorted(texts) == sorted(expected)  # every rule exactly once
    assert len({r["id"] for r in rules}) == len(rules)
    assert not [p for p in home.iterdir() if p.name.endswith(".tmp")]


SLOW_WRITER = """
import os, sys, time
from pathlib import Path
from osprey.policy.store import ApprovalStore
real_write, real_replace = os.write, os.replace
def slow_write(fd, data):
    time.sleep(0.002)
    return real_write(fd, bytes(data[:8192]))
def slow_replace(src, dst):
    if sys.argv[3] == "hang":
        print("renaming", flush=True)
        time.sleep(600)
    time.sleep(0.02)
    real_replace(src, dst)
os.write = slow_write
os.replace = slow_replace
store = ApprovalStore(Path(sys.argv[1]))
print("ready", flush=True)
for i in range(100000):
    store.add(f"bash(echo {sys.argv[2]}-{i})", project=None)
"""


def test_a_writer_killed_mid_rewrite_leaves_the_old_or_the_new_file(home: Path) -> None:
    home.mkdir()
    created = datetime(2026, 1, 1, tzinfo=UTC)
    base = [SavedRule(id=f"r-{i:06x}", rule=f"bash(echo base-{i} " + "p" * 60 + ")", created=created) for i in range(1500)]
    _file(home).write_text(render(base))  # ~150 KB: each rewrite takes a while
    rng = random.Random(7)
    runs = 6
    for run in range(runs):
        child = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(_file(home)), f"run{run}", "go"],
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert _readline(child) == "ready"
            time.sleep(rng.uniform(0.05, 0.8))
        finally:
            child.kill()
            child.wait()
        warnings: list[str] = []
        rules = [r.rule for r in ApprovalStore(_file(home), warn=warnings.append).load()]
        assert warnings == []
        assert rules[:1500] == [e.rule for e in base]
        for earlier in range(run + 1):
            mine = [r for r in rules if r.startswith(f"bash(echo run{earlier}-")]
            assert mine == [f"bash(echo run{earlier}-{i})" for i in range(len(mine))]  # whole rewrites only
    # Killed for sure between writing the temporary file and renaming it:
    child = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(_file(home)), "last", "hang"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert _readline(child) == "ready"
        assert _readline(child) == "renaming"
    finally:
        child.kill()
        child.wait()
    stale = [p for p in home.iterdir() if p.name.endswith(".tmp")]
    assert stale and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in stale)
    before = _file(home).read_bytes()
    store = ApprovalStore(_file(home))
    assert not any(r.rule.startswith("bash(echo last-") for r in store.load())  # the temporary file is ignored
    assert _file(home).read_bytes() == before
    (home / "approvals.toml.notes").write_text("mine")
    store.add("tree", project=None)
    assert not [p for p in home.iterdir() if p.name.endswith(".tmp")]  # cleaned up by the next update
    assert (home / "approvals.toml.notes").read_text() == "mine"
    assert store.load()[-1].rule == "tree"


def test_the_lock_file_is_separate_from_the_store_so_readers_never_wait(store: ApprovalStore, home: Path) -> None:
    store.add("tree", project=None)
    fd = os.open(home / "approvals.toml.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert [r.rule for r in _load_in_a_thread(ApprovalStore.for_home(home))] == ["tree"]
    finally:
        os.close(fd)
