"""Configuration: the one place that reads environment variables, `.env` and config files.

Layers, lowest precedence first:
1. built-in defaults
2. the global file `$OSPREY_HOME/config.toml` (`OSPREY_HOME` comes from the real environment only;
   default `~/.osprey`)
3. project files `.osprey/config.toml`, from the workspace root down to the working directory
4. `OSPREY_*` variables from `$OSPREY_HOME/.env`, then from the working directory's `.env`
5. `OSPREY_*` variables in the real environment
6. command-line flags

The workspace is untrusted: project files and the workspace `.env` (the *project layers*) may not
loosen guarded settings (approvals, the sandbox, where requests and credentials go, the shell
environment policy) unless the user trusted those exact files with `osprey trust`. Such keys are
ignored with a warning in `Settings.warnings`.
"""

from __future__ import annotations

import copy
import fnmatch
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from .errors import ConfigError

ProviderName = Literal["openai", "anthropic", "replay"]
Effort = Literal["minimal", "low", "medium", "high"]
ApprovalPolicy = Literal["on-request", "on-failure", "unless-trusted", "deny-untrusted", "never"]
Inherit = Literal["all", "core", "none"]

DEFAULT_MODELS = {"openai": "gpt-4.1", "anthropic": "claude-sonnet-4-5", "replay": "replay"}
DEFAULT_BASE_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com/v1"}
API_KEY_VARS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
DEFAULT_APPROVAL_POLICY: ApprovalPolicy = "deny-untrusted"
# The TUI's default: a person is there to answer the asks.
INTERACTIVE_APPROVAL_POLICY: ApprovalPolicy = "on-request"
# Loosest first: how much runs before a person says yes. A project may only move rightwards.
APPROVAL_STRICTNESS: tuple[ApprovalPolicy, ...] = ("never", "on-failure", "unless-trusted", "on-request", "deny-untrusted")
INHERIT_STRICTNESS: tuple[Inherit, ...] = ("all", "core", "none")

MAX_FILE_BYTES = 1024 * 1024  # config files, .env files and trust.toml

# Model turns a task may take before it ends MaxContinuations, unless configured: a headless run
# stops at 150; the terminal UI, where a person watches and can stop it, effectively never.
HEADLESS_MAX_TURNS = 150
INTERACTIVE_MAX_TURNS = 4_294_967_295

ENV_KEYS = {
    "OSPREY_PROVIDER": "provider",
    "OSPREY_MODEL": "model",
    "OSPREY_BASE_URL": "base_url",
    "OSPREY_EFFORT": "effort",
    "OSPREY_MAX_TURNS": "max_turns",
    "OSPREY_APPROVAL_POLICY": "approval_policy",
}


# ---------------------------------------------------------------------------------------------
# The environment of host commands


CORE_VARIABLES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_*", "TERM", "TMPDIR", "TZ", "PWD")
_HARMLESS = frozenset({"PWD", "OLDPWD", "TOKENIZERS_PARALLELISM"})
_SECRET_WORDS = (
    "KEY|KEYS|APIKEY|TOKEN|TOKENS|SECRET|SECRETS|PASSWORD|PASSWD|PWD|PASS|PASSPHRASE|PAT|JWT|DSN|AUTH|"
    "AUTHORIZATION|CREDENTIAL|CREDENTIALS|COOKIE|COOKIES|SESSION|PRIVATE|SIGNING|WEBHOOK"
)
_SECRET_NAME = re.compile(
    rf"(?:^|_)(?:{_SECRET_WORDS})(?:_|$)"  # a whole word of the name: GITHUB_PAT, CI_JOB_JWT, MYSQL_PWD
    r"|(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$"  # glued on at the end: GITHUBTOKEN, NPMKEY
    r"|SECRET|PASSWORD|PASSWD|CREDENTIAL"  # anywhere
    r"|^(?:OSPREY|OPENAI|ANTHROPIC)_|^(?:SSH_AUTH_SOCK|KUBECONFIG)$",
    re.IGNORECASE,
)
_URL_PASSWORD = re.compile(r"://[^/@\s:]*:[^/@\s]*@")  # scheme://user:password@host
_TOKEN_FORMAT = re.compile(
    r"^(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_|glpat-|xox[abposr]-|sk-[A-Za-z0-9_\-]{16,}|AKIA[0-9A-Z]{16}$|npm_[A-Za-z0-9]{30,})"
)
_SECRET_PARAMS = ("password", "passwd", "pwd", "token", "secret", "key", "signature", "sig")


def is_secret_name(name: str) -> bool:
    """Whether a variable's name says it holds a credential (`PWD`, `TOKENIZERS_PARALLELISM` do not)."""
    return name not in _HARMLESS and bool(_SECRET_NAME.search(name))


def is_secret_value(value: str) -> bool:
    """Whether a value carries a credential itself: a URL with a password (in its user part or a
    `password=`-like parameter), or a well-known token format."""
    if _TOKEN_FORMAT.match(value):
        return True
    if "://" not in value:
        return False
    if _URL_PASSWORD.search(value):
        return True
    for part in re.split(r"[?&;]", value)[1:]:
        name, _, given = part.partition("=")
        if given and name.lower().endswith(_SECRET_PARAMS):
            return True
    return False


def _matches(name: str, patterns: Iterable[str]) -> bool:
    folded = name.upper()
    return any(fnmatch.fnmatchcase(folded, p.upper()) for p in patterns)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ShellEnvironmentPolicy(_Strict):
    """Which variables commands the model runs on the host see (`bash`, `process`).

    Applied in order: inherit, the default credential filter (except `passthrough` names),
    `exclude`, `include_only`, then `set`."""

    inherit: Inherit = Field("all", description="start from all variables, the core set, or none")
    exclude: list[str] = Field(default_factory=list, description="glob patterns of names to drop (case-insensitive)")
    include_only: list[str] = Field(default_factory=list, description="when set, keep only names matching one of these globs")
    set: dict[str, str] = Field(default_factory=dict, description="fixed values, added last")
    passthrough: list[str] = Field(default_factory=list, description="names kept despite the credential filter, e.g. GH_TOKEN")

    @field_validator("exclude", "include_only")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if not pattern or "\0" in pattern or "=" in pattern:
                raise ValueError(f"{pattern!r} is not a pattern of variable names")
        return value

    @field_validator("passthrough")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _VAR_NAME.match(name):
                raise ValueError(f"{name!r} is not a variable name")
        return value

    @field_validator("set")
    @classmethod
    def _set_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _VAR_NAME.match(name):
                raise ValueError(f"{name!r} is not a variable name")
            if "\0" in text:
                raise ValueError(f"the value of {name} holds a NUL character")
        return value


def tool_environment(
    environ: Mapping[str, str] | None = None,
    policy: ShellEnvironmentPolicy | None = None,
    *,
    extra_secret_names: Iterable[str] = (),
) -> dict[str, str]:
    """The environment for commands the model runs on the host, by `policy` (default: all
    variables but credentials). `extra_secret_names` are dropped too (e.g. what `api_key_env` names)."""
    env = os.environ if environ is None else environ
    policy = policy or ShellEnvironmentPolicy()
    extra = {n.upper() for n in extra_secret_names}
    keep = frozenset(policy.passthrough)
    if policy.inherit == "all":
        out = dict(env)
    elif policy.inherit == "core":
        out = {k: v for k, v in env.items() if _matches(k, CORE_VARIABLES)}
    else:
        out = {}
    out = {
        k: v for k, v in out.items()
        if k in keep or not (is_secret_name(k) or k.upper() in extra or is_secret_value(v))
    }
    if policy.exclude:
        out = {k: v for k, v in out.items() if not _matches(k, policy.exclude)}
    if policy.include_only:
        out = {k: v for k, v in out.items() if _matches(k, policy.include_only)}
    out.update(policy.set)
    return out


def settings_tool_environment(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`tool_environment` for one run: its shell environment policy, its provider key variables dropped."""
    return tool_environment(environ, settings.shell_environment, extra_secret_names=settings.secret_env_names)


# ---------------------------------------------------------------------------------------------
# Settings


def load_home(environ: Mapping[str, str] | None = None) -> Path:
    """`$OSPREY_HOME`, or `~/.osprey`. Pass the real environment: never a `.env` file's values."""
    env = os.environ if environ is None else environ
    return Path(env.get("OSPREY_HOME") or Path(env.get("HOME", "~")).expanduser() / ".osprey").expanduser()


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
    protect_git: bool = Field(True, description="mount the workspace's .git and .osprey read-only in lanes; false lets a lane write them")


class WebSearchSettings(_Strict):
    """`web_search`: which search service answers it. The tool exists only when one is configured:
    Exa or Brave by an API key in the environment, SearXNG by its URL."""

    provider: Literal["auto", "exa", "brave", "searxng"] = Field("auto", description="auto prefers Exa, then Brave, then SearXNG")
    exa_api_key_env: str = Field("EXA_API_KEY", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,100}$")
    brave_api_key_env: str = Field("BRAVE_API_KEY", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,100}$")
    searxng_url: str | None = Field(None, description="a SearXNG instance, e.g. http://localhost:8888 (its JSON format must be enabled)")
    exa_url: str = Field("https://api.exa.ai", description="the Exa API")
    brave_url: str = Field("https://api.search.brave.com", description="the Brave Search API")


class ResolvedWebSearch(_Strict):
    """The search service a session uses (None when none is configured)."""

    provider: Literal["exa", "brave", "searxng"]
    url: str
    api_key: SecretStr | None = None


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
    shell_environment: ShellEnvironmentPolicy = Field(default_factory=ShellEnvironmentPolicy)
    providers: dict[ProviderName, ProviderOverrides] = Field(default_factory=dict)
    web_search: WebSearchSettings = Field(default_factory=WebSearchSettings)


class Settings(_Strict):
    """The resolved configuration of one run."""

    home: Path
    cwd: Path
    workspace_root: Path = Field(description="the workspace boundary: nearest ancestor of cwd holding .git, else cwd")
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
    shell_environment: ShellEnvironmentPolicy = Field(default_factory=ShellEnvironmentPolicy)
    web_search: ResolvedWebSearch | None = Field(None, description="the configured search service of web_search, if any")
    system_prompt_file: Path | None = Field(None, description="OSPREY_SYSTEM_PROMPT_FILE (the real environment only): replaces the base system prompt")
    tool_descriptions_file: Path | None = Field(None, description="OSPREY_TOOL_DESCRIPTIONS_FILE (the real environment only): overrides tool descriptions")
    secret_env_names: list[str] = Field(default_factory=list, description="variables holding provider keys; host commands never see them")
    sources: list[str] = Field(default_factory=list, description="files that contributed, lowest precedence first")
    warnings: list[str] = Field(default_factory=list, description="settings ignored and why; print each one")


# ---------------------------------------------------------------------------------------------
# Reading files


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n % (1024 * 1024) == 0 else f"{n} bytes"


def read_bounded(path: Path, what: str, limit: int = MAX_FILE_BYTES) -> bytes | None:
    """The bytes of the regular file at `path` (symlinks followed), or None when nothing or a
    directory is there. A FIFO, device or socket, or a file over `limit`, is a ConfigError; it is
    never read, or never read past `limit`."""
    not_regular = f"{path}: not a regular file, so it is not read as {what}; replace it with a regular file or remove it"
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        return None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(not_regular)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    data = bytearray()
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped after the stat above
            raise ConfigError(not_regular)
        while len(data) <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - len(data)))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ConfigError(f"{path}: larger than {_size(limit)}, the most Osprey reads as {what}; shorten it or remove it")
    return bytes(data)


def read_no_follow(path: Path | str, limit: int) -> bytes | None:
    """At most `limit` bytes of the regular file at `path`, or None for anything else: never
    through a symlink, never blocking on a FIFO. For small files that anyone may have written."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, limit) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


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


def _parse_toml(path: Path, raw: bytes) -> dict[str, Any]:
    import tomli

    try:
        data = tomli.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid TOML: the file is not UTF-8 text") from None
    except tomli.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
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
    return f"{where}: " + "; ".join(problems) + ". Run `osprey docs configuration` for the keys and their values."


def _env_settings(values: Mapping[str, str], where: str) -> dict[str, Any]:
    """The settings `OSPREY_*` variables give, checked, with errors naming the variable."""
    out = {key: values[var] for var, key in ENV_KEYS.items() if values.get(var)}
    try:
        FileConfig.model_validate(out)
    except ValidationError as exc:
        msg = _describe(exc, where)
        for var, key in ENV_KEYS.items():
            msg = msg.replace(f"key '{key}'", f"variable {var}")
        raise ConfigError(msg) from None
    return out


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


# ---------------------------------------------------------------------------------------------
# Project layers and what they may not change


def workspace_root(cwd: Path) -> Path:
    """The workspace boundary: the nearest directory at or above `cwd` holding `.git`, else `cwd`."""
    for directory in [cwd, *cwd.parents]:
        if os.path.lexists(directory / ".git"):
            return directory
    return cwd


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def find_project_configs(cwd: Path, home: Path, root: Path | None = None) -> list[Path]:
    """`.osprey/config.toml` paths from the workspace root down to `cwd` (farthest first),
    without the global file."""
    root = root or workspace_root(cwd)
    global_file = home / "config.toml"
    found = []
    for directory in reversed([cwd, *cwd.parents]):
        if directory != root and root not in directory.parents:
            continue
        candidate = directory / ".osprey" / "config.toml"
        if os.path.lexists(candidate) and not _same_file(candidate, global_file):
            found.append(candidate)
    return found


_MISSING = object()
REDIRECT = "change where requests and credentials go"
LOOSEN_SHELL = "loosen the shell environment policy"


@dataclass
class Guarded:
    """A guarded setting in a project layer that would loosen what the layers below it chose."""

    path: tuple[str, ...]
    value: Any
    reason: str


@dataclass
class Layer:
    """One source of settings; `project` layers need trust for guarded keys."""

    source: str
    data: dict[str, Any]
    path: Path | None = None
    project: bool = False
    relpath: str = ""
    digest: str = ""
    dotenv: bool = False
    guarded: list[Guarded] = field(default_factory=list)
    status: str = "untrusted"  # of a project layer: trusted, changed or untrusted

    def name(self, path: tuple[str, ...]) -> str:
        if self.dotenv:
            return {v: k for k, v in ENV_KEYS.items()}.get(path[0], path[0])
        return ".".join(path)


def _get(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, Mapping) or key not in data:
            return _MISSING
        data = data[key]
    return data


def _delete(data: dict[str, Any], path: tuple[str, ...]) -> None:
    for key in path[:-1]:
        data = data[key]
    del data[path[-1]]


def _folded(items: Iterable[str]) -> frozenset[str]:
    return frozenset(i.upper() for i in items)


def size_bytes(value: str) -> int:
    """A size such as "512m" or "2g" (docker's units) in bytes."""
    units = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
    value = value.lower()
    return int(value[:-1]) * units[value[-1]] if value[-1] in units else int(value)


def loosening(layer: Mapping[str, Any], below: FileConfig, default_policy: ApprovalPolicy = DEFAULT_APPROVAL_POLICY) -> list[Guarded]:
    """The guarded keys of `layer` whose values loosen `below` (the merged layers under it).

    A value equal to what is below, or stricter (a stricter approval policy, the sandbox on, its
    network off, more excluded variables), is not loosening; a new `set` variable always is."""
    found: list[Guarded] = []

    def check(path: tuple[str, ...], loosens: Callable[..., bool], reason: str) -> None:
        value = _get(layer, path)
        if value is not _MISSING and loosens(value):
            found.append(Guarded(path, value, reason))

    policy = below.approval_policy or default_policy
    check(("approval_policy",), lambda v: APPROVAL_STRICTNESS.index(v) < APPROVAL_STRICTNESS.index(policy), "lower the approval policy")
    for key in ("provider", "base_url", "replay_file"):
        check((key,), lambda v, key=key: v != getattr(below, key), REDIRECT)
    # Search queries (and the keys that go with them) must not be sent elsewhere by a project.
    ws = below.web_search
    for key in ("searxng_url", "exa_url", "brave_url", "exa_api_key_env", "brave_api_key_env", "provider"):
        check(("web_search", key), lambda v, key=key: v != getattr(ws, key), REDIRECT)
    providers = layer.get("providers")
    for name in providers if isinstance(providers, Mapping) else {}:
        theirs = below.providers.get(name) or ProviderOverrides()
        for key in ("base_url", "api_key_env"):
            check(("providers", name, key), lambda v, theirs=theirs, key=key: v != getattr(theirs, key), REDIRECT)
    sb = below.sandbox
    check(("sandbox", "enabled"), lambda v: sb.enabled and not v, "turn the sandbox off")
    check(("sandbox", "network"), lambda v: bool(v) and not sb.network, "give the sandbox network access")
    check(("sandbox", "protect_git"), lambda v: sb.protect_git and not v, "let lanes write .git and .osprey")
    check(("sandbox", "base_image"), lambda v: v != sb.base_image, "choose the lane's base image")
    check(("sandbox", "socket"), lambda v: v != sb.socket, "attach the run to another lane")
    check(("sandbox", "token_file"), lambda v: v != sb.token_file, "attach the run to another lane")
    # A lane's limits keep a runaway command (a fork bomb, a memory hog) from the host.
    for key, measure in (("memory_limit", size_bytes), ("tmp_size", size_bytes), ("pids_limit", float), ("cpus", float)):
        check(("sandbox", key), lambda v, key=key, measure=measure: measure(v) > measure(getattr(sb, key)), "raise the lane's resource limits")
    se = below.shell_environment
    check(("shell_environment", "inherit"),
          lambda v: INHERIT_STRICTNESS.index(v) < INHERIT_STRICTNESS.index(se.inherit), LOOSEN_SHELL)
    check(("shell_environment", "exclude"), lambda v: not _folded(se.exclude) <= _folded(v), LOOSEN_SHELL)
    check(("shell_environment", "include_only"),
          lambda v: bool(se.include_only) and (not v or not _folded(v) <= _folded(se.include_only)), LOOSEN_SHELL)
    check(("shell_environment", "passthrough"), lambda v: not frozenset(v) <= frozenset(se.passthrough), LOOSEN_SHELL)
    # Any fixed variable: PATH, BASH_ENV or LD_PRELOAD change what an approved command runs.
    fixed = _get(layer, ("shell_environment", "set"))
    for name in fixed if isinstance(fixed, Mapping) else {}:
        check(("shell_environment", "set", name), lambda v, name=name: se.set.get(name) != v, LOOSEN_SHELL)
    return found


@dataclass
class _Sources:
    home: Path
    root: Path
    layers: list[Layer]  # config-shaped, lowest precedence first (flags not included)
    env: dict[str, str]  # the real environment filled in from the .env files
    warnings: list[str]


def _digest(raw: bytes) -> str:
    from .trust import digest

    return digest(raw)


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def _collect(cwd: Path, environ: Mapping[str, str], *, whole_dotenv: bool = False) -> _Sources:
    """Read every layer below the flags; nothing is judged yet. With `whole_dotenv`, a `.env`
    layer holds all its `OSPREY_*` values, even those the real environment overrides now."""
    real = dict(environ)
    home = load_home(real)
    root = workspace_root(cwd)
    layers: list[Layer] = []
    warnings: list[str] = []

    global_file = home / "config.toml"
    raw = read_bounded(global_file, "a config file")
    if raw is not None:
        layers.append(Layer(str(global_file), _parse_toml(global_file, raw), path=global_file))
    for path in find_project_configs(cwd, home, root):
        raw = read_bounded(path, "a config file")
        if raw is not None:
            layers.append(Layer(str(path), _parse_toml(path, raw), path=path, project=True,
                                relpath=_relative(path, root), digest=_digest(raw)))

    env = dict(real)
    dotenvs = [(home / ".env", False)]
    if not _same_file(cwd / ".env", home / ".env"):
        dotenvs.insert(0, (cwd / ".env", True))
    env_layers: list[Layer] = []
    fills: list[tuple[bool, dict[str, str]]] = []
    for path, project in dotenvs:
        try:
            raw = read_bounded(path, "a .env file")
        except ConfigError as exc:
            if not project:
                raise
            # Anything can write the workspace's .env (a lane can): an unreadable one must not
            # stop every later run.
            warnings.append(f"{exc}; it was skipped")
            continue
        if raw is None:
            continue
        values = parse_dotenv(raw.decode("utf-8", errors="replace"))
        if "OSPREY_HOME" in values:
            warnings.append(f"{path}: ignored OSPREY_HOME: Osprey's home comes only from the real environment")
            del values["OSPREY_HOME"]
        fills.append((project, values))
        own = {k: v for k, v in values.items() if whole_dotenv or k not in real}  # the real environment wins
        env_layers.append(Layer(str(path), _env_settings(own, str(path)), path=path, project=project, dotenv=True,
                                relpath=_relative(path, root), digest=_digest(raw)))
    # Variables (API keys among them) come from the real environment, then the user's own .env,
    # and only then the workspace's: a cloned repo's .env cannot swap the user's key for its own.
    for _, values in sorted(fills, key=lambda fill: fill[0]):
        env.update({k: v for k, v in values.items() if k not in env})
    layers.extend(reversed(env_layers))  # the home .env below the workspace one
    layers.append(Layer("environment", _env_settings(real, "environment")))
    return _Sources(home, root, layers, env, warnings)


def _judge(
    sources: _Sources, status_of: Callable[[Layer], str], *, enforce: bool = True,
    default_policy: ApprovalPolicy = DEFAULT_APPROVAL_POLICY,
) -> tuple[dict[str, Any], list[str]]:
    """Merge the layers; drop the loosening keys of project layers that are not trusted."""
    merged: dict[str, Any] = {}
    warnings: list[str] = []
    for layer in sources.layers:
        data = layer.data
        if layer.project:
            layer.guarded = loosening(data, FileConfig.model_validate(merged), default_policy)
            if layer.guarded:
                layer.status = status_of(layer)
            if layer.guarded and layer.status != "trusted" and enforce:
                data = copy.deepcopy(data)
                for g in layer.guarded:
                    _delete(data, g.path)
                    warnings.append(_guard_warning(layer, g, sources.root))
        merged = _merge(merged, data)
    return merged, warnings


def _guard_warning(layer: Layer, g: Guarded, root: Path) -> str:
    if layer.status == "changed":
        return (f"{layer.source}: ignored {layer.name(g.path)}: the file changed since you trusted it, and a project "
                f"may not {g.reason} without your trust; review it, then run `osprey trust {root}` again")
    return (f"{layer.source}: ignored {layer.name(g.path)}: a project may not {g.reason} without your trust; "
            f"review the file, then run `osprey trust {root}`")


def _trust_lookup(sources: _Sources, warnings: list[str]) -> Callable[[Layer], str]:
    """The trust status of a project layer; trust.toml is read at most once, and only if needed."""
    store: list[Any] = []

    def status_of(layer: Layer) -> str:
        from .trust import load_trust

        if not store:
            store.append(load_trust(sources.home))
            if store[0].problem:
                warnings.append(store[0].problem)
        return store[0].status(sources.root, layer.relpath, layer.digest)

    return status_of


def resolve_web_search(ws: WebSearchSettings, env: Mapping[str, str]) -> ResolvedWebSearch | None:
    """The search service `ws` selects: the one named, or with `auto` the first configured of Exa
    (a key), Brave (a key), SearXNG (a URL). None when the one asked for is not configured."""
    def exa() -> ResolvedWebSearch | None:
        key = env.get(ws.exa_api_key_env)
        return ResolvedWebSearch(provider="exa", url=ws.exa_url.rstrip("/"), api_key=SecretStr(key)) if key else None

    def brave() -> ResolvedWebSearch | None:
        key = env.get(ws.brave_api_key_env)
        return ResolvedWebSearch(provider="brave", url=ws.brave_url.rstrip("/"), api_key=SecretStr(key)) if key else None

    def searxng() -> ResolvedWebSearch | None:
        return ResolvedWebSearch(provider="searxng", url=ws.searxng_url.rstrip("/")) if ws.searxng_url else None

    order = {"exa": (exa,), "brave": (brave,), "searxng": (searxng,), "auto": (exa, brave, searxng)}[ws.provider]
    for candidate in order:
        found = candidate()
        if found is not None:
            return found
    return None


def _env_path(environ: Mapping[str, str], name: str, cwd: Path) -> Path | None:
    value = environ.get(name, "")
    if not value:
        return None
    path = Path(value).expanduser()
    return path if path.is_absolute() else cwd / path


def load_settings(
    cwd: Path | str | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    need_provider: bool = True,
    interactive: bool = False,
) -> Settings:
    """Resolve the settings of one run; `flags` holds only the options given on the command line.

    With `need_provider=False` (commands that call no model) a missing API key is no error. With
    `interactive=True` (the TUI) the approval policy no layer sets is on-request, not deny-untrusted."""
    cwd = Path(cwd or os.getcwd()).resolve()
    if not cwd.is_dir():
        raise ConfigError(f"working directory {cwd} does not exist or is not a directory")
    real_env = os.environ if environ is None else environ
    sources = _collect(cwd, real_env)
    warnings = list(sources.warnings)
    default_policy = INTERACTIVE_APPROVAL_POLICY if interactive else DEFAULT_APPROVAL_POLICY
    merged, guard_warnings = _judge(sources, _trust_lookup(sources, warnings), default_policy=default_policy)
    warnings += guard_warnings
    env, home = sources.env, sources.home
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
    secret_names = {*API_KEY_VARS.values(), *(o.api_key_env for o in fc.providers.values() if o.api_key_env),
                    fc.web_search.exa_api_key_env, fc.web_search.brave_api_key_env}
    return Settings(
        home=home,
        cwd=cwd,
        workspace_root=sources.root,
        provider=provider,
        model=model,
        base_url=base_url.rstrip("/") if base_url else None,
        api_key=api_key,
        effort=fc.effort,
        max_turns=fc.max_turns or (INTERACTIVE_MAX_TURNS if interactive else HEADLESS_MAX_TURNS),
        max_tokens=fc.max_tokens or 16_384,
        approval_policy=fc.approval_policy or default_policy,
        replay_file=replay_file,
        tool_results=fc.tool_results,
        retry=fc.retry,
        sandbox=fc.sandbox,
        shell_environment=fc.shell_environment,
        web_search=resolve_web_search(fc.web_search, env),
        # Only the real environment names these files: a project's .env must not swap the prompt.
        system_prompt_file=_env_path(real_env, "OSPREY_SYSTEM_PROMPT_FILE", cwd),
        tool_descriptions_file=_env_path(real_env, "OSPREY_TOOL_DESCRIPTIONS_FILE", cwd),
        secret_env_names=sorted(secret_names),
        sources=[layer.source for layer in sources.layers if layer.path is not None and not layer.dotenv],
        warnings=list(dict.fromkeys(warnings)),
    )


# ---------------------------------------------------------------------------------------------
# What `osprey trust` shows


@dataclass
class ProjectFile:
    """A project file and the guarded settings it would change once trusted."""

    path: Path
    relpath: str
    digest: str
    status: str  # trusted, changed, untrusted
    guarded: list[tuple[str, Any]]


@dataclass
class ProjectReport:
    root: Path
    files: list[ProjectFile]
    trust_problem: str | None
    notes: list[str] = field(default_factory=list)  # what is ignored even with trust


def inspect_project(directory: Path | str | None = None, environ: Mapping[str, str] | None = None) -> ProjectReport:
    """The project files a run in `directory` reads, with the guarded settings each would change
    if all of them were trusted, and their trust status now."""
    from .trust import load_trust

    cwd = Path(directory or os.getcwd()).resolve()
    if not cwd.is_dir():
        raise ConfigError(f"{cwd} does not exist or is not a directory")
    sources = _collect(cwd, os.environ if environ is None else environ, whole_dotenv=True)
    store = load_trust(sources.home)
    _judge(sources, lambda layer: "trusted", enforce=False)
    files = [
        ProjectFile(layer.path, layer.relpath, layer.digest, store.status(sources.root, layer.relpath, layer.digest),
                    [(layer.name(g.path), g.value) for g in layer.guarded])
        for layer in sources.layers if layer.project and layer.path is not None
    ]
    return ProjectReport(sources.root, files, store.problem, sources.warnings)
