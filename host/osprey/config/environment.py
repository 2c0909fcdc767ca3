"""The environment of commands the model runs on the host (`bash`, `process`, hooks, custom
tools): which variables they see, and which names and values count as credentials."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:
    from .schema import Settings

Inherit = Literal["all", "core", "none"]
INHERIT_STRICTNESS: tuple[Inherit, ...] = ("all", "core", "none")

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


_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ShellEnvironmentPolicy(BaseModel):
    """Which variables commands the model runs on the host see (`bash`, `process`).

    Applied in order: inherit, the default credential filter (except `passthrough` names),
    `exclude`, `include_only`, then `set`."""

    model_config = ConfigDict(extra="forbid")

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

