"""Configuration: the one place that reads environment variables, `.env` and config files.

Precedence, lowest to highest:
1. built-in defaults
2. the global file `$OSPREY_HOME/config.toml` (`OSPREY_HOME` defaults to `~/.osprey`)
3. the nearest project file `.osprey/config.toml`, searching up from the working directory
4. environment variables (`OSPREY_PROVIDER`, `OSPREY_MODEL`, `OSPREY_BASE_URL`, `OSPREY_EFFORT`,
   `OSPREY_MAX_TURNS`, `OSPREY_APPROVAL_POLICY`)
5. command-line flags

`.env` files (the working directory's, then `$OSPREY_HOME/.env`) only fill variables the real
environment does not already set; that is where API keys usually live.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from .errors import ConfigError

ProviderName = Literal["openai", "anthropic", "replay"]
Effort = Literal["minimal", "low", "medium", "high"]
ApprovalPolicy = Literal["on-request", "on-failure", "unless-trusted", "deny-untrusted", "never"]

DEFAULT_MODELS = {"openai": "gpt-4.1", "anthropic": "claude-sonnet-4-5", "replay": "replay"}
DEFAULT_BASE_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com/v1"}
API_KEY_VARS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}

ENV_KEYS = {
    "OSPREY_PROVIDER": "provider",
    "OSPREY_MODEL": "model",
    "OSPREY_BASE_URL": "base_url",
    "OSPREY_EFFORT": "effort",
    "OSPREY_MAX_TURNS": "max_turns",
    "OSPREY_APPROVAL_POLICY": "approval_policy",
}


# Variables that hold credentials; commands the model runs never see them.
_SECRET_NAME = re.compile(r"(API_?KEY|ACCESS_KEY|PRIVATE_KEY|TOKEN|PASSWORD|PASSWD|CREDENTIALS?)$|SECRET|^(OSPREY|OPENAI|ANTHROPIC)_", re.IGNORECASE)


def tool_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for commands the model runs on the host: this one without credentials."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if not _SECRET_NAME.search(k)}


def load_home(environ: Mapping[str, str] | None = None) -> Path:
    """`$OSPREY_HOME`, or `~/.osprey`."""
    env = os.environ if environ is None else environ
    return Path(env.get("OSPREY_HOME") or Path(env.get("HOME", "~")).expanduser() / ".osprey").expanduser()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolResultLimits(_Strict):
    """How much of a tool's output reaches the model."""

    max_chars: int = Field(50_000, ge=1_000, le=10_000_000)
    bash_max_output_bytes: int = Field(1024 * 1024, ge=4_096, le=64 * 1024 * 1024)


class RetrySettings(_Strict):
    """One logical model turn: a deadline across the first request and its retries."""

    max_retries: int = Field(3, ge=0, le=10)
    delays: list[float] = Field(default_factory=lambda: [1.0, 5.0, 15.0])
    turn_timeout: float = Field(300.0, gt=0)
    connect_timeout: float = Field(10.0, gt=0)


class SandboxSettings(_Strict):
    """Sandbox lanes: the Docker container the ToolService runs in with --sandbox."""

    enabled: bool = False
    base_image: str | None = Field(None, description="image to build the lane on; default: Osprey's own Debian base")
    network: bool = Field(False, description="allow egress from the lane")
    memory_limit: str = Field("2g", pattern=r"^[0-9]+[bkmg]?$")
    pids_limit: int = Field(512, ge=16, le=1_000_000)
    cpus: float = Field(2.0, gt=0, le=256)
    tmp_size: str = Field("512m", pattern=r"^[0-9]+[bkmg]?$")
    ready_timeout: float = Field(30.0, gt=0, le=600)
    socket: str | None = Field(None, description="attach to a lane already serving on this socket")
    token_file: str | None = Field(None, description="with socket: the file holding that lane's token")


class ProviderOverrides(_Strict):
    base_url: str | None = None
    api_key_env: str | None = None
    model: str | None = None


class FileConfig(_Strict):
    """Everything a config.toml may hold; unknown keys are errors."""

    provider: ProviderName | None = None
    model: str | None = None
    base_url: str | None = None
    effort: Effort | None = None
    max_turns: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    approval_policy: ApprovalPolicy | None = None
    replay_file: str | None = None
    tool_results: ToolResultLimits = Field(default_factory=ToolResultLimits)
    retry: RetrySettings = Field(default_factory=RetrySettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    providers: dict[ProviderName, ProviderOverrides] = Field(default_factory=dict)


class Settings(_Strict):
    """The resolved configuration of one run."""

    home: Path
    cwd: Path
    provider: ProviderName
    model: str
    base_url: str | None
    api_key: SecretStr | None
    effort: Effort | None
    max_turns: int
    max_tokens: int
    approval_policy: ApprovalPolicy
    replay_file: Path | None
    tool_results: ToolResultLimits
    retry: RetrySettings
    sandbox: SandboxSettings
    sources: list[str] = Field(default_factory=list, description="files that contributed, lowest precedence first")


def parse_dotenv(text: str) -> dict[str, str]:
    """KEY=VALUE lines; `export`, quotes and `#` comments as shells write them."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key.replace("_", "").isalnum():
            continue
        value = value.strip()
        if value[:1] in ("'", '"') and value.endswith(value[0]) and len(value) >= 2:
            value = value[1:-1]
        else:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
    return values


def _load_toml(path: Path) -> dict[str, Any]:
    import tomli

    try:
        with path.open("rb") as fh:
            data = tomli.load(fh)
    except tomli.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    try:
        FileConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, str(path))) from None
    return data


def _describe(exc: ValidationError, where: str) -> str:
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            problems.append(f"unknown key '{key}'")
        else:
            problems.append(f"key '{key}': {err['msg']} (got {err.get('input')!r})")
    return f"{where}: " + "; ".join(problems) + ". See docs/configuration.md for the keys and their values."


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def find_project_config(cwd: Path, home: Path) -> Path | None:
    """The nearest `.osprey/config.toml` at or above `cwd` that is not the global one."""
    global_file = (home / "config.toml").resolve()
    for directory in [cwd, *cwd.parents]:
        candidate = directory / ".osprey" / "config.toml"
        if candidate.is_file() and candidate.resolve() != global_file:
            return candidate
    return None


def load_environment(cwd: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The real environment, filled in from `.env` files where it is silent."""
    env = dict(environ)
    home = load_home(env)
    for dotenv in (cwd / ".env", home / ".env"):
        if dotenv.is_file():
            try:
                parsed = parse_dotenv(dotenv.read_text(encoding="utf-8", errors="replace"))
            except OSError as exc:
                raise ConfigError(f"{dotenv}: cannot be read: {exc.strerror}") from None
            for key, value in parsed.items():
                env.setdefault(key, value)
    return env


def load_settings(
    cwd: Path | str | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    need_provider: bool = True,
) -> Settings:
    """Resolve the settings of one run; `flags` holds only the options given on the command line.

    With `need_provider=False` (commands that call no model) a missing API key is no error."""
    cwd = Path(cwd or os.getcwd()).resolve()
    if not cwd.is_dir():
        raise ConfigError(f"working directory {cwd} does not exist or is not a directory")
    env = load_environment(cwd, os.environ if environ is None else environ)
    home = load_home(env)

    merged: dict[str, Any] = {}
    sources: list[str] = []
    for path in (home / "config.toml", find_project_config(cwd, home)):
        if path is not None and path.is_file():
            merged = _merge(merged, _load_toml(path))
            sources.append(str(path))

    from_env: dict[str, Any] = {}
    for var, key in ENV_KEYS.items():
        if env.get(var):
            from_env[key] = env[var]
    try:
        FileConfig.model_validate(from_env)
    except ValidationError as exc:
        names = {v: k for k, v in ENV_KEYS.items()}
        msg = _describe(exc, "environment")
        for key, var in names.items():
            msg = msg.replace(f"key '{key}'", f"variable {var}")
        raise ConfigError(msg) from None
    merged = _merge(merged, from_env)
    merged = _merge(merged, {k: v for k, v in (flags or {}).items() if v is not None})
    try:
        fc = FileConfig.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, "command line")) from None

    provider: str = fc.provider or ("replay" if fc.replay_file else "openai")
    overrides = fc.providers.get(provider, ProviderOverrides())  # type: ignore[call-overload]
    model = fc.model or overrides.model or DEFAULT_MODELS[provider]
    base_url = fc.base_url or overrides.base_url
    api_key = None
    if provider in API_KEY_VARS:
        key_var = overrides.api_key_env or API_KEY_VARS[provider]
        if env.get(key_var):
            api_key = SecretStr(env[key_var])
        elif base_url is None and need_provider:
            raise ConfigError(
                f"{key_var} is not set: put it in the environment or in a .env file, "
                f"or point --base-url at a server that needs no key"
            )
        base_url = base_url or DEFAULT_BASE_URLS[provider]
    replay_file = None
    if provider == "replay" and need_provider:
        if not fc.replay_file:
            raise ConfigError("the replay provider needs a recorded session: pass --replay FILE")
        replay_file = (cwd / fc.replay_file).resolve() if not Path(fc.replay_file).is_absolute() else Path(fc.replay_file)
        if not replay_file.is_file():
            raise ConfigError(f"replay file {replay_file} does not exist")
    return Settings(
        home=home,
        cwd=cwd,
        provider=provider,  # type: ignore[arg-type]
        model=model,
        base_url=base_url.rstrip("/") if base_url else None,
        api_key=api_key,
        effort=fc.effort,
        max_turns=fc.max_turns or 150,
        max_tokens=fc.max_tokens or 16_384,
        approval_policy=fc.approval_policy or "deny-untrusted",
        replay_file=replay_file,
        tool_results=fc.tool_results,
        retry=fc.retry,
        sandbox=fc.sandbox,
        sources=sources,
    )
