"""Reading TOML with bounded nesting, and writing the TOML files Osprey keeps under $OSPREY_HOME
(trust, saved approvals): a small TOML writer for the values they hold, and a crash-atomic replace."""

from __future__ import annotations

import math
import os
import re
import secrets
from collections.abc import Mapping
from contextlib import suppress
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any

MAX_NESTING = 32  # arrays and tables inside each other; no file Osprey reads needs more than a few

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def loads(text: str) -> dict[str, Any]:
    """Parse TOML like `tomli.loads`, refusing a document nested more than MAX_NESTING levels deep
    with a `tomli.TOMLDecodeError` (a few KB of brackets would otherwise end in a RecursionError)."""
    import tomli

    try:
        data = tomli.loads(text)
    except RecursionError:
        raise tomli.TOMLDecodeError(f"arrays or tables are nested more than {MAX_NESTING} levels deep", text, 0) from None
    if _too_deep(data):
        raise tomli.TOMLDecodeError(f"arrays or tables are nested more than {MAX_NESTING} levels deep", text, 0)
    return data


def _too_deep(data: object) -> bool:
    pending: list[tuple[object, int]] = [(data, 0)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth >= MAX_NESTING:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False


def toml_string(text: str) -> str:
    """A TOML basic string; ValueError for text that is not valid Unicode (lone surrogates)."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"{text!r} cannot be written to a file: it is not valid Unicode text (an undecodable file name?)")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else toml_string(key)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ("nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")) if not math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            return value.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"
        return value.isoformat()
    if isinstance(value, (date, time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    raise ValueError(f"a {type(value).__name__} cannot be written as TOML")


def _is_table(value: Any) -> bool:
    """Mappings holding mappings become [tables]; flat ones stay inline."""
    return isinstance(value, Mapping) and any(isinstance(v, Mapping) for v in value.values())


def _dump_table(lines: list[str], prefix: list[str], table: Mapping[str, Any]) -> None:
    plain = [(k, v) for k, v in table.items() if not _is_table(v)]
    nested = [(k, v) for k, v in table.items() if _is_table(v)]
    if prefix and (plain or not nested):
        lines.append("")
        lines.append("[" + ".".join(toml_key(p) for p in prefix) + "]")
    for key, value in plain:
        lines.append(f"{toml_key(str(key))} = {toml_value(value)}")
    for key, value in nested:
        _dump_table(lines, [*prefix, str(key)], value)


def dumps_toml(data: Mapping[str, Any]) -> str:
    """TOML text for `data`: nested mappings as [tables], the rest as values."""
    lines: list[str] = []
    _dump_table(lines, [], data)
    return "\n".join(lines).lstrip("\n") + "\n"


def temporary_name(path: Path) -> Path:
    """Where `write_atomic` stages `path`: `NAME.<16 hex digits>.tmp` beside it."""
    return path.with_name(f"{path.name}.{secrets.token_hex(8)}.tmp")


TEMPORARY_PATTERN = r"\.[0-9a-f]{16}\.tmp"


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so that a crash leaves the old file or the new one, never a mix:
    a 0600 temporary file beside it, fsync, rename, fsync of the directory. Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    replace_file(path, text.encode("utf-8"), 0o600)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def replace_file(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` with `data` (file mode `mode`): a staged file beside it, fsync, rename; the
    staged file is removed when anything fails. Raises OSError."""
    tmp = temporary_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
