"""How grep runs ripgrep: its output pipe, waiting for its exit, and a run stopped at the count limit."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from grep_answers import grep
from test_search_engines import require_rg, write

from osprey_sidecar import search
from osprey_sidecar.paths import Roots


def test_the_output_pipe_is_grown_to_hold_a_counted_output() -> None:
    most = int(Path("/proc/sys/fs/pipe-max-size").read_text())
    read, write_end = os.pipe()
    try:
        size = search._grow_pipe(read)
        assert size == fcntl.fcntl(read, fcntl.F_GETPIPE_SZ)
        assert size == (search._PIPE_BYTES if most >= search._PIPE_BYTES else search._PIPE_CHUNK)
    finally:
        os.close(read)
        os.close(write_end)


def test_an_exit_after_the_output_ends_is_seen_at_once_and_a_stuck_one_meets_the_deadline() -> None:
    proc = subprocess.Popen(["sh", "-c", "exec >&- 2>&-; sleep 0.3; exit 3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        start = time.monotonic()
        assert search._wait_exit(proc, time.monotonic() + 10, None) == 3
        assert time.monotonic() - start < 0.3 + 0.25
    finally:
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    stuck = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = time.monotonic()
        with pytest.raises(search._Expired):
            search._wait_exit(stuck, time.monotonic() + 0.3, None)
        assert time.monotonic() - start < 0.3 + 0.25
        cancelled = threading.Event()
        cancelled.set()
        with pytest.raises(search._Cancelled):
            search._wait_exit(stuck, time.monotonic() + 10, cancelled)
    finally:
        stuck.kill()
        stuck.wait()


def test_a_search_stopped_at_the_count_limit_leaves_ripgrep_to_the_reaper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_rg()
    for d in range(3):  # more output than ripgrep's pipe holds: it cannot end before it is killed
        write(tmp_path, f"d{d}/big.txt", "hit\n" * 40_000)
    started: list[subprocess.Popen[bytes]] = []
    waited_in: list[str] = []
    real_init, real_wait = subprocess.Popen.__init__, subprocess.Popen.wait

    def init(self: subprocess.Popen[bytes], *args: object, **kwargs: object) -> None:
        real_init(self, *args, **kwargs)  # type: ignore[call-overload]
        started.append(self)

    def wait(self: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        if self in started:
            waited_in.append(threading.current_thread().name)
        return real_wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "__init__", init)
    monkeypatch.setattr(subprocess.Popen, "wait", wait)
    r = grep(Roots([str(tmp_path)]), "hit", engine="ripgrep")
    assert (r.engine, r.total, r.truncated, len(r.matches)) == ("ripgrep", search.COUNT_LIMIT, True, search.DEFAULT_MAX_MATCHES)
    assert len(started) == 1
    # The call answered without waiting for the killed ripgrep; the reaper's thread waits for it.
    assert threading.current_thread().name not in waited_in
    deadline = time.monotonic() + 10
    while started[0].returncode is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert started[0].returncode is not None and started[0].returncode < 0
    assert waited_in == ["osprey-search-reaper"]


def test_ripgrep_is_looked_up_on_path_again_only_when_gone_or_path_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "rg"
    fake.write_text("#!/bin/sh\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    looked: list[str] = []
    real_which = search.shutil.which

    def which(name: str) -> str | None:
        looked.append(name)
        return real_which(name)

    monkeypatch.setattr(search.shutil, "which", which)
    assert search._ripgrep() == search._ripgrep() == str(fake)
    assert looked == ["rg"]
    fake.unlink()
    assert search._ripgrep() is None
    monkeypatch.setenv("PATH", str(tmp_path))
    assert search._ripgrep() is None
    assert looked == ["rg"] * 3


def test_the_pipe_shrinks_to_what_the_count_still_needs() -> None:
    read, write_end = os.pipe()
    try:
        size = search._grow_pipe(read)
        assert search._shrink_pipe(read, size, None) == size
        assert search._shrink_pipe(read, size, size // 2) == size  # not worth it
        smaller = search._shrink_pipe(read, size, 100_000)
        assert smaller == fcntl.fcntl(read, fcntl.F_GETPIPE_SZ) and 100_000 <= smaller < size
        assert search._shrink_pipe(read, smaller, 10) == search._PIPE_LEAST
        os.write(write_end, b"x" * search._PIPE_LEAST)
        assert search._shrink_pipe(read, search._PIPE_LEAST, 10) == search._PIPE_LEAST  # no lower
    finally:
        os.close(read)
        os.close(write_end)
    out = search._RgOutput(5, 10_000, deadline=float("inf"))
    line = b"./a.txt\x001:0:the quick brown fox\n"
    assert out.needed() is None  # nothing to judge by yet
    out.walked = lambda rel: -1
    out.feed(line * 1_000)
    assert out.needed() == (10_000 - 1_000) * len(line)
