"""Tool description overrides (`tool-descriptions.toml`): model-facing text only, never a tool.

```toml
bash = "Run a shell command in the project. Prefer the test runner in scripts/test."
read_file = "Read a file; always read before you edit."
```
"""

from __future__ import annotations

from .. import tomlfile
from ..errors import ConfigError
from .layers import MAX_DESCRIPTIONS_BYTES as MAX_DESCRIPTIONS_BYTES

MAX_DESCRIPTION_CHARS = 8_000


def parse_descriptions(data: bytes) -> dict[str, str]:
    """Tool name -> description, or a ConfigError saying what is wrong with the file."""
    import tomli  # here: most sessions have no such file

    try:
        raw = tomlfile.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError("not UTF-8 text") from None
    except tomli.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}") from None
    out: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(value, str):
            raise ConfigError(f"{name}: a description is a string, not {type(value).__name__}")
        if not value.strip():
            raise ConfigError(f"{name}: the description is empty")
        if len(value) > MAX_DESCRIPTION_CHARS:
            raise ConfigError(f"{name}: the description is over {MAX_DESCRIPTION_CHARS} characters")
        out[name] = value
    return out
