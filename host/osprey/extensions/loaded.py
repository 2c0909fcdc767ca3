"""What each running session loaded from its extension layers, so `osprey extensions` (run outside
the session) can say which artifacts changed since then: `pending_reload`.

A session writes `$OSPREY_HOME/loaded-extensions/<session id>.json` each time it loads its layers
(at its start and at each reload) and removes it when it closes: its working directory, who owns
it (`owners.owner_record`), and each artifact's kind, path, digest and status as it loaded them.
The report compares what discovery finds now with the records of the sessions still running in
the same working directory. An artifact is `pending_reload` when it would be active now and at
least one of those sessions loaded it otherwise: with another digest (its bytes, or for a tool or
hooks file the trust-pin digest, changed), in another status (say inactive until it was trusted),
or not at all (created since). It becomes `active` again once each of them reloads (`/reload`,
or by itself at the next turn boundary after an `extension_manage` change) or closes. A
`config.toml` is read once when a session starts, never at a reload, so it is not compared.
"""

from __future__ import annotations

import json
import os
import re
import time
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..owners import owner_gone, owner_record
from .report import Artifact, Report

if TYPE_CHECKING:
    from .discovery import Extensions

DIRECTORY = "loaded-extensions"
MAX_RECORD_BYTES = 1024 * 1024
MAX_RECORDS = 200  # read per report; more running sessions than this are not compared
MAX_ENTRIES = 2000
SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
NOT_RELOADED = frozenset({"config", "workflow"})  # kinds a reload does not read again (workflows are read at each run)


class LoadedArtifact(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use: most sessions never make one

    kind: str = Field(max_length=40)
    path: str = Field(max_length=4096)
    digest: str | None = Field(None, max_length=100)
    status: str = Field(max_length=40)


class LoadedRecord(BaseModel):
    """One running session's view of its layers, as it last loaded them."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    session_id: str = Field(pattern=SESSION_ID.pattern)
    owner: str = Field(max_length=300, description="owners.owner_record of the session's process")
    cwd: str = Field(max_length=4096)
    loaded_at: float
    artifacts: list[LoadedArtifact] = Field(default_factory=list, max_length=MAX_ENTRIES)


def record_path(home: Path, session_id: str) -> Path:
    return Path(home) / DIRECTORY / f"{session_id}.json"


def record_loaded(home: Path, session_id: str, cwd: Path, found: Extensions) -> None:
    """Write what the session `session_id` just loaded. Raises OSError (the caller carries on: a
    home that cannot be written only leaves `osprey extensions` unable to say what is pending)."""
    if not SESSION_ID.fullmatch(session_id):
        return
    record = LoadedRecord(
        session_id=session_id, owner=owner_record(), cwd=str(cwd), loaded_at=time.time(),
        artifacts=[LoadedArtifact(kind=a.kind, path=a.path, digest=a.digest, status=a.status)
                   for a in found.artifacts[:MAX_ENTRIES] if a.kind not in NOT_RELOADED],
    )
    directory = Path(home) / DIRECTORY
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Replaced whole (a reader never sees half a record), without fsync: a record only matters
    # while its session runs, and one a crash leaves behind names a process that is gone.
    path = directory / f"{session_id}.json"
    staged = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(record.model_dump_json().encode("utf-8"))
        os.replace(staged, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(staged)
        raise


def forget_loaded(home: Path, session_id: str) -> None:
    """Remove the record of a session that closes."""
    if SESSION_ID.fullmatch(session_id):
        with suppress(OSError):
            os.unlink(record_path(home, session_id))


def running_loads(home: Path, cwd: Path) -> list[LoadedRecord]:
    """The records of the sessions still running in `cwd`; a record whose process is gone is removed."""
    directory = Path(home) / DIRECTORY
    try:
        with os.scandir(directory) as entries:
            names = sorted(entry.name for entry in entries if entry.name.endswith(".json") and entry.is_file(follow_symlinks=False))
    except OSError:
        return []
    records: list[LoadedRecord] = []
    for name in names[:MAX_RECORDS]:
        path = directory / name
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_RECORD_BYTES + 1)
            if len(data) > MAX_RECORD_BYTES:
                continue
            record = LoadedRecord.model_validate(json.loads(data.decode("utf-8")))
        except (OSError, UnicodeDecodeError, ValueError, ValidationError):
            continue
        if owner_gone(record.owner):
            with suppress(OSError):
                os.unlink(path)
            continue
        if record.cwd == str(cwd):
            records.append(record)
    return records


def mark_pending(report: Report, records: list[LoadedRecord]) -> None:
    """Mark the report's artifacts that would be active now but that a running session loaded
    otherwise (another digest or status, or not at all) `pending_reload`."""
    report.running_sessions = [record.session_id for record in records]
    for artifact in report.artifacts:
        if artifact.status != "active" or artifact.kind in NOT_RELOADED:
            continue
        behind = [record.session_id for record in records if _differs(artifact, record)]
        if behind:
            artifact.status = "pending_reload"
            artifact.reason = (f"changed since the running session{'s' if len(behind) > 1 else ''} {', '.join(behind[:5])} "
                               "loaded it: it takes effect there at the next turn boundary after a reload "
                               "(/reload), and in new sessions")


def _differs(artifact: Artifact, record: LoadedRecord) -> bool:
    loaded = next((item for item in record.artifacts if item.kind == artifact.kind and item.path == artifact.path), None)
    return loaded is None or loaded.digest != artifact.digest or loaded.status != "active"
