"""Which home a session's ToolService runs in, as typed configuration.

`HomeConfig` is one of three (a pydantic union on `kind`): `LocalHomeConfig` (the local
dispatcher), `LaneHomeConfig` (a lane Osprey provisions) and `AttachedHomeConfig` (a lane someone
else runs, on a unix socket or on TCP with TLS). `home_config` builds it from the sandbox
settings, in this one place; `homes.build_home` opens the home a config describes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..config import SandboxSettings
from ..errors import ConfigError, SandboxError
from .targets import ServiceTarget, UnixTarget


class _HomeConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built at first use: a session makes one kind


class LocalHomeConfig(_HomeConfig):
    """The local dispatcher: the servicer in a child process of the broker."""

    kind: Literal["local"] = "local"
    roots: list[str] = Field(min_length=1, description="allowed roots; the first is the working directory")
    env: dict[str, str] | None = Field(None, repr=False, description="host commands' environment (default: the broker's, without credentials)")


class LaneHomeConfig(_HomeConfig):
    """A lane provisioned for the session (and replaced when it dies)."""

    kind: Literal["lane"] = "lane"
    workspace: str = Field(description="the workspace's real path, the lane's only root")
    session_id: str = Field(min_length=1)
    sandbox: SandboxSettings
    home: Path | None = Field(None, description="Osprey's home directory, which a lane must not be able to write")


class AttachedHomeConfig(_HomeConfig):
    """A lane someone else started and owns, reached at `target`, or on another machine's engine
    as its `lane_file` describes it (`remote_lanes.LaneAttachment`)."""

    kind: Literal["attached"] = "attached"
    roots: list[str] = Field(min_length=1)
    target: ServiceTarget | None = None
    token_file: str | None = Field(None, description="the file holding the lane's token")
    lane_file: str | None = Field(None, description="the file describing a lane on another machine's engine")
    ready_timeout: float = Field(30.0, gt=0, le=600)
    sync_max_files: int = Field(100_000, ge=1, description="with a lane file: what a sync copies, at most")
    sync_max_bytes: int = Field(2 * 1024**3, ge=1)

    @model_validator(mode="after")
    def _one_lane(self) -> AttachedHomeConfig:
        if (self.target is None) == (self.lane_file is None):
            raise ValueError("an attached lane is named by its socket or by a lane file, one of the two")
        return self


HomeConfig = Annotated[LocalHomeConfig | LaneHomeConfig | AttachedHomeConfig, Field(discriminator="kind")]


def home_config(
    roots: Sequence[str],
    *,
    sandbox: SandboxSettings | None = None,
    session_id: str = "session",
    home: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> HomeConfig:
    """The home a session's settings ask for: an attached lane when a socket is given, a new lane
    with the sandbox on, else the local dispatcher.

    `env` is the environment of commands run on the host (default: this one without credentials);
    `home` is Osprey's home directory (a lane refuses a workspace that holds it)."""
    if sandbox is not None and sandbox.enabled and sandbox.lane_file:
        if sandbox.socket:
            raise ConfigError("--sandbox-socket and --sandbox-lane name two lanes: give one of them")
        from ..config import size_bytes

        return AttachedHomeConfig(roots=list(roots), lane_file=sandbox.lane_file, ready_timeout=sandbox.ready_timeout,
                                  sync_max_files=sandbox.sync_max_files, sync_max_bytes=size_bytes(sandbox.sync_max_bytes))
    if sandbox is not None and sandbox.enabled and sandbox.socket:
        return AttachedHomeConfig(roots=list(roots), target=UnixTarget(path=sandbox.socket), token_file=sandbox.token_file, ready_timeout=sandbox.ready_timeout)
    if sandbox is not None and sandbox.enabled:
        return LaneHomeConfig(workspace=os.path.realpath(roots[0]), session_id=session_id, sandbox=sandbox, home=home)
    return LocalHomeConfig(roots=list(roots), env=dict(env) if env is not None else None)


def prepare_home(config: HomeConfig) -> None:
    """Begin now what the home `config` describes can do before its session is built: a front
    end calls this as soon as its settings are known, so that a lane's container is made and
    started (in a thread, `lanes.prepare_lane`) behind the session's own set-up, and the
    session's lane, asked for with the same configuration, takes it over. Nothing for the other
    homes, which start fast enough when the session asks."""
    if isinstance(config, LaneHomeConfig):
        from .backend import LaneRequest
        from .engines import resolve_engine

        request = LaneRequest(workspace=config.workspace, session_id=config.session_id, options=config.sandbox, home=config.home)
        try:
            target = resolve_engine(config.sandbox.engine, os.environ)
        except SandboxError:
            return  # the session's start says what is wrong
        if target.scheme == "unix" and config.sandbox.engine is None:
            from .lanes import prepare_lane

            prepare_lane(request)
        else:
            from .homes import prepare_engine_lane

            prepare_engine_lane(request, target)
