"""Where the ToolService runs for a session: three homes behind one interface.

- `LocalDispatcher` ("local"): the sidecar's servicer in a child process of the broker, on a
  private unix socket;
- `LaneSupervisor` ("lane"): the sidecar in a lane provisioned for the session by a
  `LaneBackend` (`backend.py`; the local Docker engine's is `lanes.LocalDockerBackend`), replaced
  when it dies; the supervisor speaks to the backend through that interface only;
- `AttachedLane` ("attached"): a sidecar someone else started (compose, a test fixture), on a
  unix socket or on TCP with TLS (`targets.py`).

Which one a session gets is typed configuration (`home_config.py`): `home_config` builds it from
the sandbox settings and `build_home` opens the home it describes; `make_home` does both.

Each home has one `client` for its whole life. Recovery lives in the home's `recover`, and the
client calls it by itself after a call finds the service unreachable or stuck (see
`client.py`); after a replacement the same client talks to the new service.

The rest of the package: `client.py` (ToolClient, Connection), `targets.py` (where a service
listens), `wire.py` (results as pydantic views of the proto messages), `images.py` (lane images).
"""

from __future__ import annotations

import abc
import asyncio
import os
import secrets
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Self

from osprey_sidecar.wire import PROGRAM_KILL_GRACE_S

from ..errors import DispatcherError, SandboxError
from ..owners import owner_gone, owner_record
from .client import Connection, ToolClient, accepts_connections
from .home_config import AttachedHomeConfig, HomeConfig, LaneHomeConfig, LocalHomeConfig, home_config
from .targets import ServiceTarget, TlsTarget, UnixTarget

if TYPE_CHECKING:
    from ..config import SandboxSettings
    from .backend import Lane, LaneBackend, LaneRequest  # lanes only: a session with the local dispatcher never loads them
    from .engines import EngineTarget
    from .remote_lanes import RemoteDockerBackend
    from .workspace_sync import SyncLimits, SyncReport

READY_DEADLINE_S = 10.0
# Where the local dispatcher's directory cannot be watched, its socket is checked after 1 ms, then
# at doubling intervals up to 16 ms; where it can, at each change there and at least every 50 ms.
READY_POLL_FIRST_S = 0.001
READY_POLL_MAX_S = 0.016
READY_WATCHED_POLL_S = 0.05
HEALTH_PROBE_S = 2.0
# A held start (`start_when_quiet`) makes the local dispatcher's process once the broker has been on
# the CPU for less than QUIET_SHARE of the time for QUIET_FOR_S in a row (checked every
# QUIET_PROBE_S), or after QUIET_CAP_S at the latest.
QUIET_PROBE_S = 0.005
QUIET_FOR_S = 0.010
QUIET_SHARE = 0.25
QUIET_CAP_S = 1.0
# Set by a front end for the sessions it runs (`osprey agent` sets it in its own task's context):
# a local dispatcher's background start (`begin`) then makes the process only once the broker is
# quiet, waiting for the model, a person or the service itself (`until_quiet`), not at once. A run
# that calls no tool mostly never makes one, and in one that does, the dispatcher's start overlaps
# the model's answer instead of competing with the broker's own start-up for the CPU. A direct
# `start` (and a replacement) makes the process at once.
start_when_quiet: ContextVar[bool] = ContextVar("start_when_quiet", default=False)
# The dispatcher's SIGTERM kills its programs' groups, SIGKILL following the programs' own grace:
# it needs that long, and a little more, before it is killed itself.
STOP_GRACE_S = 2.0 + PROGRAM_KILL_GRACE_S
DISPATCHER_DIR_PREFIX = "osprey-tools-"
OWNER_FILE = "owner"
TOKEN_FILE = "token"  # read by the child at its start, then removed

HomeKind = Literal["local", "lane", "attached"]


# A lane token file larger than this holds no token.
TOKEN_FILE_MAX_BYTES = 4096


class ToolServiceHome(abc.ABC):
    """Where a session's ToolService runs: start it, call it through `client`, `recover` it when
    it died or got stuck, `close` it (with everything it runs)."""

    kind: HomeKind

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = [os.path.realpath(r) for r in roots]
        self._client = ToolClient(recover=self.recover)
        self._lock = asyncio.Lock()  # one recovery at a time, however many calls failed
        self._starting: asyncio.Future[None] | None = None
        self.closed = False

    @property
    def client(self) -> ToolClient:
        """The one client of this home, valid across recoveries until `close`."""
        return self._client

    @abc.abstractmethod
    async def start(self) -> None:
        """Start (or reach) the service and wait until it answers."""

    @abc.abstractmethod
    async def recover(self) -> str | None:
        """Probe the service; replace it when dead or stuck and say what happened (for the
        model), or None when it answers and nothing was done."""

    async def begin(self) -> asyncio.Future[None]:
        """Set the service up now, let it come up in the background, and return that background
        part: the client's calls made meanwhile wait for it, and fail with its error if it
        fails. Start-up (a lane's, or the local dispatcher's) then overlaps whatever the session
        does first, such as the first model request. What can fail at once (the local
        dispatcher's directory, and its process unless the start is held: `start_when_quiet`) raises
        here. Once only; `close` cancels a start still going on."""
        if self._starting is None:
            await self._set_up()
            self._starting = asyncio.ensure_future(self._come_up())
            self._starting.add_done_callback(_retrieve)
            self._client.wait_for(self._starting)
            await asyncio.sleep(0)  # the start's first step runs now (a lane hands its engine work to a thread), not after the caller's next one
        return self._starting

    async def sync(self) -> SyncReport | None:
        """Sync the workspace with a lane's copy of it on another machine (`/sync`): what the
        lane changed comes back, then what changed here goes there; None for a home whose
        tools work on the workspace itself."""
        return None

    async def _set_up(self) -> None:  # noqa: B027 - most homes have nothing to do at once
        """The part of `start` that `begin` does before it returns (none by default)."""

    async def _come_up(self) -> None:
        """The part of `start` that `begin` leaves running (all of it by default)."""
        await self.start()

    @property
    def starting(self) -> asyncio.Future[None] | None:
        """The background start (`begin`), if there was one."""
        return self._starting

    async def close(self) -> None:
        """Stop the service and everything it runs; safe to call twice, after a failed start, and
        while a background start is still going on (it is cancelled first)."""
        self.closed = True
        starting = self._starting
        if starting is not None and not starting.done():
            starting.cancel()
            await asyncio.wait({starting})
        # Their streams end first: the service kills each program's process group then.
        await self._client.close_programs()
        await self._close()

    @abc.abstractmethod
    async def _close(self) -> None:
        """What `close` does once no start is going on."""

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class LocalDispatcher(ToolServiceHome):
    """The sidecar's servicer in a child process of the broker, on a private unix socket
    (0600 in a 0700 dir). A runaway call can be killed with the child, never stalling the broker."""

    kind: HomeKind = "local"

    def __init__(self, roots: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        super().__init__(roots)
        self.env = dict(env) if env is not None else None
        self.dir: str | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.connection: Connection | None = None
        self._pending: tuple[str, str] | None = None  # socket and token of a process not yet serving
        self._held = False  # the process is made by the background start, once the broker is quiet

    async def start(self) -> None:
        await self._set_up()
        await self._come_up()

    async def begin(self) -> asyncio.Future[None]:
        if self._starting is None and start_when_quiet.get():
            self._held = True
        return await super().begin()

    async def _set_up(self) -> None:
        """Its private directory and token, and its process unless a held start makes that later
        (fails at once when they cannot be made)."""
        reap_stale_dispatcher_dirs()
        self.dir = tempfile.mkdtemp(prefix=DISPATCHER_DIR_PREFIX)  # mkdtemp makes it 0700
        socket_path = os.path.join(self.dir, "tools.sock")
        token_path = os.path.join(self.dir, TOKEN_FILE)
        token = secrets.token_hex(32)
        try:
            Path(self.dir, OWNER_FILE).write_text(owner_record() + "\n")
            fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(token + "\n")
        except OSError as exc:
            await self._stop()
            raise DispatcherError(f"the local dispatcher's private directory could not be set up: {exc}") from None
        self._pending = (socket_path, token)
        if not self._held:
            await self._spawn()

    async def _spawn(self) -> None:
        """The dispatcher's process, serving on the socket `_set_up` chose."""
        from ..config import tool_environment

        assert self.dir is not None and self._pending is not None
        socket_path = self._pending[0]
        token_path = os.path.join(self.dir, TOKEN_FILE)
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
            await self._stop()
            raise DispatcherError(f"the local dispatcher could not be started ({sys.executable}): {exc.strerror or exc}") from None
        finally:
            log.close()

    async def _come_up(self) -> None:
        """Make the process if a held start has not yet (once the broker is quiet), wait until it
        listens on its socket, then point the client at it."""
        if self._held:
            self._held = False
            await until_quiet()
            await self._spawn()
        assert self.proc is not None and self._pending is not None
        (socket_path, token), self._pending = self._pending, None
        try:
            await self._wait_listening(self.proc, socket_path)
        except BaseException:
            await self._stop()
            raise
        os.unlink(os.path.join(os.path.dirname(socket_path), TOKEN_FILE))  # the child has read it; the broker keeps it in memory
        self.connection = Connection(socket_path, token=token)
        self._client.use(self.connection)

    async def _wait_listening(self, proc: asyncio.subprocess.Process, socket_path: str) -> None:
        """Return once the socket accepts connections (the child reads its token and registers its
        services before it listens); raise DispatcherError with the child's last output when it
        exits first or does not listen within READY_DEADLINE_S.

        A plain connect on the socket, not gRPC: gRPC and protobuf then load at the first tool call
        (`Connection`), never on the event loop while the first model request is in flight.
        The socket is checked when something changes in its directory (it is made there, and the
        child's log line saying it serves is written there), not in a busy loop."""
        end = time.monotonic() + READY_DEADLINE_S
        delay = READY_POLL_FIRST_S
        exited = asyncio.ensure_future(proc.wait())
        watch = DirectoryWatch.open(os.path.dirname(socket_path))
        try:
            while not accepts_connections(socket_path):
                remaining = end - time.monotonic()
                if proc.returncode is not None or remaining <= 0:
                    raise DispatcherError(f"the local dispatcher did not start serving on {socket_path}; its last output:\n{self.log_tail() or '(none)'}")
                if watch is not None:
                    changed = asyncio.ensure_future(watch.changed.wait())
                    await asyncio.wait({changed, exited}, timeout=min(READY_WATCHED_POLL_S, remaining), return_when=asyncio.FIRST_COMPLETED)
                    changed.cancel()
                    watch.changed.clear()
                else:
                    await asyncio.wait({exited}, timeout=min(delay, remaining))
                    delay = min(delay * 2, READY_POLL_MAX_S)
        finally:
            exited.cancel()
            if watch is not None:
                watch.close()

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
            if self.closed:
                return None
            alive = self.proc is not None and self.proc.returncode is None
            if alive and self.connection is not None and await self.connection.healthy(timeout=HEALTH_PROBE_S):
                return None
            if alive and self.proc is not None:
                # A process that just died may not be reaped yet: give its exit a moment to show.
                try:
                    await asyncio.wait_for(self.proc.wait(), 0.2)
                except TimeoutError:
                    pass
                alive = self.proc.returncode is None
            if self.proc is None:
                why = "there was no local dispatcher (starting one failed before)"
            elif alive:
                why = "the local dispatcher stopped answering; it was stopped (with every command it was running)"
            else:
                why = "the local dispatcher exited"
            await self._stop()
            await self.start()
        return f"{why}, and a new one started, so the call can be retried"

    async def _stop(self) -> None:
        self._client.use(None)
        # A dispatcher no call ever reached (no gRPC channel was made to it; its socket is private
        # to this process) runs no command: it is killed outright and reaped at once, instead of
        # being waited for while it stops its server in order.
        served = self.connection is not None and self.connection.channel_made
        if self.connection is not None:
            connection, self.connection = self.connection, None
            await connection.close()
        if self.proc is not None:
            proc, self.proc = self.proc, None
            if served:
                await _stop_process(proc)
            else:
                await _kill_process(proc)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    async def _close(self) -> None:
        await self._stop()


class DirectoryWatch:
    """Sets `changed` when an entry is made or written in a directory (inotify, read by the event
    loop). `open` gives None where that is not available (not Linux, no inotify left)."""

    _IN_MODIFY, _IN_CREATE, _IN_MOVED_TO = 0x2, 0x100, 0x80
    _IN_NONBLOCK, _IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.changed = asyncio.Event()
        asyncio.get_running_loop().add_reader(fd, self._read)

    @classmethod
    def open(cls, directory: str) -> DirectoryWatch | None:
        if not sys.platform.startswith("linux"):
            return None
        import ctypes  # loaded already by the broker's process privacy set-up

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(cls._IN_NONBLOCK | cls._IN_CLOEXEC)
        except (OSError, AttributeError):
            return None
        if fd < 0:
            return None
        if libc.inotify_add_watch(fd, os.fsencode(directory), cls._IN_CREATE | cls._IN_MODIFY | cls._IN_MOVED_TO) < 0:
            os.close(fd)
            return None
        return cls(fd)

    def _read(self) -> None:
        try:
            while os.read(self.fd, 4096):  # the events themselves do not matter, only that there were some
                pass
        except BlockingIOError:
            pass
        except OSError:
            asyncio.get_running_loop().remove_reader(self.fd)  # the waiter goes on with its timed checks
        self.changed.set()

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.fd)
        os.close(self.fd)


async def _stop_process(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM (the dispatcher then kills its commands' process groups), SIGKILL after a grace."""
    if proc.returncode is None:
        try:
            proc.terminate()
        except ProcessLookupError:
            pass
        try:
            await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
        except TimeoutError:
            try:
                proc.kill()
            except ProcessLookupError:
                pass
            await proc.wait()


async def _kill_process(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL and reap a dispatcher that has started no command."""
    if proc.returncode is None:
        try:
            proc.kill()
        except ProcessLookupError:
            pass
    await proc.wait()


async def until_quiet(*, probe: float = QUIET_PROBE_S, quiet_for: float = QUIET_FOR_S, share: float = QUIET_SHARE,
                      cap: float = QUIET_CAP_S) -> None:
    """Return once this process has been mostly idle (on the CPU, all its threads together, for
    less than `share` of the time) for `quiet_for` in a row, measured every `probe`; or after `cap`.
    Its own CPU time is what counts: a broker waiting for the network is quiet on a loaded machine
    too, and one whose work runs in a worker thread is not."""
    loop = asyncio.get_running_loop()
    end = loop.time() + cap
    quiet = 0.0
    while quiet < quiet_for and loop.time() < end:
        wall, cpu = loop.time(), time.process_time()
        await asyncio.sleep(probe)
        wall, cpu = loop.time() - wall, time.process_time() - cpu
        quiet = quiet + wall if cpu < wall * share else 0.0


def _retrieve(start: asyncio.Future[None]) -> None:
    """A background start's failure is reported through the calls that wait for it (and to the
    session watching it), never as "exception was never retrieved"."""
    if not start.cancelled():
        start.exception()


def reap_stale_dispatcher_dirs() -> list[str]:
    """Remove socket dirs of local dispatchers whose broker is gone (killed without teardown)."""
    from ..files import read_no_follow

    removed: list[str] = []
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


class LaneSupervisor(ToolServiceHome):
    """Owns the session's lane: provisions it, replaces it when it dies, always removes it, all
    through its `LaneBackend` (by default the local Docker engine's)."""

    kind: HomeKind = "lane"

    def __init__(self, workspace: str, session_id: str, options: SandboxSettings, progress: Callable[[str], None] = lambda _: None, home: Path | None = None,
                 *, backend: LaneBackend | None = None) -> None:
        from .backend import LaneRequest

        super().__init__([workspace])
        self.workspace = self.roots[0]
        self.session_id = session_id
        self.options = options
        self.progress = progress
        self.home = home
        self.request = LaneRequest(workspace=self.workspace, session_id=session_id, options=options, home=home)
        self._backend = backend
        self.lane: Lane | None = None
        self.generation = 0
        self.protected_at_start: Mapping[str, str | None] = {}

    @property
    def backend(self) -> LaneBackend:
        """The backend that makes this home's lanes (the local Docker engine's unless one was given)."""
        if self._backend is None:
            self._backend = local_docker_backend()
        return self._backend

    async def start(self) -> None:
        if self._backend is None:
            from .backend import take_backend

            chosen = None
            offered = take_backend(self.request)
            if offered is not None:
                from .remote_lanes import RemoteDockerBackend  # the only backend a front end begins with

                begun_for, choosing = offered
                chosen = await asyncio.wrap_future(choosing)
                if isinstance(chosen, RemoteDockerBackend):
                    if begun_for != self.request:
                        await chosen.discard_begun(begun_for)  # begun with other settings: removed, and chosen afresh
                        chosen = None
                    else:
                        chosen.progress = self.progress  # it was begun before this home had a place to say things
            self._backend = chosen or await docker_backend(self.options, self.progress)
        self.lane = await self.backend.provision(self.request, progress=self.progress)
        self.protected_at_start = self.lane.protected  # a replacement lane must not hide a change
        self._client.use(self.lane.connection)

    async def sync(self) -> SyncReport | None:
        async with self._lock:
            if self.lane is None or self._backend is None:
                return None
            return await self._backend.sync(self.lane)

    async def recover(self) -> str | None:
        """If the lane has stopped, start a new one and describe what happened; else None."""
        backend = self.backend
        async with self._lock:
            if self.closed:
                return None
            if self.lane is not None:
                state = await backend.state(self.lane)
                if state.running and not state.paused and await self.lane.connection.healthy(timeout=HEALTH_PROBE_S):
                    return None
                if state.running:
                    why = "the sandbox lane stopped answering (a runaway command, or its process limit was reached)"
                elif state.oom_killed:
                    why = f"the sandbox lane ran out of memory ({self.options.memory_limit}) and was killed"
                elif state.gone:
                    why = "the sandbox lane's container disappeared"
                else:
                    why = f"the sandbox lane stopped (exit code {state.exit_code})"
                    logs = await backend.logs(self.lane)
                    if logs:
                        self.progress(f"{why}; its last log lines:\n{logs}")
                self._client.use(None)
                lane, self.lane = self.lane, None
                await backend.destroy(lane)
            else:
                why = "there was no sandbox lane (starting one failed before)"
            self.generation += 1
            replacement = self.request.model_copy(update={"session_id": f"{self.session_id}-{self.generation}"})
            self.lane = await backend.provision(replacement, progress=self.progress)
            self._client.use(self.lane.connection)
        return f"{why}; it was removed and a new lane started with the same workspace, so the call can be retried (files written before are kept, processes and /tmp are not)"

    async def _close(self) -> None:
        self._client.use(None)
        if self.lane is not None:
            lane, self.lane = self.lane, None
            await self.backend.destroy(lane)
            for path in self.backend.protected_changes(self.request, self.protected_at_start):
                self.progress(f"warning: the sandbox lane created or replaced {path}; git (or Osprey) run there would use what the lane wrote: look at it before you do, or remove it")


async def docker_backend(options: SandboxSettings, progress: Callable[[str], None] = lambda _: None) -> LaneBackend:
    """The backend of lanes on the engine the settings and environment name (`engines`): this
    machine's engine by its socket at once; an engine over TCP or SSH is asked whether it is this
    machine's (then its lanes bind-mount the workspace) or another's (they get a copy of it)."""
    from .engines import resolve_engine

    target = resolve_engine(options.engine, os.environ)
    if target.scheme == "unix" and options.engine is None:
        return local_docker_backend()
    return await asyncio.to_thread(engine_backend, target, options, progress)


def engine_backend(target: EngineTarget, options: SandboxSettings, progress: Callable[[str], None] = lambda _: None) -> LaneBackend:
    """The backend of lanes on the engine at `target`, once it said whether it is this machine's
    (blocking: it connects and asks)."""
    from .engines import connect, identify

    client = connect(target)
    engine = identify(client, target)
    if engine.local:
        from .lanes import LocalDockerBackend

        progress(f"lanes run on {engine.described}")
        return LocalDockerBackend(client)
    from ..config import size_bytes
    from .remote_lanes import RemoteDockerBackend
    from .workspace_sync import SyncLimits

    limits = SyncLimits(max_files=options.sync_max_files, max_bytes=size_bytes(options.sync_max_bytes))
    return RemoteDockerBackend(target, client=client, engine=engine, limits=limits, progress=progress)


def prepare_engine_lane(request: LaneRequest, target: EngineTarget) -> None:
    """Begin now, in a thread, what a lane on the engine at `target` (not this machine's default
    socket) needs before the session asks for it: the connection and the question whether the
    engine is this machine's, and on another machine's engine the lane itself (`RemoteDockerBackend
    .begin`). The session's `LaneSupervisor` for the same request takes both over."""
    import concurrent.futures
    import threading

    from .backend import offer_backend

    chosen: concurrent.futures.Future[LaneBackend | None] = concurrent.futures.Future()
    if not offer_backend(request, chosen):
        return

    def run() -> None:
        from .remote_lanes import RemoteDockerBackend

        try:
            backend = engine_backend(target, request.options)
        except BaseException as exc:  # noqa: BLE001 - the session's start raises it
            chosen.set_exception(exc)
            return
        if not isinstance(backend, RemoteDockerBackend):
            chosen.set_result(None)  # this machine's engine over TCP: the session's start makes its lane
            return
        start = backend.begin(request)
        chosen.set_result(backend)
        start()

    threading.Thread(target=run, name="osprey-lane-prepare-remote", daemon=True).start()


def local_docker_backend() -> LaneBackend:
    """The backend of lanes on this machine's Docker engine (imports the docker side only now)."""
    from .lanes import LocalDockerBackend

    return LocalDockerBackend()


class AttachedLane(ToolServiceHome):
    """A lane someone else started and owns (compose, a test fixture), reached at its target (a
    unix socket, or TCP with TLS), or on another machine's engine as a lane file describes it
    (`remote_lanes.LaneAttachment`): then the workspace is synced with the lane's copy when the
    session starts, on `sync` and when it ends. Osprey cannot replace such a lane: `recover` only
    probes it and says so."""

    kind: HomeKind = "attached"

    def __init__(self, roots: Sequence[str], target: ServiceTarget | str | None = None, *, token_file: str | None = None,
                 lane_file: str | None = None, ready_timeout: float = 30.0, progress: Callable[[str], None] = lambda _: None,
                 limits: SyncLimits | None = None) -> None:
        super().__init__(roots)
        if (target is None) == (lane_file is None):
            raise ValueError("an attached lane is named by its target or by a lane file, one of the two")
        self.target: UnixTarget | TlsTarget | None = UnixTarget(path=target) if isinstance(target, str) else target
        self.where = self.target.where if self.target is not None else str(lane_file)
        self.token_file = token_file
        self.lane_file = lane_file
        self.ready_timeout = ready_timeout
        self.progress = progress
        self.limits = limits
        self.connection: Connection | None = None
        self._remote: tuple[RemoteDockerBackend, Path] | None = None  # the backend and record a lane file's workspace syncs by

    async def start(self) -> None:
        if self.lane_file is not None:
            token: str | None = await asyncio.to_thread(self._attach_remote, self.lane_file)
        else:
            token = self._read_token()
        assert self.target is not None
        if isinstance(self.target, UnixTarget) and not os.path.exists(self.target.path):
            raise SandboxError(f"there is no lane socket at {self.target.path}; start the lane first (or check the path)")
        self.connection = Connection(self.target, token=token)
        try:
            await self.connection.wait_ready(self.ready_timeout)
        except DispatcherError:
            if self.connection.refused is not None:
                raise SandboxError(self.connection.refused) from None
            checks = "is the lane running, and is the token right?" if isinstance(self.target, UnixTarget) else \
                "is the lane running, is the token right, and does it need a client certificate?"
            raise SandboxError(f"no lane answers on {self.where} within {self.ready_timeout:g} s ({checks})") from None
        if self._remote is not None:
            report = await self._sync(push=True)
            if report.changed:
                from .remote_lanes import describe

                self.progress(describe(report))
        self._client.use(self.connection)

    def _read_token(self) -> str | None:
        if not self.token_file:
            return None
        from .backend import read_small_file

        return read_small_file(self.token_file, TOKEN_FILE_MAX_BYTES, "the lane token file").decode("utf-8", "replace").strip()

    def _attach_remote(self, lane_file: str) -> str:
        """Read the lane file, check that its lane holds this workspace on the engine it names, and
        keep what syncing needs; the lane's token."""
        from .remote_lanes import open_attachment

        attachment, record, backend = open_attachment(lane_file, self.roots[0], limits=self.limits, progress=self.progress)
        self.target = attachment.target()
        self.where = f"{self.target.where} ({record.lane} on {record.engine.host})"
        self._remote = (backend, Path(attachment.record))
        return attachment.token.get_secret_value()

    async def _sync(self, *, push: bool) -> SyncReport:
        assert self._remote is not None
        backend, record_path = self._remote
        _, report = await asyncio.to_thread(backend.sync_record, record_path, push=push)
        return report

    async def sync(self) -> SyncReport | None:
        if self._remote is None:
            return None
        async with self._lock:
            return await self._sync(push=True)

    async def recover(self) -> str | None:
        if self.closed or (self.connection is not None and await self.connection.healthy(timeout=HEALTH_PROBE_S)):
            return None
        return (f"the lane at {self.where} does not answer, and Osprey cannot restart a lane it did not start; "
                "whoever started it (compose, a test fixture) must restart it before the call can be retried")

    async def _close(self) -> None:
        self._client.use(None)
        if self.connection is not None:
            connection, self.connection = self.connection, None
            await connection.close()
        if self._remote is not None:
            from .remote_lanes import describe

            try:
                report = await self._sync(push=False)
            except SandboxError as exc:
                self.progress(f"the lane's changes could not be brought back ({exc}); whoever started the lane brings them back when it ends")
            else:
                self.progress(describe(report))


def build_home(config: HomeConfig, *, progress: Callable[[str], None] = lambda _: None, backend: LaneBackend | None = None) -> ToolServiceHome:
    """The home `config` describes, not yet started. `progress` shows a lane's start-up and
    warnings; `backend` makes a lane home's lanes (default: the local Docker engine)."""
    if isinstance(config, AttachedHomeConfig):
        limits = None
        if config.lane_file is not None:
            from .workspace_sync import SyncLimits

            limits = SyncLimits(max_files=config.sync_max_files, max_bytes=config.sync_max_bytes)
        return AttachedLane(config.roots, config.target, token_file=config.token_file, lane_file=config.lane_file,
                            ready_timeout=config.ready_timeout, progress=progress, limits=limits)
    if isinstance(config, LaneHomeConfig):
        return LaneSupervisor(config.workspace, config.session_id, config.sandbox, progress, config.home, backend=backend)
    assert isinstance(config, LocalHomeConfig)
    return LocalDispatcher(config.roots, config.env)


def make_home(
    roots: Sequence[str],
    *,
    sandbox: SandboxSettings | None = None,
    session_id: str = "session",
    progress: Callable[[str], None] = lambda _: None,
    home: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> ToolServiceHome:
    """The home a session's settings ask for, not yet started (`home_config`, then `build_home`):
    an attached lane when a socket is given, a new lane with the sandbox on, else the local
    dispatcher.

    `env` is the environment of commands run on the host (default: this one without credentials);
    `home` is Osprey's home directory (a lane refuses a workspace that holds it)."""
    return build_home(home_config(roots, sandbox=sandbox, session_id=session_id, home=home, env=env), progress=progress)


@asynccontextmanager
async def open_tool_service(
    roots: Sequence[str],
    *,
    sandbox: SandboxSettings | None = None,
    session_id: str = "session",
    progress: Callable[[str], None] = lambda _: None,
    home: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[ToolServiceHome]:
    """The started home for a session (see `make_home`); closed (container, socket and all)
    when the block exits."""
    service_home = make_home(roots, sandbox=sandbox, session_id=session_id, progress=progress, home=home, env=env)
    async with service_home:
        yield service_home
