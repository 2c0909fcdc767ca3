"""What makes and removes lanes: the `LaneBackend` interface that `LaneSupervisor` (`homes.py`)
drives, and the typed things that cross it.

A backend provisions a lane for a `LaneRequest` and hands back a `Lane`: its name and id on the
backend, and a `Connection` to its ToolService (a unix socket or TCP with TLS, see
`targets.py`). The supervisor then asks the backend only for the lane's `state`, its `logs`, to
`destroy` it, and which protected workspace paths changed; `reap` removes lanes whose broker died
(each provisioning does it too, and `osprey sandbox prune`). How a lane is run (an engine's API,
bind mounts, sockets, certificates) stays inside its backend: the local Docker engine's is
`lanes.LocalDockerBackend`.

This module is light (no engine SDK): `homes.py` imports it in every session.
"""

from __future__ import annotations

import abc
import concurrent.futures
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from ..config import SandboxSettings
from .client import Connection

if TYPE_CHECKING:
    from .workspace_sync import SyncReport

Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """A progress callback that shows nothing."""


def read_small_file(path: str | Path, limit: int, what: str, *, follow_symlinks: bool = True, missing: str = "") -> bytes:
    """The content of the file `path`, at most `limit` bytes; otherwise a SandboxError that says
    what is wrong with it (`what` names it: "the lane token file"; `missing` adds to the message
    when it does not exist)."""
    from ..errors import SandboxError
    from ..files import FileRefused, read_file

    try:
        raw = read_file(path, limit, follow_symlinks=follow_symlinks)
    except FileRefused as exc:
        why = "is not a regular file" if exc.reason == "not_regular" else \
            f"is over {limit:,} bytes, so it is not one" if exc.reason == "too_large" else f"cannot be read: {exc.strerror}"
        raise SandboxError(f"{what} {path} {why}") from None
    except OSError as exc:
        raise SandboxError(f"{what} {path} cannot be read: {exc.strerror}") from None
    if raw is None:
        raise SandboxError(f"{what} {path} cannot be read: no such file{missing}")
    return raw


# Backends a front end began choosing (and their lanes provisioning) before its session asked,
# by workspace and session (`homes.prepare_engine_lane`); the session's home takes its own over.
_begun_lock = threading.Lock()
_begun: dict[tuple[str, str], tuple[LaneRequest, concurrent.futures.Future[LaneBackend | None]]] = {}


def offer_backend(request: LaneRequest, backend: concurrent.futures.Future[LaneBackend | None]) -> bool:
    """Offer the backend being chosen for `request` (None once chosen: the session chooses);
    False when one is on offer for that workspace and session already."""
    with _begun_lock:
        return _begun.setdefault((request.workspace, request.session_id), (request, backend))[1] is backend


def take_backend(request: LaneRequest) -> tuple[LaneRequest, concurrent.futures.Future[LaneBackend | None]] | None:
    """The backend offered for the request's workspace and session, with the request it was
    begun for (other settings: the taker removes what was begun, and chooses afresh)."""
    with _begun_lock:
        return _begun.pop((request.workspace, request.session_id), None)


class LaneRequest(BaseModel):
    """What a lane is asked for: the workspace it serves, the session it belongs to, its settings."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # only with --sandbox

    workspace: str = Field(description="the workspace's real path; the lane's working directory and only root")
    session_id: str = Field(min_length=1)
    options: SandboxSettings
    home: Path | None = Field(None, description="Osprey's home directory, which a lane must not be able to write")


class LaneState(BaseModel):
    """A lane's state as its backend reports it."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # only with --sandbox

    running: bool
    paused: bool = False
    oom_killed: bool = Field(False, description="killed for using more memory than its limit")
    gone: bool = Field(False, description="the backend no longer knows the lane (removed by someone else)")
    exit_code: int | None = None


@dataclass(kw_only=True)
class Lane:
    """A lane a backend provisioned. Backends subclass it with what they need to find it again."""

    id: str  # the backend's id for it (a container's id)
    name: str
    workspace: str
    image: str
    connection: Connection  # the lane's ToolService; its home's client talks through it
    # What the backend recorded at the start about the paths kept from the lane, for `protected_changes`.
    protected: Mapping[str, str | None] = field(default_factory=dict)


class LaneBackend(abc.ABC):
    """Makes, watches and removes lanes somewhere (an engine, a cluster).

    Every method may be called from the event loop: a backend does its blocking work in threads.
    Its errors are the project's own (`SandboxError`) with a message that says what to do."""

    @abc.abstractmethod
    async def provision(self, request: LaneRequest, *, progress: Progress = quiet) -> Lane:
        """A new lane for `request` whose ToolService answers; everything made is removed again
        when this fails or is cancelled. Lanes whose owner died are reaped meanwhile."""

    @abc.abstractmethod
    async def state(self, lane: Lane) -> LaneState:
        """Whether the lane runs, and how it stopped if not (`gone` once it no longer exists)."""

    @abc.abstractmethod
    async def logs(self, lane: Lane, lines: int = 20) -> str:
        """The lane's last output lines ("" when there are none, or the lane is gone)."""

    @abc.abstractmethod
    async def destroy(self, lane: Lane) -> None:
        """Remove the lane with everything it runs, and close its connection; safe to call twice."""

    @abc.abstractmethod
    async def reap(self) -> list[str]:
        """Remove this backend's lanes whose owner (a broker) is gone; the names of those removed."""

    async def sync(self, lane: Lane) -> SyncReport | None:
        """Bring back to this machine what the lane changed in its workspace so far, for a backend
        whose lanes work on a copy of it; None where the lane works on the workspace itself."""
        return None

    @abc.abstractmethod
    def protected_changes(self, request: LaneRequest, before: Mapping[str, str | None]) -> list[str]:
        """Workspace paths kept from lanes (git's, Osprey's) that lanes created or replaced since
        `before` (the first lane's `protected`), for a warning when the session ends."""
