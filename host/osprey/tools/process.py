"""`process`: background processes on the host (plain host runs only, never in a lane)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..config import tool_environment
from ..errors import ToolError
from .base import Invocation, Tool, ToolContext

if TYPE_CHECKING:
    from osprey_sidecar.paths import Roots

    from .inputs import ProcessInput

BUFFER_BYTES = 1024 * 1024
MAX_PROCESSES = 16
STOP_GRACE_S = 2.0


@dataclass
class ManagedProcess:
    id: str
    command: str
    workdir: str
    proc: asyncio.subprocess.Process
    started: float = field(default_factory=time.time)
    buffer: bytearray = field(default_factory=bytearray)
    total: int = 0
    read_upto: int = 0  # absolute byte offset already returned by `output`
    reader: asyncio.Task[None] | None = None

    @property
    def status(self) -> str:
        rc = self.proc.returncode
        if rc is None:
            return "running"
        return f"exited with code {rc}" if rc >= 0 else f"killed by signal {-rc}"


class ProcessManager:
    """The session's background processes; all are stopped when the session ends."""

    def __init__(self, roots: list[str], env: Mapping[str, str] | None = None) -> None:
        """`env` is what the commands see (default: `tool_environment()` when each starts)."""
        if not roots:
            raise ValueError("at least one allowed root is required")
        # Resolved now; the path rules (the sidecar's) load with the first process a session starts.
        self._real_roots = [os.path.realpath(r) for r in roots]
        self._roots: Roots | None = None
        self.env = dict(env) if env is not None else None
        self.procs: dict[str, ManagedProcess] = {}
        self._next = 1

    @property
    def roots(self) -> Roots:
        if self._roots is None:
            from osprey_sidecar.paths import Roots

            self._roots = Roots(self._real_roots)
        return self._roots

    async def start(self, command: str, workdir: str = "") -> ManagedProcess:
        from osprey_sidecar.errors import ToolFailure

        if not command.strip():
            raise ToolError("invalid_argument", "command is empty")
        if sum(1 for p in self.procs.values() if p.proc.returncode is None) >= MAX_PROCESSES:
            raise ToolError("invalid_argument", f"{MAX_PROCESSES} processes are already running; stop one first")
        try:
            cwd = self.roots.resolve(workdir)
        except ToolFailure as exc:
            raise ToolError(exc.category, exc.message) from None
        if not os.path.isdir(cwd):
            raise ToolError("not_a_directory", f"workdir {workdir} is not a directory")
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", command, cwd=cwd, env=self.env if self.env is not None else tool_environment(), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
        )
        pid = f"p{self._next}"
        self._next += 1
        managed = ManagedProcess(pid, command, cwd, proc)
        managed.reader = asyncio.create_task(self._read(managed))
        self.procs[pid] = managed
        return managed

    async def _read(self, p: ManagedProcess) -> None:
        assert p.proc.stdout is not None
        while chunk := await p.proc.stdout.read(65536):
            p.buffer += chunk
            p.total += len(chunk)
            if len(p.buffer) > BUFFER_BYTES:
                del p.buffer[: len(p.buffer) - BUFFER_BYTES]
        await p.proc.wait()

    def get(self, pid: str) -> ManagedProcess:
        if pid not in self.procs:
            known = ", ".join(self.procs) or "none"
            raise ToolError("not_found", f"no process with id {pid!r} (known: {known})")
        return self.procs[pid]

    def output(self, pid: str, since_last_read: bool = True) -> tuple[str, int]:
        """Output (new since the last read, or all that is kept) and bytes lost to the buffer limit."""
        p = self.get(pid)
        kept_from = p.total - len(p.buffer)
        start = max(p.read_upto if since_last_read else 0, kept_from)
        lost = start - (p.read_upto if since_last_read else 0)
        data = bytes(p.buffer[start - kept_from :])
        p.read_upto = p.total
        return data.decode("utf-8", "replace"), max(lost, 0)

    async def stop(self, pid: str) -> ManagedProcess:
        p = self.get(pid)
        if p.proc.returncode is None:
            _signal_group(p.proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(p.proc.wait(), STOP_GRACE_S)
            except TimeoutError:
                _signal_group(p.proc.pid, signal.SIGKILL)
                await p.proc.wait()
        _signal_group(p.proc.pid, signal.SIGKILL)  # whatever the command left in its group
        if p.reader is not None:
            try:
                await asyncio.wait_for(p.reader, 1.0)
            except TimeoutError:
                p.reader.cancel()
        return p

    async def close(self) -> None:
        for pid in list(self.procs):
            await self.stop(pid)

    def kill_all(self) -> None:
        """Kill every process group at once, without waiting (for an exit that cannot wait)."""
        for p in self.procs.values():
            _signal_group(p.proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def _process(call: Invocation, ctx: ToolContext) -> str:
    a: ProcessInput = call.input
    manager: ProcessManager = ctx.processes
    if a.action == "start":
        p = await manager.start(a.command, a.workdir)
        return f"Started {p.id} (pid {p.proc.pid}): {p.command}\nRead its output with action=output, id={p.id}."
    if a.action == "list":
        if not manager.procs:
            return "No background processes."
        return "\n".join(f"{p.id}  {p.status}  {p.total} bytes of output  {p.command}" for p in manager.procs.values())
    if not a.id:
        raise ToolError("invalid_argument", f"action {a.action} needs an id; use action=list to see them")
    if a.action == "output":
        text, lost = manager.output(a.id, a.since_last_read)
        p = manager.get(a.id)
        head = f"[{p.id} {p.status}]"
        if lost:
            head += f" [{lost} older bytes were dropped from the buffer]"
        return f"{head}\n{text}" if text else f"{head} (no new output)"
    p = await manager.stop(a.id)
    return f"Stopped {p.id}: {p.status}."


def process_tool() -> Tool:
    return Tool.stored(
        "process",
        "Manage background processes on the host (servers, watchers, long builds): start, list, output, stop.",
        "osprey.tools.inputs.ProcessInput",
        _process,
    )
