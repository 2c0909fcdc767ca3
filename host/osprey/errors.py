"""The project's error types. Foreign errors (httpx, gRPC, TOML) are mapped into these at the boundary."""

from __future__ import annotations


class OspreyError(Exception):
    """An error a user can act on: the message says what was wrong and what to do."""

    # What recovering the ToolService's home did after this error (set by the home's client), or "".
    recovery: str = ""


class ConfigError(OspreyError):
    """A configuration file, variable or flag is invalid."""


class ProviderError(OspreyError):
    """A model provider failed to produce a turn."""

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        # Seconds the server asked to wait before trying again (its Retry-After header).
        self.retry_after = retry_after


class DispatcherError(OspreyError):
    """The ToolService cannot be reached (socket gone, lane dead)."""


class ToolError(OspreyError):
    """A tool call failed; `category` is a stable name such as not_found or outside_root."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category
        self.message = message


class ToolTimeout(ToolError):
    """The ToolService did not answer a call before its deadline; the call was cancelled."""

    def __init__(self, message: str) -> None:
        super().__init__("timeout", message)


class SandboxError(OspreyError):
    """A sandbox lane could not be built, started, reached or removed."""
