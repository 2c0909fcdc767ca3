"""Where the ToolService runs for a session, chosen in one place (`open_tool_service`).

- the local dispatcher: the sidecar's servicer in this process, on a private unix socket;
- a sandbox lane: the sidecar in a Docker container provisioned for the session (`lanes.py`);
- an attached lane: a sidecar someone else started (compose, a test fixture), by socket path.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import DispatcherError, SandboxError
from .owners import owner_gone, owner_record
from .toolclient import ToolClient

if TYPE_CHECKING:
    from .config import SandboxSettings

READY_DEADLINE_S = 10.0
HEALTH_PROBE_S = 2.0
STOP_GRACE_S = 2.0
DISPATCHER_DIR_PREFIX = "osprey-tools-"
OWNER_FILE = "owner"


@dataclass
class ToolService:
    """A reachable ToolService: its client, the home serving it, and how to recover it."""

    client: ToolClient
    home: str  # "local" or "lane"
    roots: list[str]
    # For a lane: replaces a dead lane with a fresh one and says what happened.
    recover: Callable[[], Awaitable[str | None]] | None = field(default=None, repr=False)


class LocalDispatcher:
    """The sidecar's servicer in a child process of the broker, on a private unix socket
    (0600 in a 0700 dir). A runaway call can be killed with the child, never stalling the broker."""

    def __init__(self, roots: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self.roots = [os.path.realpath(r) for r in roots]
        self.env = dict(env) if env is not None else None
        self.dir: str | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.client: ToolClient | None = None
        self.service: ToolService | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> ToolService:
        """Start the dispatcher; the ToolService it serves (kept up to date by `recover`)."""
        client = await self._start()
        if self.service is None:
            self.service = ToolService(client=client, home="local", roots=self.roots, recover=self.recover)
        self.service.client = client
        return self.service

    async def _start(self) -> ToolClient:
        from .config import tool_environment

        reap_stale_dispatcher_dirs()
        self.dir = tempfile.mkdtemp(prefix=DISPATCHER_DIR_PREFIX)  # mkdtemp makes it 0700
        socket_path = os.path.join(self.dir, "tools.sock")
        token_path = os.path.join(self.dir, "token")
        token = secrets.token_hex(32)
        try:
            Path(self.dir, OWNER_FILE).write_text(owner_record() + "\n")
            fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(token + "\n")
        except OSError as exc:
            await self.close()
            raise DispatcherError(f"the local dispatcher's private directory could not be set up: {exc}") from None
        env = self.env if self.env is not None else tool_environment()
        log = open(os.path.join(self.dir, "dispatcher.log"), "wb")
        try:
            # -I: the interpreter must not import modules from the (untrusted) working directory.
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-m", "osprey_sidecar", "--socket", socket_path, "--token-file", token_path,
                "--parent-pid", str(os.getpid()), *[arg for root in self.roots for arg in ("--root", root)],
                cwd=self.dir, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True,  # a terminal's Ctrl-C reaches the broker, which tears this down in order
            )
        except OSError as exc:
            await self.close()
            raise DispatcherError(f"the local dispatcher could not be started ({sys.executable}): {exc.strerror or exc}") from None
        finally:
            log.close()
        self.client = ToolClient.for_socket(socket_path, token=token)
        try:
            await self._wait_ready(socket_path)
        except BaseException:
            await self.close()
            raise
        os.unlink(token_path)  # the child has read it; the broker keeps it in memory
        return self.client

    async def _wait_ready(self, socket_path: str) -> None:
        assert self.client is not None and self.proc is not None
        client, proc = self.client, self.proc

        async def ready_when_listening() -> None:
            # A connection attempt before the socket exists would put the channel into gRPC's
            # reconnect backoff (a second or more), so wait for the socket first.
            end = time.monotonic() + READY_DEADLINE_S
            while not os.path.exists(socket_path) and proc.returncode is None and time.monotonic() < end:
                await asyncio.sleep(0.005)
            await client.wait_ready(max(end - time.monotonic(), 0.1))

        ready = asyncio.ensure_future(ready_when_listening())
        exited = asyncio.ensure_future(self.proc.wait())
        try:
            await asyncio.wait({ready, exited}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
            if not ready.done():
                ready.cancel()
        if ready.done() and ready.exception() is None:  # a failure's own exception: the log says more
            return
        raise DispatcherError(f"the local dispatcher did not start serving on {socket_path}; its last output:\n{self.log_tail() or '(none)'}")

    def log_tail(self, lines: int = 20) -> str:
        if self.dir is None:
            return ""
        try:
            with open(os.path.join(self.dir, "dispatcher.log"), "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(fh.tell() - 8192, 0))
                text = fh.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    async def recover(self) -> str | None:
        """If the dispatcher no longer answers, replace it and say so; else None."""
        async with self._lock:
            if self.client is not None and self.proc is not None and self.proc.returncode is None and await self.client.healthy(timeout=HEALTH_PROBE_S):
                return None
            why = "the local dispatcher stopped answering" if self.proc is not None and self.proc.returncode is None else "the local dispatcher exited"
            await self.close()
            await self.start()
        return f"{why}; it was stopped (with every command it was running) and a new one started, so the call can be retried"

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None
        if self.proc is not None:
            proc, self.proc = self.proc, None
            await _stop_process(proc)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


async def _stop_process(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM (the dispatcher then kills its commands' process groups), SIGKILL after a grace."""
    if proc.returncode is None:
        try:
            proc.terminate()
        except ProcessLookupError:
            pass
        try:
            await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
        except asyncio.TimeoutError:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
            await proc.wait()


def reap_stale_dispatcher_dirs() -> list[str]:
    """Remove socket dirs of local dispatchers whose broker is gone (killed without teardown)."""
    from .config import read_no_follow

    removed = []
    base = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(base) if n.startswith(DISPATCHER_DIR_PREFIX)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        # Commands on the host can write here: never read through a link or block on a FIFO.
        record = read_no_follow(os.path.join(path, OWNER_FILE), 200)
        if record is None or not owner_gone(record.decode("ascii", "replace")):
            continue  # not ours, still being set up, or its owner lives
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


class LaneSupervisor:
    """Owns the session's lane: provisions it, replaces it when it dies, always removes it."""

    def __init__(self, workspace: str, session_id: str, options: "SandboxSettings", progress: Callable[[str], None], home: Path | None) -> None:
        self.workspace = workspace
        self.session_id = session_id
        self.options = options
        self.progress = progress
        self.home = home
        self.lane = None
        self.generation = 0
        self.service: ToolService | None = None
        self.protected_at_start: dict[str, str | None] = {}
        self._lock = asyncio.Lock()

    async def start(self) -> ToolService:
        from .lanes import provision_lane

        self.lane = await provision_lane(self.workspace, self.session_id, self.options, progress=self.progress, home=self.home)
        self.protected_at_start = self.lane.protected  # a replacement lane must not hide a change
        self.service = ToolService(client=self.lane.client, home="lane", roots=[self.lane.workspace], recover=self.recover)
        return self.service

    async def recover(self) -> str | None:
        """If the lane has stopped, start a new one and describe what happened; else None."""
        from .lanes import destroy_lane, lane_state, provision_lane

        if self.service is None:
            return None
        async with self._lock:  # one replacement at a time, however many calls failed
            if self.lane is not None:
                state = await lane_state(self.lane)
                if state.get("Running") and not state.get("Paused") and await self.lane.client.healthy(timeout=HEALTH_PROBE_S):
                    return None
                if state.get("Running"):
                    why = "the sandbox lane stopped answering (a runaway command, or its process limit was reached)"
                elif state.get("OOMKilled"):
                    why = f"the sandbox lane ran out of memory ({self.options.memory_limit}) and was killed"
                elif state.get("Gone"):
                    why = "the sandbox lane's container disappeared"
                else:
                    why = f"the sandbox lane stopped (exit code {state.get('ExitCode')})"
                lane, self.lane = self.lane, None
                await destroy_lane(lane)
            else:
                why = "there was no sandbox lane (starting one failed before)"
            self.generation += 1
            self.lane = await provision_lane(self.workspace, f"{self.session_id}-{self.generation}", self.options, progress=self.progress, home=self.home)
            self.service.client = self.lane.client
        return f"{why}; it was removed and a new lane started with the same workspace, so the call can be retried (files written before are kept, processes and /tmp are not)"

    async def close(self) -> None:
        from .lanes import changed_paths, destroy_lane

        if self.lane is not None:
            lane, self.lane = self.lane, None
            await destroy_lane(lane)
            for path in changed_paths(self.workspace, self.options, self.protected_at_start):
                self.progress(f"warning: the sandbox lane created or replaced {path}; git (or Osprey) run there would use what the lane wrote: look at it before you do, or remove it")


async def _attach(options: "SandboxSettings", roots: list[str]) -> ToolService:
    assert options.socket is not None
    if not os.path.exists(options.socket):
        raise SandboxError(f"there is no lane socket at {options.socket}; start the lane first (or check the path)")
    token = None
    if options.token_file:
        try:
            token = Path(options.token_file).read_text().strip()
        except OSError as exc:
            raise SandboxError(f"the lane token file {options.token_file} cannot be read: {exc.strerror}") from None
    client = ToolClient.for_socket(options.socket, token=token)
    try:
        await client.wait_ready(options.ready_timeout)
    except DispatcherError:
        await client.close()
        raise SandboxError(f"no lane answers on {options.socket} within {options.ready_timeout:g} s (is the lane running, and is the token right?)") from None
    return ToolService(client=client, home="lane", roots=roots)


@asynccontextmanager
async def open_tool_service(
    roots: Sequence[str],
    *,
    sandbox: "SandboxSettings | None" = None,
    session_id: str = "session",
    progress: Callable[[str], None] = lambda _: None,
    home: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[ToolService]:
    """The ToolService for a session; torn down (container, socket and all) when the block exits.

    `env` is the environment of commands run on the host (default: this one without credentials)."""
    real_roots = [os.path.realpath(r) for r in roots]
    if sandbox is not None and sandbox.enabled and sandbox.socket:
        service = await _attach(sandbox, real_roots)
        try:
            yield service
        finally:
            await service.client.close()
    elif sandbox is not None and sandbox.enabled:
        supervisor = LaneSupervisor(real_roots[0], session_id, sandbox, progress, home)
        try:
            yield await supervisor.start()
        finally:
            await supervisor.close()
    else:
        dispatcher = LocalDispatcher(real_roots, env)
        try:
            yield await dispatcher.start()
        finally:
            await dispatcher.close()
