"""Where a ToolService listens, as a `Connection` reaches it: a unix socket on this machine, or a
TCP port with TLS (a lane on another machine).

    UnixTarget(path="/run/osprey/tools.sock")
    TlsTarget(host="lane-7.build.example", port=7443, ca_pem=ca, client_cert_pem=cert, client_key_pem=key)
    TlsTarget.from_files("lanes.example", 7443, ca_file="ca.pem")

A TLS target always verifies the service's certificate against the CA it is given (never the
system's store: a lane's certificate comes from its own CA); a client certificate and key make
the connection mutual TLS; `server_name` checks the certificate against that name instead of
`host` (a lane reached by address whose certificate names the lane).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretBytes, ValidationError, field_validator, model_validator

from ..errors import ConfigError

# A certificate, chain or key larger than this is not one.
PEM_MAX_BYTES = 1024 * 1024
_HOST = re.compile(r"^[A-Za-z0-9._:-]{1,253}$")


class _Target(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built at first use: a session that calls no tool never makes one


class UnixTarget(_Target):
    """A ToolService on a unix socket of this machine."""

    kind: Literal["unix"] = "unix"
    path: str = Field(min_length=1, max_length=4096)

    @property
    def where(self) -> str:
        """How messages name it."""
        return self.path

    @property
    def grpc_target(self) -> str:
        return f"unix:{self.path}"


def _pem(value: bytes, what: str) -> bytes:
    if len(value) > PEM_MAX_BYTES or b"-----BEGIN " not in value:
        raise ValueError(f"the {what} is not PEM (a block between -----BEGIN and -----END lines)")
    return value


class TlsTarget(_Target):
    """A ToolService on a TCP port, reached with TLS; every call still presents the home's token."""

    kind: Literal["tls"] = "tls"
    host: str = Field(description="a host name or an IP address (IPv6 without brackets)")
    port: int = Field(ge=1, le=65535)
    ca_pem: bytes = Field(repr=False, description="the CA (PEM) the service's certificate must be signed by")
    client_cert_pem: bytes | None = Field(None, repr=False, description="for mutual TLS: this client's certificate chain (PEM)")
    client_key_pem: SecretBytes | None = Field(None, description="for mutual TLS: this client's private key (PEM)")
    server_name: str | None = Field(None, description="the name the service's certificate must carry, when it is not `host`")

    @field_validator("host", "server_name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _HOST.match(value):
            raise ValueError(f"{value!r} is not a host name or an IP address")
        return value

    @field_validator("ca_pem")
    @classmethod
    def _ca(cls, value: bytes) -> bytes:
        return _pem(value, "CA certificate")

    @field_validator("client_cert_pem")
    @classmethod
    def _cert(cls, value: bytes | None) -> bytes | None:
        return None if value is None else _pem(value, "client certificate")

    @field_validator("client_key_pem")
    @classmethod
    def _key(cls, value: SecretBytes | None) -> SecretBytes | None:
        if value is not None:
            _pem(value.get_secret_value(), "client key")
        return value

    @model_validator(mode="after")
    def _pair(self) -> TlsTarget:
        if (self.client_cert_pem is None) != (self.client_key_pem is None):
            raise ValueError("mutual TLS needs both a client certificate and its key (or neither)")
        return self

    @property
    def where(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def grpc_target(self) -> str:
        return self.where

    @property
    def mutual(self) -> bool:
        return self.client_cert_pem is not None

    @classmethod
    def from_files(cls, host: str, port: int, *, ca_file: str | Path, client_cert_file: str | Path | None = None,
                   client_key_file: str | Path | None = None, server_name: str | None = None) -> TlsTarget:
        """A target whose CA, client certificate and key are read from PEM files; a ConfigError
        says which file could not be used and why."""
        try:
            return cls(
                host=host, port=port, ca_pem=_read(ca_file, "CA"),
                client_cert_pem=_read(client_cert_file, "client certificate") if client_cert_file else None,
                client_key_pem=SecretBytes(_read(client_key_file, "client key")) if client_key_file else None,
                server_name=server_name,
            )
        except ValidationError as exc:
            problems = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
            raise ConfigError(f"the TLS settings for the ToolService at {host}:{port} are not usable: {problems}") from None


def _read(path: str | Path, what: str) -> bytes:
    from ..files import FileRefused, read_file

    try:
        data = read_file(path, PEM_MAX_BYTES, follow_symlinks=True)
    except FileRefused as exc:
        if exc.reason == "too_large":
            raise ConfigError(f"the TLS {what} file {path} is over {PEM_MAX_BYTES} bytes, so it is not a PEM file; check the path") from None
        if exc.reason == "not_regular":
            raise ConfigError(f"the TLS {what} file {path} is not a regular file; check the path") from None
        raise ConfigError(f"the TLS {what} file {path} cannot be read ({exc.strerror}); check the path and its permissions") from None
    if data is None:
        raise ConfigError(f"the TLS {what} file {path} cannot be read (no such file); check the path and its permissions")
    return data


ServiceTarget = Annotated[UnixTarget | TlsTarget, Field(discriminator="kind")]
