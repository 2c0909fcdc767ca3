"""Sandbox lanes on a Docker engine on another machine: `RemoteDockerBackend`.

Such an engine cannot bind-mount this machine's workspace, nor a socket directory, so a lane
there is made of:

- a volume holding the workspace, filled from a tar of it (`workspace_sync.pack`) and mounted at
  the workspace's own path; protected directories (`.git`, `.osprey`, ...) each in a volume of
  their own, mounted read-only over it;
- a volume holding the sidecar's TLS certificate and key, its client CA and its token, which the
  sidecar reads at start and then removes (`--forget-secrets`);
- the lane container, with no network (as on this machine; with `network` on, the default
  bridge), locked down as a local lane is (no capabilities, read-only root, limits), its sidecar
  serving TLS on a unix socket in a directory of the gateway's sockets volume that only this lane
  mounts;
- a gateway container, one for this machine's lanes on the engine (`gateway_name`, per lane
  image), on the default bridge with `LANE_PORT` published and the sockets volume at `/lanes`:
  it routes each TLS connection to the lane its server name names (`osprey_sidecar.forward`) and
  holds no key, since TLS runs end to end between the broker and the sidecar. It stays between
  lanes (a lane start is then one container start); `osprey sandbox prune` removes it once no
  lane uses it.

The broker reaches the sidecar at the engine's host and the published port, pins the lane's
own CA (`lane_tls`) and presents its client certificate and the lane's token. Everything made
carries `osprey.lane` with the owner's machine (`osprey.owner_host`), pid and boot id: a broker
reaps only its own machine's dead lanes, and a broker on another machine sharing the engine is
never judged. The lane image is copied from this machine's engine (streamed save and load), once:
images are tagged by their content.

When the lane goes (the session ends, or it is replaced) its workspace comes back
(`workspace_sync.bring_back`): what the lane changed is applied where this side still has what
was sent, and both-sides changes are written beside the file. What was sent is recorded under
`$OSPREY_HOME/lanes/`, so that a broker that died leaves the volume and its record, and
`osprey sandbox recover` brings the changes back later.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import io
import json
import os
import re
import secrets
import ssl
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretBytes, SecretStr

from ..config import SandboxSettings, size_bytes
from ..errors import SandboxError
from ..owners import boot_id, host_id, owner_record, pid_namespace
from .backend import Lane, LaneBackend, LaneRequest, LaneState, Progress, quiet, read_small_file
from .client import Connection
from .engines import Engine, EngineTarget, connect, identify
from .lane_tls import SERVER_NAME_SUFFIX, make_lane_pki
from .lanes import LABEL
from .targets import PEM_MAX_BYTES, TlsTarget
from .workspace_sync import Manifest, SyncLimits, SyncReport, bring_back, escaping_symlinks, pack, pack_changes

REMOTE_LABEL = "osprey.remote"
GATEWAY_LABEL = "osprey.gateway"
VIA_LABEL = "osprey.via"  # on a lane: the gateway it is reached through
OWNER_LABEL = "osprey.uid"  # on a lane: the uid:gid it runs as
WAIT_FOR_WORKSPACE_S = 24 * 3600  # the sidecar waits this long for its workspace at most (the broker gives up sooner)
SOCKETS_IN_GATEWAY = "/lanes"
SOCKETS_IN_LOADER = "/osprey-sockets"
SOCKET_DIR_IN_LANE = "/run/osprey-sock"
SOCKET_NAME = "tools.sock"
LANE_PORT = 7443
SECRETS_IN_LANE = "/run/osprey-lane"
READY_FILE = "ready"  # the last entry of the archive that fills a lane's volumes
LOG_LINES = 20
READY_POLL_S = 0.01
RECORDS_DIR = "lanes"
RECORD_MAX_BYTES = 64 * 1024 * 1024
ATTACHMENT_MAX_BYTES = 4 * PEM_MAX_BYTES
_SIDECAR = "import sys; sys.path.insert(0, '/opt/osprey/lib'); from osprey_sidecar.{module} import main; sys.exit(main())"
_GATEWAY_MEMORY = 64 * 1024 * 1024


class LaneRecord(BaseModel):
    """What a broker keeps of a remote lane's workspace volume, to bring its changes back."""

    model_config = ConfigDict(extra="forbid")

    version: int = 1
    lane: str
    volumes: list[str]
    engine_id: str
    engine: EngineTarget
    workspace: str
    image: str
    protected: list[str] = Field(default_factory=list, description="workspace-relative paths never brought back")
    owner: str = Field(default_factory=owner_record, description="the broker that made the lane (`owners.owner_record`)")
    manifest: Manifest


@dataclass(kw_only=True)
class RemoteLane(Lane):
    """A lane on a remote engine, with what its backend made for it."""

    gateway: str  # the gateway's name
    owner: tuple[int, int]  # the lane's uid and gid
    volumes: list[str]
    record_path: Path
    record: LaneRecord
    sync_lock: threading.RLock = field(default_factory=threading.RLock)  # taken again by destroy's own sync


class LaneAttachment(BaseModel):
    """What another broker needs to use a remote lane this one started (`osprey agent
    --sandbox-lane FILE`): where its sidecar answers, the lane's CA, a client certificate and key,
    the lane's token, and the record its workspace is synced by. Written 0600: it holds secrets."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    host: str = Field(max_length=253)
    port: int = Field(ge=1, le=65535)
    server_name: str = Field(max_length=253)
    ca_pem: str = Field(max_length=PEM_MAX_BYTES)
    client_cert_pem: str = Field(max_length=PEM_MAX_BYTES)
    client_key_pem: SecretStr = Field(max_length=PEM_MAX_BYTES)
    token: SecretStr = Field(min_length=1, max_length=4096)
    record: str = Field(max_length=4096, description="the lane record (`LaneRecord`) its workspace is synced by")

    @classmethod
    def of(cls, lane: RemoteLane) -> LaneAttachment:
        target = lane.connection.target
        assert isinstance(target, TlsTarget) and target.client_cert_pem is not None and target.client_key_pem is not None
        return cls(host=target.host, port=target.port, server_name=target.server_name or target.host, ca_pem=target.ca_pem.decode("ascii"),
                   client_cert_pem=target.client_cert_pem.decode("ascii"),
                   client_key_pem=SecretStr(target.client_key_pem.get_secret_value().decode("ascii")),
                   token=SecretStr(lane.connection.token or ""), record=str(lane.record_path))

    def target(self) -> TlsTarget:
        return TlsTarget(host=self.host, port=self.port, server_name=self.server_name, ca_pem=self.ca_pem.encode("ascii"),
                         client_cert_pem=self.client_cert_pem.encode("ascii"),
                         client_key_pem=SecretBytes(self.client_key_pem.get_secret_value().encode("ascii")))

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write it to a new file (0600) at `path`."""
        data = {**self.model_dump(), "client_key_pem": self.client_key_pem.get_secret_value(), "token": self.token.get_secret_value()}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)

    @classmethod
    def read(cls, path: str | Path) -> LaneAttachment:
        """The attachment in the file at `path` (a SandboxError says what is wrong with it)."""
        raw = read_small_file(path, ATTACHMENT_MAX_BYTES, "the lane file", missing=" (is the lane still running?)")
        try:
            return cls.model_validate(json.loads(raw))
        except ValueError as exc:
            raise SandboxError(f"the lane file {path} does not describe a lane (it is written by osprey.testing's lane): {str(exc)[:300]}") from None


_RECORD_NAME = re.compile(r"osprey-ws-[A-Za-z0-9_.-]{1,200}\.json")


def open_attachment(lane_file: str, workspace: str, *, limits: SyncLimits | None = None,
                    progress: Progress = quiet) -> tuple[LaneAttachment, LaneRecord, RemoteDockerBackend]:
    """The attachment in `lane_file`, its lane's record, and a backend for the lane's engine, once
    checked: the record is one Osprey writes, its lane holds a copy of `workspace`, and the file
    points at the engine the lane ran on (a SandboxError says which does not hold)."""
    attachment = LaneAttachment.read(lane_file)
    record_path = Path(attachment.record)
    if not record_path.is_absolute() or not _RECORD_NAME.fullmatch(record_path.name):
        raise SandboxError(f"the lane file {lane_file} names {record_path} as its lane's record, which is not one Osprey writes")
    record = read_record(record_path)
    if os.path.realpath(workspace) != record.workspace:
        raise SandboxError(f"the lane in {lane_file} holds a copy of {record.workspace}, not of {workspace}: run with -C {record.workspace}")
    if attachment.host != engine_address(record.engine):
        raise SandboxError(f"the lane file {lane_file} points at {attachment.host}, but its lane runs on the engine at {record.engine.host}")
    backend = RemoteDockerBackend(record.engine, progress=progress, limits=limits)
    backend.check_engine(record)
    return attachment, record, backend


def records_dir(home: Path | None) -> Path:
    return (home or Path.home() / ".osprey") / RECORDS_DIR


def _owner_labels() -> dict[str, str]:
    return {LABEL: "1", REMOTE_LABEL: "1", "osprey.owner_host": host_id(), "osprey.owner_pid": str(os.getpid()),
            "osprey.boot_id": boot_id(), "osprey.pid_ns": pid_namespace()}


def _owner_gone(labels: Mapping[str, str]) -> bool:
    """Whether a remote lane's broker certainly died: only a broker of this machine can say."""
    from ..owners import owner_gone

    if labels.get("osprey.owner_host") != host_id() or labels.get(GATEWAY_LABEL):
        return False  # another machine's, or the gateway this machine's brokers share
    return owner_gone(f"{labels.get('osprey.owner_pid', '0')} {labels.get('osprey.boot_id', '')} {labels.get('osprey.pid_ns', '')}")


def _tls_probe(target: Any) -> ssl.SSLContext:
    """The context `_tls_answers` shakes hands with: this lane's CA, TLS 1.3.

    No client certificate (its key would have to be written to a file for `ssl`): with TLS 1.3
    the client's side of the handshake completes before the server checks for one, and only the
    sidecar holds a certificate this lane's CA signed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_verify_locations(cadata=target.ca_pem.decode("ascii"))
    return context


def _tls_answers(context: ssl.SSLContext, target: Any, timeout: float = 0.5) -> bool:
    """Whether the lane's sidecar answers a TLS handshake (through its gateway)."""
    import socket

    try:
        with socket.create_connection((target.host, target.port), timeout=timeout) as raw, \
                context.wrap_socket(raw, server_hostname=target.server_name or target.host) as tls:
            tls.settimeout(timeout)
            return tls.version() is not None
    except (OSError, ssl.SSLError):
        return False


def _put_archive(client: Any, container: str, path: str, data: Any) -> None:
    """The engine's archive upload, refusing (rather than doing) the replacement of a directory by
    a file or of a file by a directory, which would lose what the other side holds."""
    response = client.api._put(client.api._url("/containers/{0}/archive", container), params={"path": path, "noOverwriteDirNonDir": "1"},
                               data=data)
    client.api._raise_for_status(response)


class _Relay:
    """A progress callback that keeps its messages until `hand_over` names where they go."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: list[str] = []
        self._to: Progress | None = None

    def __call__(self, message: str) -> None:
        with self._lock:
            if self._to is None:
                self._kept.append(message)
                return
            to = self._to
        to(message)

    def hand_over(self, progress: Progress) -> None:
        with self._lock:
            kept, self._kept, self._to = self._kept, [], progress
        for message in kept:
            progress(message)


@dataclass(kw_only=True)
class _Begun:
    """A lane start `RemoteDockerBackend.begin` registered, before its session asked for it."""

    request: LaneRequest
    future: concurrent.futures.Future[RemoteLane] = field(default_factory=concurrent.futures.Future)
    made: list[tuple[str, str]] = field(default_factory=list)
    relay: _Relay = field(default_factory=_Relay)

    def discard(self, backend: RemoteDockerBackend) -> None:
        """Remove what the start made, once it ended (a start nobody took over). One still under
        way after `BEGUN_EXIT_WAIT_S` is left to the reaper (its broker is gone by then) and its
        volumes to `osprey sandbox recover`: removing beside it would race what it makes."""
        if not self.future.cancel():
            try:
                self.future.result(timeout=BEGUN_EXIT_WAIT_S)
            except concurrent.futures.TimeoutError:
                return
            except BaseException:  # noqa: BLE001 - it failed: what it made is still removed
                pass
        backend._remove_made(self.made)


_begun_lock = threading.Lock()
_begun_by: list[RemoteDockerBackend] = []  # the backends that began lanes (each keeps those not taken over)
BEGUN_EXIT_WAIT_S = 30.0


def _discard_begun() -> None:
    """At exit: remove the lanes begun for sessions that never took them over."""
    with _begun_lock:
        left = [(backend, begun) for backend in _begun_by for begun in backend._begun.values()]
        for backend in _begun_by:
            backend._begun.clear()
    for backend, begun in left:
        begun.discard(backend)


def _socket_dir_entry(name: str, owner: tuple[int, int]) -> tuple[tarfile.TarInfo, bytes]:
    """The tar entry of a lane's socket directory: the lane's user makes its socket there, the
    gateway (as nobody) reaches it, and no one else lists or writes it. The engine may have made
    it already (root's, 0755) when the lane started first: unpacking the entry sets its owner and
    mode."""
    info = tarfile.TarInfo(name)
    info.type, info.mode, (info.uid, info.gid), info.mtime = tarfile.DIRTYPE, 0o711, owner, int(time.time())
    return info, b""


def sockets_volume(gateway: str) -> str:
    """The name of the sockets volume of the gateway named `gateway`."""
    return f"{gateway}-sockets"


def gateway_name(image: str) -> str:
    """The name of this machine's gateway on an engine for lanes of `image` (one per machine and
    lane image, whatever the broker: a gateway runs the `forward` of its lanes' version)."""
    return f"osprey-gw-{host_id()[:12]}-{image.rpartition(':')[2][:12]}"


def engine_address(target: EngineTarget) -> str:
    """The host a published port of this engine is reached at: the engine's own host name."""
    if target.scheme == "unix":
        return "127.0.0.1"
    host = urlsplit(target.host).hostname
    return host or "127.0.0.1"


def _secret_entries(prefix: str, files: Mapping[str, bytes], owner: tuple[int, int]) -> list[tuple[tarfile.TarInfo, bytes]]:
    """Tar entries of the lane's secrets directory (the lane's user's, 0700) and its files (0400)."""
    now = int(time.time())
    top = tarfile.TarInfo(prefix.rstrip("/"))
    top.type, top.mode, (top.uid, top.gid), top.mtime = tarfile.DIRTYPE, 0o700, owner, now
    entries = [(top, b"")]
    for name, data in files.items():
        info = tarfile.TarInfo(prefix + name)
        info.size, info.mode, (info.uid, info.gid), info.mtime = len(data), 0o400, owner, now
        entries.append((info, data))
    return entries


class _ChunkReader(io.RawIOBase):
    """The engine's archive stream (an iterator of chunks) as a file tarfile can read."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(target), len(self._buffer))
        target[:n] = self._buffer[:n]
        self._buffer = self._buffer[n:]
        return n


class RemoteDockerBackend(LaneBackend):
    """Lanes on a Docker engine that does not see this machine's files (`target`; `client` a
    docker SDK client for it, made from `target` when not given). `local_client` is the engine
    the lane image is copied from (this machine's default one when not given)."""

    def __init__(self, target: EngineTarget, *, client: Any | None = None, engine: Engine | None = None, local_client: Any | None = None,
                 limits: SyncLimits | None = None, progress: Progress = quiet) -> None:
        self.target = target
        self._client = client
        self._local_client = local_client
        self.limits = limits or SyncLimits()
        self.engine = engine
        self.progress = progress
        self._images: dict[str | None, str] = {}
        self._begun: dict[tuple[str, str], _Begun] = {}

    # --- the engine ---------------------------------------------------------------------------

    def client(self) -> Any:
        if self._client is None:
            self._client = connect(self.target)
        return self._client

    def _engine(self) -> Engine:
        if self.engine is None:
            self.engine = identify(self.client(), self.target)
        return self.engine

    def check_engine(self, record: LaneRecord) -> None:
        """Raise a SandboxError unless the engine is the one the record's lane ran on."""
        engine = self._engine()
        if engine.id != record.engine_id:
            raise SandboxError(f"the engine at {record.engine.host} is not the one the lane {record.lane} ran on "
                               f"(id {engine.id[:12] or '?'}, recorded {record.engine_id[:12]}); left as it is")

    def _sdk(self, what: str, call: Any) -> Any:
        import docker

        try:
            return call()
        except docker.errors.APIError as exc:
            raise SandboxError(f"{what} failed on the engine at {self.target.host}: {str(exc.explanation or exc)[:300]}") from None
        except docker.errors.DockerException as exc:
            raise SandboxError(f"{what}: the engine at {self.target.host} did not answer ({str(exc)[:300]})") from None
        except OSError as exc:  # requests' connection errors
            raise SandboxError(f"{what}: the engine at {self.target.host} could not be reached ({str(exc)[:300]})") from None

    def _image(self, options: SandboxSettings, home: Path | None, progress: Progress) -> str:
        """The lane image on the remote engine: copied from this machine's engine unless it is
        there already (its tag names its content); built there when this machine has no engine."""
        from .engines import local_client
        from .images import copy_image, ensure_image, image_exists, image_tag, pull_by_digest

        if options.base_image in self._images:
            return self._images[options.base_image]
        if self._local_client is None:
            try:
                self._local_client = local_client()
            except SandboxError:
                # No engine here to copy from: the remote engine builds it from the same recipe (its
                # base too, when it lacks one: debootstrap here, `docker import` through DOCKER_HOST).
                progress("this machine has no Docker engine: the lane image is built on the remote engine")
                tag = ensure_image(self.client(), options.base_image, progress=progress, home=home)
                self._images[options.base_image] = tag
                return tag
        local = self._local_client
        if options.registry:
            # The recipe's tag (its base built here if need be), pulled by digest from the
            # registry when the engine lacks it and the registry has it.
            tag, _ = image_tag(local, options.base_image, progress)
            built = local.api.inspect_image(tag)["Id"] if image_exists(local, tag) else None
            if image_exists(self.client(), tag) or pull_by_digest(self.client(), tag, options.registry, expected_id=built, home=home,
                                                                  progress=progress):
                self._images[options.base_image] = tag
                return tag
        tag = ensure_image(local, options.base_image, progress=progress, home=home)
        copy_image(local, self.client(), tag, progress=progress)
        self._images[options.base_image] = tag  # for this backend's later lanes
        return tag

    # --- provisioning -------------------------------------------------------------------------

    def begin(self, request: LaneRequest) -> Callable[[], None]:
        """Register the start of `request`'s lane, and return what runs it (to its end, in the
        caller's thread): a front end begins the lane before its session's own set-up, and
        `provision` of the same request takes it over. Its messages wait for that."""
        begun = _Begun(request=request)
        with _begun_lock:
            self._begun[(request.workspace, request.session_id)] = begun
            if not _begun_by:
                atexit.register(_discard_begun)
            if self not in _begun_by:
                _begun_by.append(self)

        def run() -> None:
            if not begun.future.set_running_or_notify_cancel():
                return
            try:
                begun.future.set_result(self._provision(request, begun.relay, begun.made))
            except BaseException as exc:  # noqa: BLE001 - handed to `provision`
                begun.future.set_exception(exc)

        return run

    async def discard_begun(self, request: LaneRequest) -> None:
        """Remove the lane `begin` started for `request`'s workspace and session, if any."""
        with _begun_lock:
            begun = self._begun.pop((request.workspace, request.session_id), None)
        if begun is not None:
            await asyncio.to_thread(begun.discard, self)

    async def provision(self, request: LaneRequest, *, progress: Progress = quiet) -> RemoteLane:
        loop = asyncio.get_running_loop()
        with _begun_lock:
            begun = self._begun.pop((request.workspace, request.session_id), None)
        if begun is not None and begun.request != request:
            await asyncio.to_thread(begun.discard, self)
            begun = None
        made: list[tuple[str, str]] = begun.made if begun is not None else []  # (kind, name) to remove when the start fails
        if begun is not None:
            begun.relay.hand_over(progress)
            work: asyncio.Future[RemoteLane] = asyncio.wrap_future(begun.future)
        else:
            work = loop.run_in_executor(None, self._provision, request, progress, made)
        try:
            lane = await asyncio.shield(work)
        except asyncio.CancelledError:
            try:
                await work
            except Exception:  # noqa: BLE001 - it failed on its own; what it made is removed below
                pass
            await asyncio.to_thread(self._remove_made, made)
            raise
        except BaseException:
            await asyncio.to_thread(self._remove_made, made)
            raise
        try:
            await self._wait_ready(lane, request.options.ready_timeout)
        except BaseException:
            await lane.connection.close()
            await asyncio.to_thread(self._remove_made, made)
            raise
        return lane

    def _provision(self, request: LaneRequest, progress: Progress, made: list[tuple[str, str]]) -> RemoteLane:
        from .lanes import PROTECTED, protected_paths, workspace_owner

        client = self.client()
        engine = self._engine()
        progress(f"lanes run on {engine.described}; the workspace is copied there and back")
        self._reap()
        workspace = os.path.realpath(request.workspace)
        options = request.options
        image = self._image(options, request.home, progress)
        session = request.session_id
        # Each start's names are new (a session resumed after a crash must not take over the
        # volumes its earlier lane left for `recover`).
        unique = f"{session}-{secrets.token_hex(3)}"
        lane_name = f"osprey-lane-{unique}"  # the lane's container, socket directory and certificate name
        labels = {**_owner_labels(), "osprey.session": session, "osprey.workspace": workspace, "osprey.image": image}
        owner = workspace_owner(workspace)

        # What never comes back: the protected paths that exist, and the fixed names whether they
        # exist or not (a lane must not create a `.git` with hooks where there was none).
        protected_dirs, protected = [], set(PROTECTED) if options.protect_git else set()
        for path in protected_paths(workspace, options, request.home):
            relative = os.path.relpath(path, workspace)
            protected.add(relative)
            if os.path.isdir(path) and not os.path.islink(path):
                protected_dirs.append(relative)
        volumes = [f"osprey-ws-{unique}", f"osprey-sec-{unique}"] + [f"osprey-ro{i}-{unique}" for i in range(len(protected_dirs))]
        for volume in volumes:
            self._sdk("making a lane volume", lambda v=volume: client.volumes.create(v, labels={**labels, "osprey.volume": "1"}))
            made.append(("volume", volume))

        # The lane's socket directory is in the sockets volume of the gateway (one for this
        # machine's lanes of this image on the engine); the gateway is found or started, and the
        # lane made and started, while the workspace travels. The lane's sidecar waits for the
        # `ready` file that ends the archive (after its socket directory, the workspace and its
        # secrets) before it reads them.
        via = gateway_name(image)
        sockets = self._sockets_volume(via)
        made.append(("socket dir", f"{via}/{lane_name}/{owner[0]}:{owner[1]}"))

        def start_lane() -> str:
            lane_id = self._create_lane(request, image, lane_name, {**labels, VIA_LABEL: via, OWNER_LABEL: f"{owner[0]}:{owner[1]}"}, volumes,
                                        protected_dirs, workspace, owner,
                                        socket_dir=f"{sockets}/{lane_name}")
            made.append(("container", lane_id))
            self._sdk("starting the lane", lambda: client.api.start(lane_id))
            return lane_id

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="osprey-lane-start")
        gateway = pool.submit(self._gateway, image)
        started = pool.submit(start_lane)
        pool.shutdown(wait=False)
        try:
            pki = make_lane_pki(lane_name)
            token = secrets.token_hex(32)
            # The lane's certificate, key and token travel in the same archive as the workspace.
            lane_secrets = [_socket_dir_entry(f"{SOCKETS_IN_LOADER.lstrip('/')}/{lane_name}", owner), *_secret_entries(
                SECRETS_IN_LANE.lstrip("/") + "/", {"server.pem": pki.server_cert_pem, "server.key": pki.server_key_pem, "client-ca.pem": pki.ca_pem,
                                                    "token": token.encode() + b"\n", READY_FILE: b""}, owner)]
            progress(f"sending the workspace {workspace} to the engine ...")
            with tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024) as packed:
                manifest = pack(workspace, packed, limits=self.limits, owner=owner, prefix=workspace.lstrip("/") + "/", extra=lane_secrets)
                record = LaneRecord(lane=lane_name, volumes=volumes, engine_id=engine.id, engine=self.target, workspace=workspace,
                                    image=image, protected=sorted(protected), manifest=manifest)
                record_path = self._write_record(records_dir(request.home) / f"{volumes[0]}.json", record)
                made.append(("record", str(record_path)))
                # A container that never starts, with every volume mounted writable, takes the archive in.
                loader_mounts = [{"Type": "volume", "Source": volumes[0], "Target": workspace},
                                 {"Type": "volume", "Source": volumes[1], "Target": SECRETS_IN_LANE},
                                 {"Type": "volume", "Source": sockets_volume(via), "Target": SOCKETS_IN_LOADER}] + [
                    {"Type": "volume", "Source": v, "Target": f"{workspace}/{p}"} for v, p in zip(volumes[2:], protected_dirs, strict=True)]
                loader = self._sdk("preparing the lane's workspace", lambda: client.api.create_container(
                    image, command=["true"], entrypoint=[], labels=labels, network_disabled=True,
                    host_config=client.api.create_host_config(mounts=loader_mounts, network_mode="none")))["Id"]
                try:
                    packed.seek(0)
                    self._sdk("copying the workspace to the engine", lambda: client.api.put_archive(loader, "/", packed))
                finally:
                    self._sdk("removing the workspace loader", lambda: client.api.remove_container(loader, force=True))
            progress(f"sent {len(manifest.entries):,} files and directories")
            lane_id = started.result()
            self._make_symlinks(lane_id, escaping_symlinks(manifest.entries), workspace, owner)
            connection = Connection(pki.target(engine_address(self.target), gateway.result()), token=token)
            return RemoteLane(id=lane_id, name=lane_name, workspace=workspace, image=image, connection=connection, gateway=via, owner=owner,
                              volumes=volumes, record_path=record_path, record=record)
        except BaseException:
            with suppress(Exception):
                started.result()  # what it made is in `made` before the caller removes it
            raise

    def _make_symlinks(self, lane_id: str, links: Mapping[str, str], workspace: str, owner: tuple[int, int]) -> None:
        """Make in the lane the symlinks an engine refuses to unpack (their target climbs out of
        the workspace), as the lane's user."""
        items = sorted(links.items())
        for start in range(0, len(items), 200):
            argv = ["sh", "-c", 'while [ "$#" -gt 1 ]; do ln -sfn -- "$1" "$2" || exit 1; shift 2; done', "sh"]
            for path, target in items[start:start + 200]:
                argv += [target, f"{workspace}/{path}"]
            self._exec(lane_id, argv, owner, "making the workspace's symlinks in the lane")

    def _exec(self, container: str, argv: list[str], owner: tuple[int, int], what: str) -> int | None:
        """Run `argv` in the container as `owner`, to its end; its exit code."""
        client = self.client()
        created = self._sdk(what, lambda: client.api.exec_create(container, argv, user=f"{owner[0]}:{owner[1]}"))
        self._sdk(what, lambda: client.api.exec_start(created["Id"]))
        code = self._sdk(what, lambda: client.api.exec_inspect(created["Id"])).get("ExitCode")
        return code if isinstance(code, int) else None

    def _create_lane(self, request: LaneRequest, image: str, name: str, labels: dict[str, str], volumes: list[str],
                     protected_dirs: list[str], workspace: str, owner: tuple[int, int], *, socket_dir: str) -> str:
        """The lane's container, not started: no network (the default bridge with `network` on),
        its sidecar's socket in `socket_dir` (a path on the engine's machine)."""
        client = self.client()
        options = request.options
        memory = size_bytes(options.memory_limit)
        mounts = [
            {"Type": "volume", "Source": volumes[0], "Target": workspace},
            {"Type": "volume", "Source": volumes[1], "Target": SECRETS_IN_LANE},
        ] + [{"Type": "volume", "Source": v, "Target": f"{workspace}/{p}", "ReadOnly": True} for v, p in zip(volumes[2:], protected_dirs, strict=True)]
        host_config = client.api.create_host_config(
            # A bind the engine makes at start when the loader has not made it yet (a mount of
            # type bind would refuse a source that does not exist at create).
            binds=[f"{socket_dir}:{SOCKET_DIR_IN_LANE}:rw"],
            mounts=mounts, network_mode="bridge" if options.network else "none", cap_drop=["ALL"], security_opt=["no-new-privileges:true"], read_only=True,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={options.tmp_size},mode=1777", "/dev/mqueue": "ro,nosuid,nodev,noexec,size=4k"},
            shm_size="64m", pids_limit=options.pids_limit, mem_limit=memory, memswap_limit=memory, nano_cpus=int(options.cpus * 1e9))
        command = ["--listen", f"unix:{SOCKET_DIR_IN_LANE}/{SOCKET_NAME}", "--tls-cert", f"{SECRETS_IN_LANE}/server.pem",
                   "--tls-key", f"{SECRETS_IN_LANE}/server.key", "--tls-client-ca", f"{SECRETS_IN_LANE}/client-ca.pem",
                   "--token-file", f"{SECRETS_IN_LANE}/token", "--forget-secrets", "--seal", SECRETS_IN_LANE,
                   "--wait-for", f"{SECRETS_IN_LANE}/{READY_FILE}", "--wait-timeout", str(WAIT_FOR_WORKSPACE_S),
                   "--root", workspace, "--reap-strays"]
        created = self._sdk("making the lane", lambda: client.api.create_container(
            image, command=command, name=name, user=f"{owner[0]}:{owner[1]}", working_dir=workspace, labels=labels,
            environment={"HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}, host_config=host_config))
        return str(created["Id"])

    def _gateway(self, image: str) -> int:
        """This machine's gateway on the engine for lanes of `image`, started if need be: its
        published port. Brokers of this machine share it (a start that loses the race to make it
        takes the other's)."""
        import docker

        client = self.client()
        name = gateway_name(image)
        why = ""
        for _ in range(3):
            try:
                attrs = client.api.inspect_container(name)
            except docker.errors.NotFound:
                attrs = None
            except (docker.errors.DockerException, OSError) as exc:
                raise SandboxError(f"the engine at {self.target.host} could not be asked for the lanes' gateway: {str(exc)[:300]}") from None
            if attrs is None:
                try:
                    self._create_gateway(image, name)
                except SandboxError as exc:
                    why = f": {exc}"  # or made meanwhile by another broker of this machine: look again
                continue
            if not attrs["State"].get("Running"):
                try:
                    client.api.start(attrs["Id"])
                except (docker.errors.DockerException, OSError):
                    with suppress(docker.errors.DockerException, OSError):
                        client.api.remove_container(attrs["Id"], force=True)
                    continue
                attrs = client.api.inspect_container(attrs["Id"])
            bound = ((attrs.get("NetworkSettings") or {}).get("Ports") or {}).get(f"{LANE_PORT}/tcp") or []
            if bound:
                return int(bound[0]["HostPort"])
        raise SandboxError(f"the lanes' gateway {name} could not be started on the engine at {self.target.host}{why}")

    def _sockets_volume(self, gateway: str) -> str:
        """The sockets volume of the gateway named `gateway` (made if need be): its path on the
        engine's machine."""
        client = self.client()
        labels = {LABEL: "1", REMOTE_LABEL: "1", "osprey.owner_host": host_id()}
        name = sockets_volume(gateway)
        volume = self._sdk("making the lanes' sockets volume", lambda: client.api.create_volume(name, labels=labels))
        mountpoint = volume.get("Mountpoint") or self._sdk("finding the lanes' sockets volume", lambda: client.api.inspect_volume(name)).get("Mountpoint")
        if not mountpoint:
            raise SandboxError(f"the engine at {self.target.host} does not say where the volume {name} is; "
                               "lanes need a volume driver that keeps it on the engine's machine (`local`)")
        return str(mountpoint)

    def _create_gateway(self, image: str, name: str) -> str:
        client = self.client()
        labels = {LABEL: "1", REMOTE_LABEL: "1", GATEWAY_LABEL: "1", "osprey.owner_host": host_id(), "osprey.image": image}
        host_config = client.api.create_host_config(
            network_mode="bridge", cap_drop=["ALL"], security_opt=["no-new-privileges:true"], read_only=True,
            pids_limit=64, mem_limit=_GATEWAY_MEMORY, memswap_limit=_GATEWAY_MEMORY, nano_cpus=int(0.5e9),
            port_bindings={f"{LANE_PORT}/tcp": None}, restart_policy={"Name": "unless-stopped"},
            mounts=[{"Type": "volume", "Source": sockets_volume(name), "Target": SOCKETS_IN_GATEWAY}])  # made by `_provision`
        created = self._sdk("making the lanes' gateway", lambda: client.api.create_container(
            image, name=name, user="65534:65534", labels=labels, ports=[LANE_PORT], host_config=host_config,
            entrypoint=["/usr/bin/tini", "--", "python3", "-I", "-S", "-B", "-c", _SIDECAR.format(module="forward")],
            command=["--listen", f"0.0.0.0:{LANE_PORT}", "--suffix", SERVER_NAME_SUFFIX, "--sockets", SOCKETS_IN_GATEWAY]))
        gateway_id = str(created["Id"])
        self._sdk("starting the lanes' gateway", lambda: client.api.start(gateway_id))
        return gateway_id

    def _remove_socket_dir(self, gateway: str, lane: str, owner: tuple[int, int]) -> None:
        """Remove a lane's directory from its gateway's sockets volume: emptied as the lane's user
        (whose it is; no one has capabilities in the gateway), then removed as the volume's owner."""
        directory = f"{SOCKETS_IN_GATEWAY}/{lane}"
        try:
            emptied = self._exec(gateway, ["sh", "-c", 'chmod -R u+rwx -- "$1" && find "$1" -mindepth 1 -delete', "sh", directory], owner,
                                 "emptying the lane's socket directory")
            removed = emptied == 0 and self._exec(gateway, ["rmdir", "--", directory], (0, 0), "removing the lane's socket directory") == 0
        except SandboxError:
            removed = False
        if not removed:
            self.progress(f"warning: the lane's socket directory {directory} could not be removed from the gateway {gateway}; "
                          "`osprey sandbox prune` removes the gateway and its volume once no lane uses it")

    async def _wait_ready(self, lane: RemoteLane, deadline_s: float) -> None:
        end = time.monotonic() + deadline_s
        next_check = 0.0
        tls_up = False
        probe = _tls_probe(lane.connection.target)
        while True:
            # A gRPC channel whose first connection the gateway closes (the sidecar not up yet)
            # backs off for a second; a plain TLS handshake says first when the sidecar answers.
            tls_up = tls_up or await asyncio.to_thread(_tls_answers, probe, lane.connection.target)
            if tls_up and await lane.connection.healthy(timeout=1.0):
                return
            now = time.monotonic()
            if now >= next_check:
                next_check = now + 0.5
                state = await self.state(lane)
                if not state.running:
                    logs = await self.logs(lane)
                    raise SandboxError(f"the lane exited during start-up (exit code {state.exit_code}); its last log lines:\n{logs or '(none)'}")
            if now > end:
                refused = f" ({lane.connection.refused})" if lane.connection.refused else ""
                gateway = await asyncio.to_thread(self._logs, lane.gateway)
                raise SandboxError(f"the lane on {self.target.host} did not answer within {deadline_s:g} s{refused}; "
                                   f"its last log lines:\n{await self.logs(lane) or '(none)'}\nits gateway's:\n{gateway or '(none)'}")
            await asyncio.sleep(READY_POLL_S)

    # --- records ------------------------------------------------------------------------------

    @staticmethod
    def _write_record(path: Path, record: LaneRecord) -> Path:
        directory = path.parent
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = directory / f".{path.name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            # json, not pydantic's serialiser: a name that is not UTF-8 must survive (as a \udcXX escape).
            fh.write(json.dumps(record.model_dump()))
        os.replace(temporary, path)
        return path

    # --- watching and removing ----------------------------------------------------------------

    async def state(self, lane: Lane) -> LaneState:
        import docker

        try:
            attrs = await asyncio.to_thread(self.client().api.inspect_container, lane.id)
        except docker.errors.NotFound:
            return LaneState(running=False, gone=True)
        except (docker.errors.DockerException, OSError) as exc:
            raise SandboxError(f"the engine at {self.target.host} could not say how the lane is: {str(exc)[:300]}") from None
        state = attrs.get("State") or {}
        exit_code = state.get("ExitCode")
        return LaneState(running=bool(state.get("Running")), paused=bool(state.get("Paused")), oom_killed=bool(state.get("OOMKilled")),
                         exit_code=exit_code if isinstance(exit_code, int) else None)

    async def logs(self, lane: Lane, lines: int = LOG_LINES) -> str:
        return await asyncio.to_thread(self._logs, lane.id, lines)

    def _logs(self, container: str, lines: int = LOG_LINES) -> str:
        try:
            return bytes(self.client().api.logs(container, tail=lines)).decode("utf-8", "replace").strip()
        except Exception:  # noqa: BLE001 - logs are only for a message
            return ""

    async def sync(self, lane: Lane) -> SyncReport | None:
        """Bring back what the lane changed so far (`/sync`); the lane goes on."""
        if not isinstance(lane, RemoteLane):
            return None
        return await asyncio.to_thread(self._sync, lane)

    def _sync(self, lane: RemoteLane, *, push: bool = True) -> SyncReport:
        with lane.sync_lock:
            lane.record, report = self.sync_record(lane.record_path, push=push)
            return report

    def sync_record(self, record_path: Path, *, push: bool = True) -> tuple[LaneRecord, SyncReport]:
        """Bring back what the lane of the record at `record_path` changed; then (`push`, the lane
        running) send it what changed here meanwhile, so that both sides hold the same workspace
        again. The record on disk is the one truth (a broker attached to a lane someone else
        started syncs it too), read and rewritten under a lock that other processes honour."""
        with _record_lock(record_path):
            if not record_path.exists():
                raise SandboxError("the lane is gone: its changes were brought back when it ended")
            record = read_record(record_path)
            report = self.read_back(record)
            if report.complete and push:
                self._push(record, report)
            if report.complete:
                record = record.model_copy(update={"manifest": report.manifest})
                self._write_record(record_path, record)
            return record, report

    def _push(self, record: LaneRecord, report: SyncReport) -> None:
        from .lanes import workspace_owner

        client = self.client()
        lane = record.lane  # the container's name
        owner = workspace_owner(record.workspace)
        with tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024) as out:
            changes = pack_changes(record.workspace, report.manifest, out, protected=record.protected, limits=self.limits, owner=owner,
                                   leave=report.kept_back)
            if changes.sent:
                out.seek(0)
                self._sdk("sending your changes to the lane", lambda: _put_archive(client, lane, record.workspace, out))
        self._make_symlinks(lane, escaping_symlinks(changes.sent), record.workspace, owner)
        for start in range(0, len(changes.gone), 200):
            batch = [f"{record.workspace}/{p}" for p in changes.gone[start:start + 200]]
            self._exec(lane, ["rm", "-rf", "--", *batch], owner, "removing in the lane what you removed")
        entries = report.manifest.entries
        entries.update(changes.sent)
        for path in changes.gone:
            entries.pop(path, None)
            for inner in [p for p in entries if p.startswith(path + "/")]:
                entries.pop(inner)
        report.sent, report.removed_in_lane = sorted(changes.sent), sorted(changes.gone)

    def read_back(self, record: LaneRecord) -> SyncReport:
        """Apply to the workspace what the lane's volume holds beyond what `record` sent."""
        client = self.client()
        # A volume that is gone would be made afresh, empty, by the mount below, and an empty
        # workspace read back would remove everything here: ask for it first.
        if not self.volume_exists(record.volumes[0]):
            raise SandboxError(f"the lane's volume {record.volumes[0]} is no longer on the engine at {self.target.host}; "
                               "nothing was changed here")
        mounts = [{"Type": "volume", "Source": record.volumes[0], "Target": record.workspace, "ReadOnly": True}]
        reader = self._sdk("reading the lane's workspace", lambda: client.api.create_container(
            record.image, command=["true"], entrypoint=[], labels={**_owner_labels(), "osprey.reader": "1"}, network_disabled=True,
            host_config=client.api.create_host_config(mounts=mounts, network_mode="none")))["Id"]
        try:
            chunks, _ = self._sdk("reading the lane's workspace", lambda: client.api.get_archive(reader, record.workspace, chunk_size=1024 * 1024))
            stream = io.BufferedReader(_ChunkReader(iter(chunks)), buffer_size=1024 * 1024)
            return bring_back(record.workspace, record.manifest, stream, prefix=os.path.basename(record.workspace) + "/",
                              protected=record.protected, limits=self.limits)
        finally:
            self._sdk("removing the workspace reader", lambda: client.api.remove_container(reader, force=True))

    async def destroy(self, lane: Lane) -> None:
        """Bring the lane's changes back, then remove the lane, its socket directory and (when
        everything came back) its volumes and record; safe to call twice."""
        await lane.connection.close()
        if not isinstance(lane, RemoteLane):
            return
        await asyncio.to_thread(self._destroy, lane)

    def _destroy(self, lane: RemoteLane) -> None:
        with lane.sync_lock:  # a /sync queued behind this must find the record gone, not a removed volume
            self._remove_lane(lane)

    def _remove_lane(self, lane: RemoteLane) -> None:
        import docker

        client = self.client()
        try:
            client.api.remove_container(lane.id, force=True)
        except docker.errors.NotFound:
            pass
        except (docker.errors.DockerException, OSError) as exc:
            self.progress(f"warning: the lane container {lane.id[:12]} could not be removed: {str(exc)[:200]}")
        self._remove_socket_dir(lane.gateway, lane.name, lane.owner)
        if not lane.record_path.exists():
            return  # destroyed before
        try:
            report = self._sync(lane, push=False)
        except SandboxError as exc:
            self.progress(f"the lane's changes could not be brought back ({exc}); its volume {lane.volumes[0]} is kept: "
                          "`osprey sandbox recover` brings them back")
            return
        self.progress(describe(report))
        if not report.complete:
            self.progress(f"the lane's volume {lane.volumes[0]} is kept: `osprey sandbox recover` tries again")
            return
        self._remove_volumes(lane.volumes)
        forget_record(lane.record_path)

    def prune_gateway(self) -> bool:
        """Remove this machine's gateways (and their sockets volumes) that no lane is reached
        through; whether one was removed."""
        import docker

        client = self.client()
        try:
            gateways = client.api.containers(all=True, filters={"label": [GATEWAY_LABEL, f"osprey.owner_host={host_id()}"]})
            used = {(c.get("Labels") or {}).get(VIA_LABEL) for c in client.api.containers(all=True, filters={"label": [LABEL, VIA_LABEL]})}
        except (docker.errors.DockerException, OSError) as exc:
            raise SandboxError(f"the engine at {self.target.host} could not be asked for the lanes' gateways: {str(exc)[:300]}") from None
        removed = False
        for gateway in gateways:
            name = (gateway.get("Names") or ["/"])[0].lstrip("/")
            if name in used:
                continue
            with suppress(docker.errors.NotFound):
                client.api.remove_container(gateway["Id"], force=True)
            self._remove_volumes([sockets_volume(name)])
            removed = True
        return removed

    def volume_exists(self, volume: str) -> bool:
        import docker

        try:
            self.client().api.inspect_volume(volume)
            return True
        except docker.errors.NotFound:
            return False
        except (docker.errors.DockerException, OSError) as exc:
            raise SandboxError(f"the engine at {self.target.host} could not be asked for the volume {volume}: {str(exc)[:200]}") from None

    def _remove_volumes(self, volumes: list[str]) -> None:
        import docker

        for volume in volumes:
            try:
                self.client().api.remove_volume(volume, force=True)
            except docker.errors.NotFound:
                pass
            except (docker.errors.DockerException, OSError) as exc:
                self.progress(f"warning: the lane volume {volume} could not be removed: {str(exc)[:200]}")

    def _remove_made(self, made: list[tuple[str, str]]) -> None:
        """Remove what a failed start made, newest first (volumes too: nothing ran in them)."""
        import docker

        client = self.client()
        for kind, name in reversed(made):
            try:
                if kind == "container":
                    client.api.remove_container(name, force=True)
                elif kind == "socket dir":
                    gateway, lane, ids = name.split("/")
                    uid, _, gid = ids.partition(":")
                    self._remove_socket_dir(gateway, lane, (int(uid), int(gid)))
                elif kind == "volume":
                    client.api.remove_volume(name, force=True)
                elif kind == "record":
                    Path(name).unlink(missing_ok=True)
            except (docker.errors.DockerException, OSError):
                pass

    async def reap(self) -> list[str]:
        return await asyncio.to_thread(self._reap)

    def _reap(self) -> list[str]:
        """Remove the containers (and socket directories) of this machine's lanes whose broker
        died; their workspace volumes stay for `osprey sandbox recover`."""
        import docker

        client = self.client()
        removed = []
        try:
            containers = client.api.containers(all=True, filters={"label": [LABEL, REMOTE_LABEL]})
        except (docker.errors.DockerException, OSError):
            return []
        for container in containers:
            labels = container.get("Labels") or {}
            if not _owner_gone(labels):
                continue
            try:
                client.api.remove_container(container["Id"], force=True)
            except (docker.errors.DockerException, OSError):
                continue
            name = (container.get("Names") or [container["Id"][:12]])[0].lstrip("/")
            uid, _, gid = labels.get(OWNER_LABEL, "").partition(":")
            if labels.get(VIA_LABEL) and uid.isdigit() and gid.isdigit():
                self._remove_socket_dir(labels[VIA_LABEL], name, (int(uid), int(gid)))
            removed.append(name)
        try:  # networks of lanes made before lanes had none
            networks = client.api.networks(filters={"label": [LABEL, REMOTE_LABEL]})
        except (docker.errors.DockerException, OSError):
            networks = []
        for network in networks:
            if _owner_gone(network.get("Labels") or {}):
                with suppress(docker.errors.DockerException, OSError):
                    client.api.remove_network(network["Id"])
        return removed

    def protected_changes(self, request: LaneRequest, before: Mapping[str, str | None]) -> list[str]:
        return []  # protected paths never come back from a remote lane


def describe(report: SyncReport) -> str:
    """One message for a person: what came back from the lane."""
    if not report.changed and not report.refused:
        text = "the lane changed nothing in the workspace"
    else:
        parts = [f"{len(report.written)} written", f"{len(report.deleted)} deleted"]
        text = "from the lane: " + ", ".join(parts)
        if report.sent or report.removed_in_lane:
            text += f"; to the lane: {len(report.sent)} sent, {len(report.removed_in_lane)} removed"
        if report.conflicts:
            shown = "; ".join(f"{c.path} ({c.reason}{', the lane’s version is in ' + c.beside if c.beside else ''})" for c in report.conflicts[:20])
            more = f" and {len(report.conflicts) - 20} more" if len(report.conflicts) > 20 else ""
            text += f"; {len(report.conflicts)} conflicts, your files kept: {shown}{more}"
        if report.refused:
            text += f"; {len(report.refused)} refused: " + "; ".join(report.refused[:10])
    if report.left_in_lane:
        text += f" ({report.left_in_lane} new paths your .gitignore excludes stayed in the lane)"
    if not report.complete:
        text += f"; {report.problem}"
    return text


@contextmanager
def _record_lock(path: Path) -> Iterator[None]:
    """Hold the lock (`flock`) of the lane record at `path`: every process that syncs the lane
    takes it, so that two never read back or rewrite the record at once."""
    import fcntl

    try:
        fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise SandboxError(f"the lane record {path} cannot be locked ({exc.strerror}): is the lane gone?") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def forget_record(path: Path) -> None:
    """Remove a lane record (its changes are back) and its lock (a sync waiting for it then finds
    the record gone)."""
    with _record_lock(path):
        path.unlink(missing_ok=True)
        path.with_name(f".{path.name}.lock").unlink(missing_ok=True)


def read_record(path: Path) -> LaneRecord:
    """A lane record written by `RemoteDockerBackend` (a SandboxError when it cannot be used)."""
    raw = read_small_file(path, RECORD_MAX_BYTES, "the lane record", follow_symlinks=False, missing=" (its lane is gone)")
    try:
        return LaneRecord.model_validate(json.loads(raw))
    except ValueError as exc:
        raise SandboxError(f"the lane record {path} is not one Osprey wrote ({str(exc)[:200]})") from None


def recover_lanes(home: Path | None, limits: SyncLimits | None = None) -> list[str]:
    """Bring back the changes of remote lanes whose broker died before it could (their records
    under `$OSPREY_HOME/lanes/`), then remove what is left of them; a line for each."""
    from ..owners import owner_gone

    directory = records_dir(home)
    paths = sorted(directory.glob("osprey-ws-*.json")) if directory.is_dir() else []
    lines = []
    for path in paths:
        try:
            record = read_record(path)
        except SandboxError as exc:
            lines.append(str(exc))
            continue
        if not owner_gone(record.owner):
            lines.append(f"{record.lane}: its session still runs (broker {record.owner.split()[0]}); it brings the changes back when it ends")
            continue
        backend = RemoteDockerBackend(record.engine, limits=limits)
        try:
            backend.check_engine(record)
            backend._reap()
            with _record_lock(path):  # a broker attached to the lane may be syncing it
                if not path.exists():
                    continue
                if not backend.volume_exists(record.volumes[0]):
                    path.unlink()
                    path.with_name(f".{path.name}.lock").unlink(missing_ok=True)
                    lines.append(f"{record.lane}: its volume {record.volumes[0]} is gone from the engine at {record.engine.host}; nothing to bring back")
                    continue
                report = backend.read_back(read_record(path))
                if report.complete:
                    backend._remove_volumes(record.volumes)
                    path.unlink()
                    path.with_name(f".{path.name}.lock").unlink(missing_ok=True)
        except SandboxError as exc:
            lines.append(f"{record.lane} ({record.workspace}): {exc}")
            continue
        lines.append(f"{record.lane} ({record.workspace}): {describe(report)}")
    return lines
