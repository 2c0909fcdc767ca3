"""Which Docker engine lanes run on, how it is reached, and whether it is this machine's own.

    target = resolve_engine(settings.engine, os.environ)  # a context, DOCKER_HOST and its TLS, or the default socket
    client = connect(target)                               # a docker SDK client that trusts the engine's CA only
    engine = identify(client, target)                      # its id and name; local or remote, by asking

The engine is named, in this order, by `[sandbox] engine` (a Docker context's name), by
`DOCKER_CONTEXT`, by `DOCKER_HOST` with `DOCKER_TLS_VERIFY` and `DOCKER_CERT_PATH` (`ca.pem`,
`cert.pem` and `key.pem` in it, `~/.docker` by default), else by the default socket. An engine
over TCP must be reached with TLS (anyone who reaches a plain TCP engine controls its machine),
except on this machine's loopback; `ssh://USER@HOST` runs `docker system dial-stdio` there over one
SSH connection (paramiko, with your `~/.ssh/config`, keys, agent and `known_hosts`: a host key it
does not know is refused).

Whether an engine over TCP or SSH is local is asked of it, not read from its address: it is this
machine's when it is the engine that answers on this machine's default socket (the same engine
id), whose bind mounts see this machine's files. A TCP address on loopback can name a remote
engine (a tunnel), and a host name can name this machine's. An engine on a unix socket is this
machine's (a rootless or a desktop engine); name one reached through a forwarded socket with its
`ssh://` address instead.

A client made here verifies a TLS engine against the CA of its own settings, whatever
`REQUESTS_CA_BUNDLE` or `CURL_CA_BUNDLE` say: requests would let those replace the CA on every
call, so the client does not take its settings from the environment (nor proxies from it).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from ..errors import SandboxError
from .images import _short

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
ENGINE_TIMEOUT_S = 120.0
# How long asking the default socket's engine for its id may take before it counts as absent.
LOCAL_PROBE_TIMEOUT_S = 3.0
_MAX_HOST_CHARS = 2048


class EngineTarget(BaseModel):
    """How an engine is reached."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(max_length=_MAX_HOST_CHARS, description="unix://, tcp:// or ssh:// address")
    tls_verify: bool = False
    cert_path: str | None = Field(None, description="ca.pem, cert.pem and key.pem for TLS")
    source: str = Field(description="what named it: [sandbox] engine, DOCKER_CONTEXT, DOCKER_HOST or the default")

    @property
    def scheme(self) -> Literal["unix", "tcp", "ssh"]:
        return self.host.split("://", 1)[0]  # type: ignore[return-value]  # checked when made

    @property
    def described(self) -> str:
        tls = " with TLS" if self.tls_verify else ""
        return f"{self.host}{tls} ({self.source})"


class Engine(BaseModel):
    """An engine as it describes itself, and whether it is this machine's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    version: str
    os: str
    architecture: str
    local: bool
    target: EngineTarget

    @property
    def described(self) -> str:
        where = "this machine's engine" if self.local else "a remote engine"
        return f"{where} {self.name!r} at {self.target.described}, Docker {self.version} on {self.os} {self.architecture}"


def resolve_engine(context: str | None, environ: Mapping[str, str]) -> EngineTarget:
    """The engine lanes use, from the `[sandbox] engine` setting (a context name) and the
    environment; a SandboxError that says what to fix when the settings cannot work."""
    name = context or environ.get("DOCKER_CONTEXT") or None
    if name and name != "default":
        return _context_target(name, "[sandbox] engine" if context else "DOCKER_CONTEXT")
    host = environ.get("DOCKER_HOST", "").strip()
    if not host:
        return EngineTarget(host=DEFAULT_SOCKET, source="the default socket")
    verify = environ.get("DOCKER_TLS_VERIFY", "") not in ("", "0")
    cert_path = environ.get("DOCKER_CERT_PATH") or (str(Path.home() / ".docker") if verify else None)
    return _checked(EngineTarget(host=_normal_host(host), tls_verify=verify, cert_path=cert_path, source="DOCKER_HOST"))


def _normal_host(host: str) -> str:
    if len(host) > _MAX_HOST_CHARS:
        raise SandboxError("DOCKER_HOST is too long to be an engine's address")
    if host.startswith("/"):
        return f"unix://{host}"
    if "://" not in host:
        return f"tcp://{host}"
    return host


def _context_target(name: str, source: str) -> EngineTarget:
    from docker.context import ContextAPI
    from docker.errors import ContextException

    try:
        context = ContextAPI.get_context(name)
    except ContextException as exc:
        raise SandboxError(f"the Docker context {name!r} ({source}) cannot be read: {exc}") from None
    if context is None:
        raise SandboxError(f"there is no Docker context named {name!r} ({source}); `docker context ls` lists them")
    tls = context.TLSConfig
    cert_path = None
    if tls is not None and getattr(tls, "ca_cert", None):
        cert_path = str(Path(tls.ca_cert).parent)
    return _checked(EngineTarget(host=_normal_host(context.Host or DEFAULT_SOCKET), tls_verify=tls is not None and bool(tls.verify),
                                 cert_path=cert_path, source=f"{source} {name!r}"))


def _checked(target: EngineTarget) -> EngineTarget:
    parts = urlsplit(target.host)
    if parts.scheme not in ("unix", "tcp", "ssh"):
        raise SandboxError(f"the engine address {target.host!r} ({target.source}) is not unix://, tcp:// or ssh://")
    if parts.scheme == "tcp":
        if not parts.hostname or not parts.port:
            raise SandboxError(f"the engine address {target.host!r} ({target.source}) needs a host and a port, e.g. tcp://build-1:2376")
        if not target.tls_verify and not _loopback(parts.hostname):
            raise SandboxError(
                f"the engine at {target.host} ({target.source}) would be reached over TCP without TLS, so anyone on the network "
                "could run containers on it; set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH (ca.pem, cert.pem, key.pem), "
                "or use ssh://USER@HOST")
    if target.tls_verify:
        missing = [f for f in ("ca.pem", "cert.pem", "key.pem") if not Path(target.cert_path or "", f).is_file()]
        if missing:
            raise SandboxError(
                f"TLS to the engine at {target.host} ({target.source}) needs {', '.join(missing)} in "
                f"{target.cert_path} (DOCKER_CERT_PATH): copy the engine's CA and your client certificate and key there")
    return target


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def connect(target: EngineTarget, *, timeout: float = ENGINE_TIMEOUT_S) -> Any:
    """A docker SDK client for the engine (not yet asked anything)."""
    from ..lazy import imported

    # The SDK imports PyYAML (through paramiko and invoke), which frontmatter readers import in
    # other threads: its first import goes through the one lock they take (`lazy.imported`).
    docker = imported("docker")

    kwargs: dict[str, Any] = {"base_url": target.host, "timeout": timeout, "version": "auto"}
    if target.tls_verify:
        directory = Path(target.cert_path or "")
        kwargs["tls"] = _pinned_tls()(ca_cert=str(directory / "ca.pem"),
                                      client_cert=(str(directory / "cert.pem"), str(directory / "key.pem")), verify=True)
    # ssh:// goes through paramiko (one connection, ~2 ms a call); the SDK's other mode starts an
    # `ssh` process for every call (~0.5 s each).
    try:
        return docker.DockerClient(**kwargs)
    except docker.errors.DockerException as exc:
        raise SandboxError(_no_answer(target, exc)) from None


def _pinned_tls() -> type:
    from docker.tls import TLSConfig

    class PinnedTLS(TLSConfig):
        """TLS that verifies against the engine's CA only: requests would let REQUESTS_CA_BUNDLE
        or CURL_CA_BUNDLE replace a session's `verify` on every call while the session trusts the
        environment, and the docker SDK sets only the session's."""

        def configure_client(self, client: Any) -> None:
            super().configure_client(client)
            client.trust_env = False

    return PinnedTLS


def identify(client: Any, target: EngineTarget) -> Engine:
    """What the engine says of itself, and whether it is the one on this machine's default socket."""

    try:
        info = client.info()
    except Exception as exc:  # noqa: BLE001 - the SDK's, requests' and ssl's errors all mean the same here
        raise SandboxError(_no_answer(target, exc)) from None
    engine_id = str(info.get("ID") or "")
    local = target.scheme == "unix" or (bool(engine_id) and engine_id == local_engine_id())
    return Engine(id=engine_id, name=str(info.get("Name") or "?"), version=str(info.get("ServerVersion") or "?"),
                  os=str(info.get("OperatingSystem") or "?"), architecture=str(info.get("Architecture") or "?"),
                  local=local, target=target)


def open_engine(context: str | None, environ: Mapping[str, str]) -> tuple[Any, Engine]:
    """The engine the settings and environment name: a client for it, and what it is."""
    target = resolve_engine(context, environ)
    client = connect(target)
    return client, identify(client, target)


def local_client() -> Any:
    """A docker SDK client for the engine on this machine's default socket, whatever DOCKER_HOST
    says (the lane image is built there and copied to a remote engine)."""
    import docker

    if not os.path.exists(DEFAULT_SOCKET[len("unix://"):]):
        raise SandboxError("a lane on another machine needs its image from this machine's Docker engine, and none runs here "
                           f"({DEFAULT_SOCKET}); start one (`dockerd &`, or Docker Desktop) for `osprey sandbox build`")
    try:
        client = docker.DockerClient(base_url=DEFAULT_SOCKET, timeout=ENGINE_TIMEOUT_S, version="auto")
    except docker.errors.DockerException as exc:
        raise SandboxError(f"this machine's Docker engine ({DEFAULT_SOCKET}) did not answer: {_short(exc)}") from None
    return client


def local_engine_id(socket_path: str = DEFAULT_SOCKET[len("unix://"):]) -> str | None:
    """The id of the engine on this machine's default socket; None when none answers there."""
    from .lanes import EngineAPI, EngineError

    if not os.path.exists(socket_path):
        return None
    try:
        info = EngineAPI(socket_path, timeout=LOCAL_PROBE_TIMEOUT_S)._json("GET", "/info")
    except (OSError, EngineError, SandboxError, ValueError):
        return None
    return str(info.get("ID")) if isinstance(info, dict) and info.get("ID") else None


def _no_answer(target: EngineTarget, exc: BaseException) -> str:
    return (f"no Docker engine answers at {target.described} ({_short(exc)}). Start it (e.g. `dockerd &` or Docker Desktop), "
            "check DOCKER_HOST, DOCKER_CONTEXT or [sandbox] engine, or run without --sandbox")


