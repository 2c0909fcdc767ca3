"""A broker killed between removing its lane and its socket dir (two quick Ctrl-Cs) leaves a sealed
`lane-*` dir no container names any more: the next start's reap removes it, and nothing else."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import require_docker

from osprey.toolservice import lanes
from osprey.toolservice.lanes import LocalDockerBackend, make_socket_dir, runtime_dir, sweep_socket_dirs

NOBODY = 65534


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _sealed(base: Path, name: str) -> Path:
    """A socket dir as a lane leaves it: a socket inside, mode 0555, owned by nobody under root."""
    d = base / name
    d.mkdir()
    (d / "tools.sock").write_text("")
    os.chmod(d, 0o555)
    if os.geteuid() == 0:
        os.chown(d, NOBODY, NOBODY)
    return d


@pytest.fixture
def base(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    short = tempfile.mkdtemp(prefix="sw")  # a socket path must stay short
    monkeypatch.setenv("XDG_RUNTIME_DIR", short)
    try:
        yield runtime_dir()
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", short], check=False)
        shutil.rmtree(short, ignore_errors=True)


def test_a_dead_owners_socket_dir_is_swept_and_nothing_else(base: Path, tmp_path: Path) -> None:
    dead = _sealed(base, f"lane-{_dead_pid()}-abcd1234")
    live = _sealed(base, f"lane-{os.getpid()}-abcd1234")
    older = _sealed(base, "lane-abcd1234")  # a name without an owner is never guessed at
    target = tmp_path / "kept"
    target.mkdir()
    link = base / f"lane-{_dead_pid()}-link1234"
    link.symlink_to(target)
    assert sweep_socket_dirs() == [dead]
    assert not dead.exists() and live.is_dir() and older.is_dir() and target.is_dir() and link.is_symlink()


def test_socket_dirs_carry_their_owners_pid(base: Path, workspace: Path) -> None:
    socket_dir, _ = make_socket_dir(str(workspace))
    assert socket_dir.parent == base and lanes._SOCKET_DIR_NAME.fullmatch(socket_dir.name)
    assert socket_dir.name.startswith(f"lane-{os.getpid()}-")
    assert sweep_socket_dirs() == [] and socket_dir.is_dir()


async def test_the_next_start_reaps_it(base: Path) -> None:
    require_docker()
    dead = _sealed(base, f"lane-{_dead_pid()}-abcd1234")
    await LocalDockerBackend().reap()
    assert not dead.exists()
