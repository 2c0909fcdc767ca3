"""Reading a config.toml that a command is about to change (`osprey mcp add`, `/moa-config`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import tomlfile
from ..errors import ConfigError
from ..files import read_bounded


def read_for_edit(path: Path, what: str) -> tuple[str, dict[str, Any]]:
    """The file's text and its parsed data (both empty when there is no file). A file that is not
    UTF-8 or not valid TOML is a ConfigError saying that `what` (its MCP servers, its presets)
    cannot be changed until it is fixed."""
    import tomli

    raw = read_bounded(path, "a config file")
    if raw is None:
        return "", {}
    try:
        text = raw.decode("utf-8")
        return text, tomlfile.loads(text)
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text, so {what} cannot be changed here; fix it first") from None
    except tomli.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}), so {what} cannot be changed here; fix it first") from None
