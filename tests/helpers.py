"""Helpers shared by test modules (imported as `helpers`; fixtures live in conftest.py)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from osprey.errors import ToolError
from osprey.toolservice.client import ToolClient

REPO = Path(__file__).resolve().parent.parent


def require_docker() -> None:
    """Skip without a Docker engine, except under CI, where its absence is a failure."""
    from osprey.errors import SandboxError
    from osprey.toolservice.images import docker_client

    try:
        docker_client().close()
    except SandboxError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs a Docker engine for the lane tests: {exc}")
        pytest.skip(f"no Docker engine: {exc}")


# --- ToolService calls --------------------------------------------------------------------------

# Generous bounds: a loaded 2-core machine must never make these flaky.
CALL_BOUND_S = 30.0
GONE_WITHIN_S = 5.0


async def fails(call: Awaitable[Any], category: str) -> ToolError:
    """Await a tool call that must fail with `category`."""
    with pytest.raises(ToolError) as info:
        await asyncio.wait_for(call, CALL_BOUND_S)
    assert info.value.category == category, f"{info.value.category}: {info.value}"
    assert str(info.value), "an error must say what was wrong"
    return info.value


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def host_process_state(pid: int) -> str:
    """The state letter of a process on this machine; "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


async def wait_host_gone(pid: int, within: float = GONE_WITHIN_S) -> None:
    """Wait until a process on this machine is gone (a zombie is dead, only not yet reaped)."""
    deadline = time.monotonic() + within
    while host_process_state(pid) not in ("", "Z", "X"):
        if time.monotonic() > deadline:
            pytest.fail(f"process {pid} is still running (state {host_process_state(pid)})")
        await asyncio.sleep(0.05)


async def process_state(tools: ToolClient, pid: int) -> str:
    """The process's state letter as the home sees it; "" once it is gone."""
    r = await tools.bash(
        f"{{ while IFS=$': \\t' read -r key value rest; do [ \"$key\" = State ] && echo \"$value\"; done < /proc/{pid}/status; }} 2>/dev/null; true"
    )
    return r.output.strip()


async def wait_gone(tools: ToolClient, pid: int, within: float = GONE_WITHIN_S) -> None:
    deadline = time.monotonic() + within
    while True:
        state = await process_state(tools, pid)
        if state in ("", "Z", "X"):  # a zombie is dead, only not yet reaped
            return
        if time.monotonic() > deadline:
            pytest.fail(f"process {pid} is still running (state {state}) {within} s later")
        await asyncio.sleep(0.1)


def executable(directory: Path, name: str, body: str) -> Path:
    """An executable script `name` in `directory`, from `body` dedented (its first line a `#!`)."""
    import textwrap

    path = directory / name
    path.write_text(textwrap.dedent(body).lstrip())
    path.chmod(0o755)
    return path


def read_pid(path: Path) -> int:
    text = path.read_text()
    assert text.endswith("\n"), f"{path.name} is incomplete"
    return int(text)


async def wait_for_file(path: Path, within: float = CALL_BOUND_S) -> None:
    """Until `path` exists and ends with a newline (a pid file written by a command)."""
    deadline = time.monotonic() + within
    while not (path.exists() and path.read_text().endswith("\n")):
        if time.monotonic() > deadline:
            pytest.fail(f"{path.name} did not appear within {within} s")
        await asyncio.sleep(0.02)


def dispatcher_pids() -> list[int]:
    """This process's local dispatcher children."""
    me = str(os.getpid())
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[1]
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if ppid == me and b"osprey_sidecar" in cmdline:
            out.append(int(entry.name))
    return out
