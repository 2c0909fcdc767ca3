"""The host-only `process` tool: start, list, read output of and stop background processes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from osprey.errors import ToolError
from osprey.tools.process import ProcessManager


async def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


async def test_start_output_since_last_read_and_exit(workspace: Path) -> None:
    manager = ProcessManager([str(workspace)])
    try:
        p = await manager.start("echo one; sleep 0.3; echo two")
        await wait_for(lambda: p.total >= 4)
        first, lost = manager.output(p.id)
        assert first == "one\n" and lost == 0
        await wait_for(lambda: p.proc.returncode is not None and p.reader is not None and p.reader.done())
        second, _ = manager.output(p.id)
        assert second == "two\n"
        assert manager.output(p.id) == ("", 0)
        assert manager.output(p.id, since_last_read=False)[0] == "one\ntwo\n"
        assert p.status == "exited with code 0"
    finally:
        await manager.close()


async def test_stop_kills_the_whole_group(workspace: Path) -> None:
    manager = ProcessManager([str(workspace)])
    pidfile = workspace / "child.pid"
    p = await manager.start(f"sleep 60 & echo $! > {pidfile}; wait")
    await wait_for(pidfile.exists)
    await wait_for(lambda: pidfile.read_text().strip() != "")
    child = int(pidfile.read_text())
    await manager.stop(p.id)
    assert p.proc.returncode is not None
    await wait_for(lambda: not _alive(child), timeout=5)
    await manager.close()


async def test_close_stops_everything(workspace: Path) -> None:
    manager = ProcessManager([str(workspace)])
    procs = [await manager.start("sleep 60") for _ in range(3)]
    await manager.close()
    assert all(p.proc.returncode is not None for p in procs)


async def test_workdir_must_stay_inside_the_roots(workspace: Path, tmp_path: Path) -> None:
    manager = ProcessManager([str(workspace)])
    with pytest.raises(ToolError) as err:
        await manager.start("true", workdir=str(tmp_path))
    assert err.value.category == "outside_root"
    (workspace / "sub").mkdir()
    p = await manager.start("pwd", workdir="sub")
    await p.proc.wait()
    await wait_for(lambda: p.reader is not None and p.reader.done())
    assert manager.output(p.id)[0].strip() == str((workspace / "sub").resolve())
    await manager.close()


async def test_unknown_id_and_empty_command(workspace: Path) -> None:
    manager = ProcessManager([str(workspace)])
    with pytest.raises(ToolError, match="no process with id 'p9'"):
        manager.output("p9")
    with pytest.raises(ToolError, match="command is empty"):
        await manager.start("  ")


async def test_output_buffer_keeps_the_tail_and_counts_the_loss(workspace: Path) -> None:
    manager = ProcessManager([str(workspace)])
    p = await manager.start("head -c 3000000 /dev/zero | tr '\\0' 'x'; echo END")
    await p.proc.wait()
    await wait_for(lambda: p.reader is not None and p.reader.done())
    text, lost = manager.output(p.id)
    assert text.endswith("END\n") and len(text) == 1024 * 1024
    assert lost == 3000004 - 1024 * 1024
    await manager.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie awaiting its parent counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
