"""Recorded trust: the project files a user reviewed and trusts, in `$OSPREY_HOME/trust.toml`.

```toml
[projects."/abs/workspace/root"]
trusted_at = 2025-06-01T12:00:00Z
files = { ".osprey/config.toml" = "sha256:…", ".env" = "sha256:…" }

[pins."/abs/workspace/root"]   # extension trust pins: executable artifacts (custom tools, hooks)
".osprey/tools/word_count.toml" = "sha256:…"
[pins."user"]                  # agent-authored artifacts in $OSPREY_HOME
"tools/word_count.toml" = "sha256:…"
```

A file is trusted while its bytes hash to the recorded digest; an edit makes it untrusted again. A
trust file that cannot be read or parsed trusts nothing, and says so; it never stops a run.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from . import tomlfile
from .errors import ConfigError
from .files import MAX_FILE_BYTES, read_bounded
from .tomlfile import dumps_toml, write_atomic

TRUST_FILE = "trust.toml"
Digest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
Status = Literal["trusted", "changed", "untrusted"]
PinStatus = Literal["trusted", "modified", "untrusted"]
USER_SCOPE = "user"  # the pins of agent-authored artifacts in $OSPREY_HOME


def digest(data: bytes) -> str:
    """`sha256:<hex>` of some bytes, the form trust.toml records."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


class _Strict(BaseModel):
    # Built at first use: a run reads trust.toml only when it has something to trust.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class ProjectTrust(_Strict):
    """One trusted project: the digests of its files as they were when trusted."""

    trusted_at: datetime
    files: dict[str, Digest] = Field(description="path relative to the project root -> digest")


class TrustFile(_Strict):
    """The whole of trust.toml."""

    projects: dict[str, ProjectTrust] = Field(default_factory=dict, description="keyed by the project's absolute path")
    pins: dict[str, dict[str, Digest]] = Field(
        default_factory=dict, description="extension trust pins: scope (a workspace root, or 'user') -> artifact path -> digest")


@dataclass
class TrustStore:
    """trust.toml as read; with a `problem`, nothing is trusted."""

    path: Path
    data: TrustFile
    problem: str | None = None

    def status(self, root: Path | str, relpath: str, file_digest: str) -> Status:
        """Whether the project file `relpath` of `root`, with these bytes, is trusted."""
        if self.problem:
            return "untrusted"
        record = self.data.projects.get(str(root))
        if record is None or relpath not in record.files:
            return "untrusted"
        return "trusted" if hmac.compare_digest(record.files[relpath], file_digest) else "changed"


    def pin_status(self, scope: str, key: str, pin_digest: str) -> PinStatus:
        """Whether the executable artifact `key` of `scope`, hashing to `pin_digest`, is pinned:
        trusted, modified (pinned with other bytes), or untrusted. A broken trust file pins nothing."""
        if self.problem:
            return "untrusted"
        pinned = self.data.pins.get(scope, {}).get(key)
        if pinned is None:
            return "untrusted"
        return "trusted" if hmac.compare_digest(pinned, pin_digest) else "modified"


def pin_artifact(home: Path, scope: str, key: str, pin_digest: str) -> Path:
    """Record the trust pin of one executable artifact (replacing an older pin of it)."""
    with _locked(home):
        store = _usable(home)
        store.data.pins.setdefault(scope, {})[key] = pin_digest
        _save(store)
    return store.path


def file_state(store: TrustStore, root: str, relpath: str) -> str:
    """How a trusted project file stands now: unchanged, changed since trusted, missing or unreadable."""
    try:
        raw = read_bounded(Path(root) / relpath, "a project file")
    except ConfigError:
        return "unreadable"
    if raw is None:
        return "missing"
    return "unchanged" if store.status(root, relpath, digest(raw)) == "trusted" else "changed since trusted"


def trust_path(home: Path) -> Path:
    return home / TRUST_FILE


def load_trust(home: Path) -> TrustStore:
    """Read trust.toml (missing: nothing trusted yet). Never raises for what the file holds."""
    path = trust_path(home)

    def broken(why: str) -> TrustStore:
        return TrustStore(path, TrustFile(), f"{why}; nothing is trusted until it is fixed or removed")

    try:
        raw = read_bounded(path, "the trust file")
    except ConfigError as exc:
        return broken(str(exc))
    if raw is None:
        return TrustStore(path, TrustFile())
    import tomli  # only with a trust file to read

    try:
        data = tomlfile.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomli.TOMLDecodeError) as exc:
        return broken(f"{path}: not valid TOML ({exc})")
    try:
        return TrustStore(path, TrustFile.model_validate(data))
    except ValidationError as exc:
        where = ", ".join(".".join(str(p) for p in e["loc"]) or "(top level)" for e in exc.errors()[:3])
        return broken(f"{path}: not a trust file Osprey understands (at {where})")


def _usable(home: Path) -> TrustStore:
    store = load_trust(home)
    if store.problem:
        raise ConfigError(f"{store.problem}. Osprey does not rewrite it: fix it, or move it away and trust again")
    return store


@contextmanager
def _locked(home: Path) -> Iterator[None]:
    """Serialise read-modify-write of trust.toml between processes."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(home / (TRUST_FILE + ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def trust_project(home: Path, root: Path, files: Mapping[str, str], now: datetime | None = None) -> Path:
    """Record `files` (relative path -> digest) of the project at `root` as trusted; files trusted
    before and not named here stay trusted. Returns the trust file's path."""
    with _locked(home):
        store = _usable(home)
        record = store.data.projects.get(str(root))
        merged = {**(record.files if record else {}), **files}
        store.data.projects[str(root)] = ProjectTrust(trusted_at=now or datetime.now(UTC), files=merged)
        _save(store)
    return store.path


def revoke_project(home: Path, root: Path | str) -> bool:
    """Forget the trust of the project at `root`; False when it was not trusted."""
    with _locked(home):
        store = _usable(home)
        if store.data.projects.pop(str(root), None) is None:
            return False
        _save(store)
    return True


def _save(store: TrustStore) -> None:
    text = "# Projects whose files you trust (`osprey trust`). Edit with care: a bad file trusts nothing.\n"
    try:
        text += dumps_toml(store.data.model_dump(mode="python"))
    except ValueError as exc:
        raise ConfigError(f"cannot record this in the trust file: {exc}") from None
    if len(text.encode("utf-8")) > MAX_FILE_BYTES:
        raise ConfigError(f"{store.path} would grow past {MAX_FILE_BYTES // (1024 * 1024)} MiB; "
                          "revoke projects you no longer use (`osprey trust --list`, `osprey trust --revoke DIR`)")
    write_atomic(store.path, text)
