"""Sandbox lanes on this machine's Docker engine: `LocalDockerBackend`, the first `LaneBackend`
(`backend.py`), runs the sidecar in a locked-down container that sees only the workspace.

A lane is a container labelled with its owner (pid and boot id), session and workspace. The
workspace is bind-mounted at the same absolute path and the container runs as the uid:gid
that owns it, with no capabilities, no new privileges, a read-only root, a tmpfs /tmp,
limits on pids, memory and CPU, and no network unless asked. The sidecar listens on a unix
socket in a private host directory bind-mounted into the container, and refuses every call
without the lane's random token, which it reads from a file there (never from its command
line or environment, which `docker inspect` shows).

What only a local engine allows lives here and nowhere else: the same-path bind mounts of the
workspace and of the socket dir, finding the sidecar's pid through the socket (SO_PEERCRED), and
taking the lane's `/dev` out of its hands through `/proc/PID/root/dev`.

This module is imported only where a lane is made or reaped, so plain host runs never load
the docker SDK.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import re
import secrets
import shutil
import socket
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import SandboxSettings, size_bytes
from ..errors import SandboxError
from ..files import read_no_follow
from ..owners import boot_id, host_id, pid_alive, pid_namespace
from .backend import Lane, LaneBackend, LaneRequest, LaneState, Progress, quiet
from .client import Connection, accepts_connections
from .images import _short, docker_client, engine_key, ensure_image, known_lane_image, recipe_fingerprint

LABEL = "osprey.lane"
SOCKET_IN_LANE = "/run/osprey"
SOCKET_NAME = "tools.sock"
TOKEN_NAME = "token"
LOG_LINES = 20
# How often a starting lane's container is asked whether it exited (only to fail early with its logs).
STATE_CHECK_S = 0.25
SOCKET_POLL_S = 0.002

# One Docker client per engine address and one checked image per (engine, base) for the whole
# process: a lane start then costs no ping, no version query and no image inspection. The image
# tag names its content, so a cached one stays right; one removed meanwhile is checked again.
_cache_lock = threading.Lock()
_clients: dict[tuple[str, ...], Any] = {}
_images: dict[tuple[tuple[str, ...], str | None], str] = {}


def _engine_key() -> tuple[str, ...]:
    return engine_key()


def lane_client() -> Any:
    """This process's Docker client for lanes (made, and the engine pinged, once per engine)."""
    key = _engine_key()
    with _cache_lock:
        client = _clients.get(key)
    if client is not None:
        return client
    client = docker_client()
    with _cache_lock:
        kept = _clients.setdefault(key, client)
    if kept is not client:
        client.close()
    return kept


def _cached_image(base: str | None) -> str | None:
    with _cache_lock:
        return _images.get((_engine_key(), base))


def _remember_image(base: str | None, tag: str | None) -> None:
    with _cache_lock:
        if tag is None:
            _images.pop((_engine_key(), base), None)
        else:
            _images[(_engine_key(), base)] = tag


# --- the engine's API, as a lane's start and end use it ---------------------------------------------

DOCKER_SOCKET = "/var/run/docker.sock"
# An engine answer larger than this is not one of the small JSON documents a lane asks for.
ENGINE_REPLY_MAX_BYTES = 8 * 1024 * 1024
ENGINE_TIMEOUT_S = 120.0


class EngineError(Exception):
    """The engine refused a call: its HTTP status and its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{message} (HTTP {status})")
        self.status = status
        self.message = message


def local_engine_socket() -> str | None:
    """The engine's unix socket when the environment names one (or none, the default) without
    TLS; None when the docker SDK must be used (TCP, SSH, TLS, a context)."""
    if os.environ.get("DOCKER_TLS_VERIFY") or os.environ.get("DOCKER_CERT_PATH") or os.environ.get("DOCKER_CONTEXT"):
        return None
    host = os.environ.get("DOCKER_HOST", "")
    if not host:
        return DOCKER_SOCKET
    if host.startswith("unix://") and len(host) > len("unix://"):
        return host[len("unix://"):]
    return None


class EngineAPI:
    """The engine calls of a lane's start, watch and end, over the engine's unix socket with the
    standard library's HTTP client: a lane start pays no docker SDK import and no client set-up
    (about 180 ms of a fresh process's time, much of it holding the GIL the session's own start-up
    needs). Each call opens its own connection, so calls from several threads never share one."""

    def __init__(self, socket_path: str, timeout: float = ENGINE_TIMEOUT_S) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None, query: Mapping[str, str] | None = None) -> bytes:
        import http.client
        import json
        from urllib.parse import quote, urlencode

        class UnixConnection(http.client.HTTPConnection):
            def connect(conn) -> None:  # noqa: N805 - the inner class's own self
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(self.timeout)
                try:
                    sock.connect(self.socket_path)
                except OSError:
                    sock.close()
                    raise
                conn.sock = sock

        url = quote(path) + ("?" + urlencode(query) if query else "")
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        conn = UnixConnection("localhost", timeout=self.timeout)
        try:
            conn.request(method, url, body=payload, headers=headers)
            reply = conn.getresponse()
            data = reply.read(ENGINE_REPLY_MAX_BYTES + 1)
        except (OSError, http.client.HTTPException) as exc:
            raise SandboxError(f"no Docker engine answers on {self.socket_path} ({exc or type(exc).__name__}). Start it (e.g. `dockerd &` or "
                               "Docker Desktop), check DOCKER_HOST, or run without --sandbox") from None
        finally:
            conn.close()
        if len(data) > ENGINE_REPLY_MAX_BYTES:
            raise SandboxError(f"the Docker engine's answer to {method} {path} is over {ENGINE_REPLY_MAX_BYTES} bytes")
        if reply.status >= 400:
            try:
                message = str(json.loads(data).get("message", ""))
            except (ValueError, AttributeError):
                message = data[:300].decode("utf-8", "replace")
            raise EngineError(reply.status, message[:300] or reply.reason)
        return data

    def _json(self, method: str, path: str, body: Any = None, query: Mapping[str, str] | None = None) -> Any:
        import json

        data = self._call(method, path, body, query)
        return json.loads(data) if data else None

    def create_container(self, config: Mapping[str, Any], name: str) -> str:
        return str(self._json("POST", "/containers/create", config, {"name": name})["Id"])

    def start(self, container_id: str) -> None:
        self._call("POST", f"/containers/{container_id}/start")

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        return dict(self._json("GET", f"/containers/{container_id}/json"))

    def remove_container(self, container_id: str) -> None:
        self._call("DELETE", f"/containers/{container_id}", query={"force": "1"})

    def lanes(self) -> list[dict[str, Any]]:
        """Every container labelled as a lane, running or not, with its labels."""
        import json

        return list(self._json("GET", "/containers/json", query={"all": "1", "filters": json.dumps({"label": [LABEL]})}))

    def logs(self, container_id: str, lines: int) -> str:
        data = self._call("GET", f"/containers/{container_id}/logs", query={"stdout": "1", "stderr": "1", "tail": str(lines)})
        return _demultiplexed(data).decode("utf-8", "replace").strip()


class SdkEngineAPI(EngineAPI):
    """The same calls through a docker SDK client: an engine reached over TCP, SSH or TLS, or a
    client a caller hands in."""

    def __init__(self, client: Any) -> None:
        super().__init__("")
        self.client = client

    def _sdk(self, call: Callable[[], Any]) -> Any:
        import docker

        try:
            return call()
        except docker.errors.APIError as exc:
            raise EngineError(exc.status_code or 500, str(exc.explanation or exc)[:300]) from None
        except docker.errors.DockerException as exc:
            raise SandboxError(f"the Docker engine did not answer: {_short(exc)}") from None

    def create_container(self, config: Mapping[str, Any], name: str) -> str:
        return str(self._sdk(lambda: self.client.api.create_container_from_config(dict(config), name=name))["Id"])

    def start(self, container_id: str) -> None:
        self._sdk(lambda: self.client.api.start(container_id))

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        return dict(self._sdk(lambda: self.client.api.inspect_container(container_id)))

    def remove_container(self, container_id: str) -> None:
        self._sdk(lambda: self.client.api.remove_container(container_id, force=True))

    def lanes(self) -> list[dict[str, Any]]:
        return list(self._sdk(lambda: self.client.api.containers(all=True, filters={"label": LABEL})))

    def logs(self, container_id: str, lines: int) -> str:
        return bytes(self._sdk(lambda: self.client.api.logs(container_id, tail=lines))).decode("utf-8", "replace").strip()


def _demultiplexed(data: bytes) -> bytes:
    """The output in a container's log stream (no TTY: 8-byte frame headers, then the bytes)."""
    out, at = bytearray(), 0
    while at + 8 <= len(data) and data[at] in (0, 1, 2) and data[at + 1:at + 4] == b"\0\0\0":
        size = struct.unpack(">I", data[at + 4:at + 8])[0]
        out += data[at + 8:at + 8 + size]
        at += 8 + size
    return bytes(out) if at else data


def engine_api(client: Any | None = None) -> EngineAPI:
    """How lanes reach the engine: `client` (a docker SDK client) if given; else the engine's unix
    socket directly when it has one; else this process's shared SDK client (`lane_client`)."""
    if client is not None:
        return SdkEngineAPI(client)
    path = local_engine_socket()
    return EngineAPI(path) if path is not None else SdkEngineAPI(lane_client())


def create_config(image: str, run_options: Mapping[str, Any]) -> dict[str, Any]:
    """The engine's container-create document for a lane's run options (`lane_run_options`):
    what the docker SDK sends for them, field for field (tests/test_lane_startup.py compares)."""
    volumes: Mapping[str, Mapping[str, str]] = run_options["volumes"]
    host_config = {
        "Binds": [f"{host}:{mount['bind']}:{mount['mode']}" for host, mount in volumes.items()],
        "CapDrop": list(run_options["cap_drop"]),
        "Memory": run_options["mem_limit"],
        "MemorySwap": run_options["memswap_limit"],
        "NanoCpus": run_options["nano_cpus"],
        "NetworkMode": run_options["network_mode"],
        "PidsLimit": run_options["pids_limit"],
        "ReadonlyRootfs": bool(run_options["read_only"]),
        "SecurityOpt": list(run_options["security_opt"]),
        "ShmSize": size_bytes(run_options["shm_size"]),
        "Tmpfs": dict(run_options["tmpfs"]),
    }
    return {
        "Image": image,
        "Cmd": list(run_options["command"]),
        "User": run_options["user"],
        "WorkingDir": run_options["working_dir"],
        "Env": [f"{key}={value}" for key, value in run_options["environment"].items()],
        "Labels": dict(run_options["labels"]),
        "Volumes": {mount["bind"]: {} for mount in volumes.values()},
        "AttachStdin": False, "AttachStdout": True, "AttachStderr": True, "OpenStdin": False, "StdinOnce": False, "Tty": False,
        "NetworkDisabled": False,
        "HostConfig": host_config,
    }


def _owner_alive(labels: dict[str, str]) -> bool:
    if labels.get("osprey.owner_host", host_id()) != host_id():
        return True  # a broker on another machine shares this engine: its lanes are not ours to judge
    if labels.get("osprey.boot_id") != boot_id():
        return False
    if labels.get("osprey.pid_ns", pid_namespace()) != pid_namespace():
        return True  # another pid namespace (a broker in a container): its pids mean nothing here
    try:
        pid = int(labels.get("osprey.owner_pid", "0"))
    except ValueError:
        return False
    return pid_alive(pid)


_SOCKET_DIR_NAME = re.compile(r"lane-([0-9]{1,10})-[A-Za-z0-9_]{8}")


def runtime_dir() -> Path:
    """Where lane socket dirs live: a real directory owned by this user, mode 0700."""
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()) / f"osprey-{os.geteuid()}"
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(base)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        # Someone else's directory or a symlink here could redirect our sockets and tokens.
        raise SandboxError(f"{base} is not a private directory of this user (a symlink, another owner, or open permissions); remove it and retry")
    return base


@dataclass(kw_only=True)
class LocalDockerLane(Lane):
    """A lane on the local engine: `id` is its container's id; its socket and token are in `socket_dir`."""

    socket_dir: Path
    token: str

    @property
    def container_id(self) -> str:
        return self.id

    @property
    def socket_path(self) -> str:
        return str(self.socket_dir / SOCKET_NAME)


def workspace_owner(workspace: str) -> tuple[int, int]:
    st = os.stat(workspace)
    uid, gid = st.st_uid, st.st_gid
    if os.geteuid() != 0 and uid != os.geteuid():
        # Only root can hand the socket dir to another user; run as ourselves instead.
        uid, gid = os.geteuid(), os.getegid()
    return uid, gid


def _logs_of(api: EngineAPI, container_id: str, lines: int = LOG_LINES) -> str:
    try:
        return api.logs(container_id, lines)
    except Exception:  # noqa: BLE001 - the container may already be gone
        return ""


def list_lanes(client: Any | None = None) -> list[dict[str, Any]]:
    """Live and orphaned lanes with their labels and whether their owner still runs."""
    from ..owners import host_id

    client = client or docker_client()
    out = []
    for c in client.containers.list(all=True, filters={"label": LABEL}):
        labels = c.labels or {}
        elsewhere = labels.get("osprey.owner_host", host_id()) != host_id()
        out.append({
            "id": c.short_id, "name": c.name, "status": c.status, "session": labels.get("osprey.session", ""),
            "workspace": labels.get("osprey.workspace", ""), "owner_pid": labels.get("osprey.owner_pid", ""),
            "owner_alive": None if elsewhere else _owner_alive(labels), "image": labels.get("osprey.image", ""),
            "gateway": bool(labels.get("osprey.gateway")), "owner_host": labels.get("osprey.owner_host", ""),
        })
    return out


def reap_orphans(client: Any | None = None, *, api: EngineAPI | None = None) -> list[str]:
    """Remove lanes whose owner process is gone (or from an earlier boot), with their socket dirs.

    One engine call lists them with their labels (no inspection per container). `client` is a
    docker SDK client to use, `api` an engine connection (default: `engine_api()`)."""
    api = api or engine_api(client)
    removed = []
    for c in api.lanes():
        labels = c.get("Labels") or {}
        if _owner_alive(labels):
            continue
        try:
            api.remove_container(c["Id"])
        except (EngineError, SandboxError):
            continue  # gone already, or not ours to remove: it must not stop this start
        remove_socket_dir(labels.get("osprey.socket_dir", ""))
        names = c.get("Names") or [c["Id"][:12]]
        removed.append(names[0].lstrip("/"))
    sweep_socket_dirs()
    return removed


def sweep_socket_dirs() -> list[Path]:
    """Remove the socket dirs whose owner process is gone: a broker killed between removing its
    lane and its socket dir (a second Ctrl-C) leaves one that no container label names any more.
    The owner's pid is in the dir's name (`lane-PID-XXXXXXXX`), which only this user can set."""
    try:
        base = runtime_dir()
        entries = list(os.scandir(base))
    except (OSError, SandboxError):
        return []
    removed = []
    for entry in entries:
        owner = _SOCKET_DIR_NAME.fullmatch(entry.name)
        if owner is None or not entry.is_dir(follow_symlinks=False) or pid_alive(int(owner.group(1))):
            continue
        remove_socket_dir(entry.path)
        if not os.path.lexists(entry.path):
            removed.append(Path(entry.path))
    return removed


def remove_socket_dir(path: str | Path) -> None:
    if not path:
        return
    p = Path(path)
    # Only ever remove what looks like one of our own socket dirs.
    if p.name.startswith("lane-") and p.parent.name.startswith("osprey-"):
        try:
            os.chmod(p, 0o700)  # the sidecar sealed it read-only
        except OSError:
            pass
        shutil.rmtree(p, ignore_errors=True)


PROTECTED = (".git", ".gitmodules", ".osprey", ".claude/hooks")
# Files the extension programs name that a lane sees read-only: at most this many, each found
# through at most this many manifests of this size.
MAX_EXTENSION_FILES = 128
MAX_EXTENSION_MANIFESTS = 200
EXTENSION_MANIFEST_BYTES = 64 * 1024
_PROJECT_DIR_VARIABLE = re.compile(r"\$(?:\{(?:OSPREY|CLAUDE)_PROJECT_DIR\}|(?:OSPREY|CLAUDE)_PROJECT_DIR(?![A-Za-z0-9_]))")


MAX_SUBMODULES = 256
GITMODULES_MAX_BYTES = 256 * 1024


def _inside(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip(os.sep) + os.sep)


def _submodule_gitfiles(workspace: str) -> list[str]:
    """The `.git` of each submodule `.gitmodules` names: a lane that rewrote one (`gitdir:` a
    directory it made) would have `git status` in the superproject run that directory's config."""
    raw = read_no_follow(os.path.join(workspace, ".gitmodules"), GITMODULES_MAX_BYTES)
    out: list[str] = []
    for line in (raw or b"").decode("utf-8", "replace").splitlines():
        key, sep, value = line.strip().partition("=")
        if not sep or key.strip() != "path":
            continue
        gitfile = os.path.normpath(os.path.join(workspace, value.strip(), ".git"))
        if _inside(gitfile, workspace) and os.path.lexists(gitfile) and not os.path.islink(gitfile):
            out.append(gitfile)
        if len(out) >= MAX_SUBMODULES:
            break
    return out


def _extension_commands(workspace: str, home: Path | None) -> list[tuple[str, list[str]]]:
    """(base directory, words) of each command the hooks files and tool manifests of the
    workspace's `.osprey` and of Osprey's home run on the host: words split the way a shell would
    (roughly; what a lane writes is also checked against its trust pin before each run)."""
    import shlex

    from .. import tomlfile

    out: list[tuple[str, list[str]]] = []
    for layer in [os.path.join(workspace, ".osprey"), *([str(home)] if home is not None else [])]:
        raw = read_no_follow(os.path.join(layer, "hooks.toml"), EXTENSION_MANIFEST_BYTES)
        try:
            hooks = tomlfile.loads(raw.decode("utf-8")).get("hooks", {}) if raw else {}
        except (ValueError, UnicodeDecodeError):
            hooks = {}
        for groups in hooks.values() if isinstance(hooks, dict) else ():
            for group in groups if isinstance(groups, list) else ():
                for entry in group.get("hooks", []) if isinstance(group, dict) and isinstance(group.get("hooks"), list) else ():
                    command = entry.get("command") if isinstance(entry, dict) else None
                    if isinstance(command, str):
                        command = _PROJECT_DIR_VARIABLE.sub(lambda _: workspace, command)
                        try:
                            words = shlex.split(command, comments=True)
                        except ValueError:
                            words = command.split()
                        out.append((workspace, [w for word in words for w in re.split(r"[;&|<>()]+", word) if w]))
        tools = os.path.join(layer, "tools")
        try:
            names = sorted(name for name in os.listdir(tools) if name.endswith(".toml"))[:MAX_EXTENSION_MANIFESTS]
        except OSError:
            names = []
        for name in names:
            raw = read_no_follow(os.path.join(tools, name), EXTENSION_MANIFEST_BYTES)
            try:
                command = tomlfile.loads(raw.decode("utf-8")).get("command") if raw else None
            except (ValueError, UnicodeDecodeError):
                command = None
            if isinstance(command, list) and all(isinstance(word, str) for word in command):
                out.append((tools, list(command)))
    return out


def extension_files(workspace: str, home: Path | None) -> list[str]:
    """The workspace files that the project's and the user's hooks and custom tools name (a
    script, an interpreter's argument, `--option=FILE`): a lane must not rewrite what runs on
    the host."""
    found: list[str] = []
    for base, words in _extension_commands(workspace, home):
        for word in words:
            value = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
            if not value or "\x00" in value:
                continue
            for directory in (base, workspace):
                real = os.path.realpath(os.path.join(directory, value))
                if _inside(real, workspace) and os.path.isfile(real) and real not in found:
                    found.append(real)
            if len(found) >= MAX_EXTENSION_FILES:
                return found
    return found


def protected_paths(workspace: str, options: SandboxSettings, home: Path | None = None) -> list[str]:
    """The workspace paths a lane sees read-only: what would let it get code run on the host
    (git's config and hooks, submodules' git files, Osprey's project files, `.claude/hooks`, and
    the files the project's and the user's hooks and custom tools name). Empty with
    `protect_git = false`."""
    if not options.protect_git:
        return []
    out = []
    for name in PROTECTED:
        path = os.path.join(workspace, name)
        if "/" in name:
            real = os.path.realpath(path)
            if os.path.exists(real) and _inside(real, workspace) and real not in out:
                out.append(real)
        elif os.path.islink(path):
            # A link into the workspace: protect what it names (the link itself lies in a
            # directory the lane can write; `changed_paths` reports a replaced link).
            real = os.path.realpath(path)
            if _inside(real, workspace) and os.path.exists(real):
                out.append(real)
        elif os.path.lexists(path):
            out.append(path)
    out += [p for p in _submodule_gitfiles(workspace) if p not in out]
    return out + [p for p in extension_files(workspace, home) if p not in out and not any(_inside(p, q) for q in out)]


def protected_state(workspace: str) -> dict[str, str | None]:
    """What each protected name is at the workspace's top: absent (None), a link (its target),
    or present (""); compared at the end of a lane by `changed_paths`."""
    state: dict[str, str | None] = {}
    for name in PROTECTED:
        path = os.path.join(workspace, name)
        if os.path.islink(path):
            try:
                state[path] = "-> " + os.readlink(path)
            except OSError:
                state[path] = "-> ?"
        else:
            state[path] = "" if os.path.lexists(path) else None
    return state


def changed_paths(workspace: str, options: SandboxSettings, before: Mapping[str, str | None]) -> list[str]:
    """Protected names a lane made or relinked (the mounts cover only what existed at its start)."""
    if not options.protect_git:
        return []
    now = protected_state(workspace)
    return [path for path, was in before.items() if now.get(path) != was and now.get(path) is not None]


def check_home_outside(workspace: str, options: SandboxSettings, home: Path | None) -> None:
    """A lane must not be able to write Osprey's home (settings, trust): refuse a workspace that
    holds it, unless it is in the workspace's existing `.osprey`, which lanes see read-only."""
    if home is None:
        return
    real = os.path.realpath(home)
    if real == workspace or _inside(real, workspace):
        osprey_dir = os.path.join(workspace, ".osprey")
        mounted = os.path.isdir(osprey_dir) and not os.path.islink(osprey_dir)
        if options.protect_git and mounted and (real == osprey_dir or _inside(real, osprey_dir)):
            return
        raise SandboxError(f"Osprey's home {real} is inside the workspace {workspace}, so a lane could rewrite your settings and trust; set OSPREY_HOME elsewhere, or run in a project directory")


def lane_run_options(image: str, workspace: str, session_id: str, options: SandboxSettings, socket_dir: Path,
                     home: Path | None = None) -> dict[str, Any]:
    """The docker run options of a lane: every hardening setting is here, in one place. `home`
    is Osprey's home, whose hooks and tools may name workspace files the lane must not rewrite."""
    uid, gid = workspace_owner(workspace)
    protected = {path: {"bind": path, "mode": "ro"} for path in protected_paths(workspace, options, home)}
    memory = size_bytes(options.memory_limit)
    return {
        "command": [
            "--socket", f"{SOCKET_IN_LANE}/{SOCKET_NAME}", "--root", workspace, "--token-file", f"{SOCKET_IN_LANE}/{TOKEN_NAME}",
            "--seal", SOCKET_IN_LANE, "--seal", "/dev", "--reap-strays",
        ],
        "name": f"osprey-lane-{session_id}",
        "user": f"{uid}:{gid}",
        "working_dir": workspace,
        "environment": {"HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"},
        "network_mode": "bridge" if options.network else "none",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "read_only": True,
        # /dev/mqueue is world-writable by default; a read-only tmpfs takes its place.
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={options.tmp_size},mode=1777", "/dev/mqueue": "ro,nosuid,nodev,noexec,size=4k"},
        "shm_size": "64m",
        "pids_limit": options.pids_limit,
        "mem_limit": memory,
        "memswap_limit": memory,
        "nano_cpus": int(options.cpus * 1e9),
        "volumes": {
            workspace: {"bind": workspace, "mode": "rw"},
            str(socket_dir): {"bind": SOCKET_IN_LANE, "mode": "rw"},
            **protected,
        },
        "labels": {
            LABEL: "1",
            "osprey.owner_pid": str(os.getpid()),
            "osprey.owner_host": host_id(),
            "osprey.boot_id": boot_id(),
            "osprey.pid_ns": pid_namespace(),
            "osprey.session": session_id,
            "osprey.workspace": workspace,
            "osprey.socket_dir": str(socket_dir),
            "osprey.image": image,
        },
    }


def make_socket_dir(workspace: str) -> tuple[Path, str]:
    """A private dir for the lane's socket, holding a fresh token file the lane's user can read."""
    base = runtime_dir()
    if os.path.commonpath([str(base), workspace]) == workspace:
        raise SandboxError(f"the workspace {workspace} contains Osprey's runtime directory {base}, so a lane would see other lanes' sockets; run in a project directory instead")
    prefix = f"lane-{os.getpid()}-"
    if len(str(base)) + len(f"/{prefix}XXXXXXXX/") + len(SOCKET_NAME) > 100:
        raise SandboxError(f"the runtime directory {base} is too long a path for a unix socket; set TMPDIR or XDG_RUNTIME_DIR to a shorter one")
    socket_dir = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    token = secrets.token_hex(32)
    token_path = socket_dir / TOKEN_NAME
    fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    uid, gid = workspace_owner(workspace)
    if os.geteuid() == 0 and uid != 0:
        os.chown(socket_dir, uid, gid)
        os.chown(token_path, uid, gid)
    return socket_dir, token


async def wait_lane_ready(api: EngineAPI, container_id: str, connection: Connection, socket_path: str, deadline_s: float) -> int | None:
    """Wait until the sidecar answers its health check; fail early, with the lane's logs, if
    the container exits. Returns the pid (in this pid namespace) of a process of the lane, for
    `lock_down`: the sidecar's, from its socket, else the container's from the engine.

    The socket is looked for every 2 ms (a connect, no engine call), and gRPC is used only once
    it accepts: a gRPC connection refused between the sidecar's bind and its listen would put
    the channel into its reconnect backoff, a second or so. The engine is asked whether the
    container exited only every 0.25 s, so a lane that starts sooner costs no engine call here."""
    start = time.monotonic()
    end = start + deadline_s
    state: asyncio.Future[dict[str, Any]] | None = None
    next_state_check = start + STATE_CHECK_S
    try:
        while True:
            if accepts_connections(socket_path) and await connection.healthy(timeout=0.5):
                pid = _listener_pid(socket_path)
                if pid is None:
                    attrs = await asyncio.to_thread(api.inspect_container, container_id)
                    pid = attrs.get("State", {}).get("Pid") or None
                return pid
            if state is not None and state.done():
                attrs, state = state.result(), None
                if attrs.get("State", {}).get("Status") in ("exited", "dead"):
                    raise SandboxError(f"the lane exited during start-up (exit code {attrs['State'].get('ExitCode')}); its last log lines:\n{await asyncio.to_thread(_logs_of, api, container_id) or '(none)'}")
            now = time.monotonic()
            if now > end:
                raise SandboxError(f"the lane did not answer within {deadline_s:g} s; its last log lines:\n{await asyncio.to_thread(_logs_of, api, container_id) or '(none)'}")
            if state is None and now >= next_state_check:
                next_state_check = now + STATE_CHECK_S
                state = asyncio.ensure_future(asyncio.to_thread(api.inspect_container, container_id))
            await asyncio.sleep(SOCKET_POLL_S)
    finally:
        if state is not None and not state.done():
            # The thread goes on; its answer is not wanted.
            state.cancel()


def _listener_pid(socket_path: str) -> int | None:
    """The pid of the process listening on `socket_path`, as this pid namespace sees it (None
    where the kernel cannot say: another pid namespace, or no SO_PEERCRED)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(socket_path)
            pid, _, _ = struct.unpack("3i", probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        except OSError:
            return None
    return pid or None


NOBODY = 65534


def lock_down(container: Any | None, socket_dir: Path, pid: int | None = None) -> None:
    """After start-up, take the socket dir and /dev out of the lane's hands.

    The sidecar seals both (mode 0555), but their owner could chmod them back. A host running as
    root hands them to `nobody`, which the lane's user (root without capabilities included) can
    neither write to nor chmod. Without root on the host the seal is all there is. `pid` is the
    container's main pid when known (else `container`, a docker SDK container, is asked).
    """
    # The broker holds the token in memory. The sidecar has sealed the dir, which, without
    # root, we own too: open it just long enough to delete the file.
    os.chmod(socket_dir, 0o700)
    (socket_dir / TOKEN_NAME).unlink(missing_ok=True)
    os.chmod(socket_dir, 0o555)
    if os.geteuid() != 0:
        return
    if pid is None and container is not None:
        container.reload()
        pid = container.attrs.get("State", {}).get("Pid")
    targets = [socket_dir] + ([Path(f"/proc/{pid}/root/dev")] if pid else [])
    for target in targets:
        os.chown(target, NOBODY, NOBODY)
        os.chmod(target, 0o555 if target == socket_dir else 0o755)


class _NameTaken(Exception):
    """The lane's container name belongs to another container (an orphan not reaped yet)."""


class _ImageGone(Exception):
    """The cached lane image is no longer on the engine."""


async def _quietly(task: asyncio.Future[Any]) -> None:
    """Wait for a housekeeping task whose failure must not fail a lane start."""
    try:
        await task
    except Exception:  # noqa: BLE001 - reaping is best effort; the next start tries again
        pass


def _known_image(base: str | None, home: Path | None) -> str | None:
    """The lane image this process checked, or one an earlier process checked for the same
    recipe files (`known_lane_image`); None when it must be checked (`_lane_image`)."""
    cached = _cached_image(base)
    if cached is None:
        cached = known_lane_image(home, recipe_fingerprint(base, _engine_key()))
        if cached is not None:
            _remember_image(base, cached)
    return cached


async def _lane_image(options: SandboxSettings, progress: Progress, home: Path | None) -> str:
    """The lane image checked against the engine (built when missing), and recorded for this
    process and later ones."""
    import docker  # only here: a start whose image is known never loads the SDK

    client = await asyncio.to_thread(lane_client)
    cancel = threading.Event()
    # A first build can take a minute; Ctrl-C must stop it rather than wait for it.
    build = asyncio.ensure_future(asyncio.to_thread(lambda: ensure_image(client, options.base_image, progress=progress, home=home, cancel=cancel)))
    try:
        image = await asyncio.shield(build)
    except asyncio.CancelledError:
        cancel.set()
        try:
            await build
        except Exception:  # noqa: BLE001 - the cancelled build's own error
            pass
        raise
    except docker.errors.DockerException as exc:
        raise SandboxError(f"preparing the lane failed: {_short(exc)}") from None
    _remember_image(options.base_image, image)  # and `ensure_image` recorded it for later processes
    return image


@dataclass
class _Started:
    """A lane container created and started, not yet answering."""

    image: str
    socket_dir: Path
    token: str
    protected: dict[str, str | None]
    container_id: str


def _start_lane(api: EngineAPI, image: str | None, request: LaneRequest, workspace: str) -> _Started | None:
    """Everything of a lane start up to its container running, in one thread (so that a busy
    event loop, such as a session setting itself up, does not delay each step): the image,
    the socket dir and token, the protected paths, create and start. None when the image is not
    known yet (`_lane_image` checks it first); a socket dir made is removed again on failure."""
    options, home = request.options, request.home
    image = image or _known_image(options.base_image, home)
    if image is None:
        return None
    check_home_outside(workspace, options, home)
    socket_dir, token = make_socket_dir(workspace)
    try:
        protected = protected_state(workspace)
        container_id = _create_and_start(api, image, workspace, request.session_id, options, socket_dir, home)
    except BaseException:
        remove_socket_dir(socket_dir)
        raise
    return _Started(image=image, socket_dir=socket_dir, token=token, protected=protected, container_id=container_id)


async def _start_lane_shielded(api: EngineAPI, image: str | None, request: LaneRequest, workspace: str,
                               prepared: concurrent.futures.Future[_Started | None] | None = None) -> _Started | None:
    # Handed to a thread at once (not through a task that would wait for the loop's next turn),
    # or taken over from `prepare_lane`. The thread finishes even if we are cancelled meanwhile;
    # wait for it, so that a container it made is removed with its socket dir.
    start = asyncio.wrap_future(prepared) if prepared is not None else \
        asyncio.get_running_loop().run_in_executor(None, _start_lane, api, image, request, workspace)
    try:
        return await asyncio.shield(start)
    except asyncio.CancelledError:
        try:
            started = await start
        except Exception:  # noqa: BLE001 - it failed on its own; nothing to remove
            raise asyncio.CancelledError from None
        if started is not None:
            await asyncio.to_thread(_force_remove, api, started.container_id)
            remove_socket_dir(started.socket_dir)
        raise


# Lane starts a front end began before its session asked (`prepare_lane`), by workspace and session.
_prepared_lock = threading.Lock()
_Prepared = tuple[LaneRequest, EngineAPI, "concurrent.futures.Future[_Started | None]"]
_prepared: dict[tuple[str, str], _Prepared] = {}
_discard_at_exit: list[bool] = []
PREPARED_EXIT_WAIT_S = 30.0


def prepare_lane(request: LaneRequest) -> None:
    """Begin the start of the lane `request` describes now, in a thread: its image, socket dir,
    container create and start. A front end calls this as soon as its settings are known, before
    the session's own set-up (imports, journal, provider, tool sources), and the session's lane
    (`LocalDockerBackend.provision` of the same request) takes it over and waits only for the
    sidecar to answer. A start not taken over is removed when `discard_prepared_lanes` runs (at
    the latest when the process exits). Where the image is not known yet the thread does
    nothing, and the session's start checks or builds it as usual."""
    workspace = os.path.realpath(request.workspace)
    request = request.model_copy(update={"workspace": workspace})
    future: concurrent.futures.Future[_Started | None] = concurrent.futures.Future()
    with _prepared_lock:
        if (workspace, request.session_id) in _prepared:
            return
        if not _discard_at_exit:
            atexit.register(discard_prepared_lanes)
            _discard_at_exit.append(True)
        api = engine_api() if local_engine_socket() is not None else None
        if api is None:
            return  # an engine reached through the SDK: making its client is the slow part; leave it to the session
        _prepared[(workspace, request.session_id)] = (request, api, future)

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(_start_lane(api, None, request, workspace))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever takes the start over
            future.set_exception(exc)

    threading.Thread(target=run, name="osprey-lane-prepare", daemon=True).start()


async def _take_prepared(request: LaneRequest) -> concurrent.futures.Future[_Started | None] | None:
    """The start `prepare_lane` began for this very request, if any. One begun for the same
    workspace and session with other settings is removed (it holds the lane's name)."""
    with _prepared_lock:
        found = _prepared.pop((request.workspace, request.session_id), None)
    if found is None:
        return None
    if found[0] != request:
        await asyncio.to_thread(_discard, found)
        return None
    return found[2]


def _discard(prepared: _Prepared) -> None:
    _, api, future = prepared
    try:
        started = future.result(timeout=PREPARED_EXIT_WAIT_S)
    except BaseException:  # noqa: BLE001 - it failed, or is stuck: nothing made to remove
        return
    if started is not None:
        try:
            _force_remove(api, started.container_id)
        except SandboxError:
            pass  # the next start reaps it: its owner is gone by then
        remove_socket_dir(started.socket_dir)


def discard_prepared_lanes() -> None:
    """Remove the lanes `prepare_lane` began that no session took over (their containers and
    socket dirs); runs at exit too."""
    with _prepared_lock:
        left = list(_prepared.values())
        _prepared.clear()
    for prepared in left:
        _discard(prepared)


def _create_and_start(api: EngineAPI, image: str, workspace: str, session_id: str, options: SandboxSettings, socket_dir: Path,
                      home: Path | None = None) -> str:
    """Create the lane's container with all its options in one call and start it (two engine
    calls: no inspection in between); its id."""
    run_options = lane_run_options(image, workspace, session_id, options, socket_dir, home)
    name = run_options["name"]
    try:
        container_id = api.create_container(create_config(image, run_options), name)
    except EngineError as exc:
        if exc.status == 404:
            raise _ImageGone() from None  # the only thing a create cannot find is its image
        if exc.status == 409:
            raise _NameTaken() from None
        raise SandboxError(f"the lane container could not be created: {_short(exc)}") from None
    try:
        api.start(container_id)
    except EngineError as exc:
        _force_remove(api, container_id)
        raise SandboxError(f"the lane container could not start: {_short(exc)}") from None
    return container_id


def _force_remove(api: EngineAPI, container_id: str) -> None:
    try:
        api.remove_container(container_id)
    except EngineError as exc:
        if exc.status != 404:
            raise SandboxError(f"the lane container {container_id[:12]} could not be removed: {_short(exc)}") from None


class LocalDockerBackend(LaneBackend):
    """Lanes as containers of the Docker engine on this machine (DOCKER_HOST and its TLS
    variables pick which; the engine must see this machine's file system, since the workspace
    and the socket dir are bind-mounted at the same paths).

    `client` is a docker SDK client to use; by default the engine's unix socket is spoken to
    directly (`engine_api`), and the SDK is loaded only to build an image or reach an engine
    over the network."""

    def __init__(self, client: Any | None = None) -> None:
        self._client = client
        self._api: EngineAPI | None = None

    async def _engine(self) -> EngineAPI:
        if self._api is None:
            self._api = engine_api(self._client) if self._client is not None or local_engine_socket() is not None \
                else await asyncio.to_thread(engine_api)
        return self._api

    async def provision(self, request: LaneRequest, *, progress: Progress = quiet) -> LocalDockerLane:
        """A fresh lane, ready to answer; everything is removed again on failure.

        Orphaned lanes are reaped (`reap`) while this one starts; the checked image is reused
        across starts, and across processes while the recipe's files are unchanged."""
        workspace = os.path.realpath(request.workspace)
        options, home, session_id = request.options, request.home, request.session_id
        api = await self._engine()
        reaping = asyncio.ensure_future(self.reap())
        socket_dir: Path | None = None
        container_id: str | None = None
        connection = None
        try:
            name = f"osprey-lane-{session_id}"
            image: str | None = None
            started: _Started | None = None
            prepared = await _take_prepared(request.model_copy(update={"workspace": workspace})) if self._client is None else None
            for attempt in range(2):
                try:
                    started = await _start_lane_shielded(api, image, request, workspace, prepared if not attempt else None)
                    if started is None:  # the image is not known yet: check it (or build it), then start
                        image = await _lane_image(options, progress, home)
                        started = await _start_lane_shielded(api, image, request, workspace)
                    break
                except _NameTaken:
                    if attempt:
                        raise SandboxError(f"the lane container could not be created: the name {name} is taken by another container") from None
                    await _quietly(reaping)  # an orphan of the same name is being removed
                except _ImageGone:
                    if attempt:
                        raise SandboxError(f"the lane image {image or _cached_image(options.base_image)} disappeared during start-up") from None
                    _remember_image(options.base_image, None)
                    image = await _lane_image(options, progress, home)
            assert started is not None
            image, socket_dir, token, protected, container_id = started.image, started.socket_dir, started.token, started.protected, started.container_id
            socket_path = str(socket_dir / SOCKET_NAME)
            connection = Connection(socket_path, token=token)
            pid = await wait_lane_ready(api, container_id, connection, socket_path, options.ready_timeout)
            if pid is None:
                attrs = await asyncio.to_thread(api.inspect_container, container_id)
                pid = attrs.get("State", {}).get("Pid") or None
            lock_down(None, socket_dir, pid)  # no engine call: only the file system
            await _quietly(reaping)
            return LocalDockerLane(id=container_id, name=name, workspace=workspace, image=image, connection=connection,
                                   protected=protected, socket_dir=socket_dir, token=token)
        except BaseException:
            if connection is not None:
                await connection.close()
            if container_id is not None:
                await asyncio.to_thread(_force_remove, api, container_id)
            if socket_dir is not None:
                remove_socket_dir(socket_dir)
            await _quietly(reaping)
            raise

    async def state(self, lane: Lane) -> LaneState:
        try:
            api = await self._engine()
            attrs = await asyncio.to_thread(api.inspect_container, lane.id)
        except EngineError as exc:
            if exc.status == 404:
                return LaneState(running=False, gone=True)
            raise SandboxError(f"the Docker engine could not say how the lane is: {_short(exc)}") from None
        except SandboxError:
            return LaneState(running=False, gone=True)
        state = attrs.get("State") or {}
        exit_code = state.get("ExitCode")
        return LaneState(running=bool(state.get("Running")), paused=bool(state.get("Paused")), oom_killed=bool(state.get("OOMKilled")),
                         exit_code=exit_code if isinstance(exit_code, int) else None)

    async def logs(self, lane: Lane, lines: int = LOG_LINES) -> str:
        try:
            api = await self._engine()
        except SandboxError:
            return ""
        return await asyncio.to_thread(_logs_of, api, lane.id, lines)

    async def destroy(self, lane: Lane) -> None:
        """Remove the lane's container and socket dir; safe to call twice."""
        await lane.connection.close()
        try:
            api = await self._engine()
            await asyncio.to_thread(_force_remove, api, lane.id)
        finally:
            if isinstance(lane, LocalDockerLane):
                remove_socket_dir(lane.socket_dir)

    async def reap(self) -> list[str]:
        """Remove lanes whose owner process is gone (or from an earlier boot), with their socket dirs."""
        api = await self._engine()
        return await asyncio.to_thread(reap_orphans, api=api)

    def protected_changes(self, request: LaneRequest, before: Mapping[str, str | None]) -> list[str]:
        return changed_paths(request.workspace, request.options, before)
