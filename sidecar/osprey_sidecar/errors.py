"""The one error type tool implementations raise, with stable category names."""

from __future__ import annotations

# Stable category names; the host maps them to its own error type.
NOT_FOUND = "not_found"
OUTSIDE_ROOT = "outside_root"
BINARY_FILE = "binary_file"
INVALID_ARGUMENT = "invalid_argument"
NO_MATCH = "no_match"
AMBIGUOUS_MATCH = "ambiguous_match"
IS_DIRECTORY = "is_directory"
NOT_A_DIRECTORY = "not_a_directory"
PERMISSION_DENIED = "permission_denied"
IO_ERROR = "io_error"
UNAUTHENTICATED = "unauthenticated"
TIMEOUT = "timeout"


class ToolFailure(Exception):
    """A tool call that cannot be carried out; the message says what to do instead."""

    def __init__(self, category: str, message: str) -> None:
        super().__init__(message)
        self.category = category
        self.message = message


def from_os_error(exc: OSError, shown: str) -> ToolFailure:
    """Translate an OSError on `shown` (the path as the caller gave it)."""
    import errno

    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOENT:
        return ToolFailure(NOT_FOUND, f"{shown}: no such file or directory")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ToolFailure(PERMISSION_DENIED, f"{shown}: {reason}")
    if exc.errno == errno.EISDIR:
        return ToolFailure(IS_DIRECTORY, f"{shown} is a directory; use list_directory or tree for directories")
    if exc.errno == errno.ENOTDIR:
        return ToolFailure(NOT_A_DIRECTORY, f"{shown}: a part of the path is not a directory")
    return ToolFailure(IO_ERROR, f"{shown}: {reason}")
