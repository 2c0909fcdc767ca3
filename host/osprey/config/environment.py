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
    r"|(?:TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$"  # glued on at the end: GITHUBTOKEN
    r"|(?:API|ACCESS|AUTH|PRIVATE|SIGNING|ENCRYPTION|MASTER|LICENSE|DEPLOY|SSH|GPG|PGP|NPM)KEYS?$"  # NPMKEY, not MONKEY
    r"|_JSON$"  # a JSON document: service accounts, key files, auth configs
    r"|SECRET|PASSWORD|PASSWD|CREDENTIAL"  # anywhere
    r"|^(?:OSPREY|OPENAI|ANTHROPIC)_|^(?:SSH_AUTH_SOCK|KUBECONFIG)$",
    re.IGNORECASE,
)
# GIT_CONFIG_KEY_<n> names a git setting; its value and GIT_CONFIG_VALUE_<n> are judged by value.
_GIT_CONFIG_ENTRY = re.compile(r"^GIT_CONFIG_(?:KEY|VALUE)_[0-9]{1,6}$")
# Names whose value is an address: one with a user part (`https://TOKEN@host`) is withheld.
_ADDRESS_NAME = re.compile(r"(?:^|_)(?:URL|URLS|URI|URIS|DSN|ENDPOINT|CONN|CONNECTION|CONNSTR|CONNECTION_STRING)$", re.IGNORECASE)
_USERINFO = re.compile(r"://[^\s/?#@]+@")
_URL_PASSWORD = re.compile(r"://[^/@\s:]*:[^/@\s]*@")  # scheme://user:password@host
_SECRET_PARAMS = ("password", "passwd", "pwd", "token", "secret", "key", "signature", "sig")
_TOKEN_FORMAT = re.compile(
    r"^(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_|glpat-|xox[abposr]-|sk-[A-Za-z0-9_\-]{16,}|AKIA[0-9A-Z]{16}$|npm_[A-Za-z0-9]{30,})"
)
# Longer than this a value cannot be passed to a program (Linux refuses one argument or variable
# over 128 KiB), so it is withheld unread. The scans below are linear in a value's length: each
# pattern's runs stop at a character that cannot continue them.
MAX_VALUE_CHARS = 128 * 1024
# A credential anywhere in a value. A token must start where a run of word characters starts (no
# letter, digit, `_` or `-` just before it), which keeps the scan linear and `task-...` harmless.
_B = r"(?<![A-Za-z0-9_-])"
_CREDENTIAL_IN_VALUE = re.compile(
    _B + r"(?:"
    r"gh[pousr]_[A-Za-z0-9]{20}|github_pat_[A-Za-z0-9_]{20}|gl(?:pat|dt|rt|ptt|cbt)-[A-Za-z0-9_-]{20}"
    r"|xox[abposre]-[A-Za-z0-9-]{10}|xapp-[0-9]-[A-Za-z0-9-]{10}"
    r"|sk-[A-Za-z0-9_-]{20}|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10}|whsec_[A-Za-z0-9]{20}"
    r"|hf_[A-Za-z0-9]{30}|AIza[0-9A-Za-z_-]{35}|ya29\.[0-9A-Za-z_-]{20}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}|npm_[A-Za-z0-9]{36}|pypi-[A-Za-z0-9_-]{50}"
    r"|SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{20}|hvs\.[A-Za-z0-9_-]{20}|dop_v1_[a-f0-9]{40}|shp(?:at|ss|ca)_[a-fA-F0-9]{32}"
    r"|eyJ[A-Za-z0-9_-]{10,2048}\.[A-Za-z0-9_-]{2}"  # a JWT: base64 JSON header, a dot, its payload
    r")"
    r"|-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY"  # PEM and OpenSSH keys, PGP private key blocks
    r"|(?i:(?<![A-Za-z0-9_-])(?:proxy-)?authorization[ \t]{0,8}:|(?<![A-Za-z0-9_-])bearer[ \t]{1,8}[A-Za-z0-9._~+/=-]{8}"
    r"|(?<![A-Za-z0-9_-])(?:x-api-key|private-token|x-auth-token|x-access-token)[ \t]{0,8}:"
    r"|\"(?:private_key|client_secret|password|passwd|secret|api_?key|access_token|refresh_token|auth|token)\"[ \t\r\n]{0,8}:"
    r"|(?:password|passwd|(?<![A-Za-z0-9_.])pwd)[ \t]{0,4}=[ \t]{0,4}[^\s;&'\"]"  # connection strings, --password=, PGPASSWORD=
    # Azure connection strings and SAS tokens, npm's _authToken, a .netrc's `password p`
    r"|(?<![A-Za-z0-9_])(?:accountkey|sharedaccesskey|sharedaccesssignature|_authtoken|_auth|_password)[ \t]{0,4}=[ \t]{0,4}[^\s;&'\"]"
    r"|(?<![A-Za-z0-9_])sig=[A-Za-z0-9%+/]{20}"
    r"|(?<![A-Za-z0-9_-])(?:machine|default)[ \t]+\S{1,253}(?:[ \t]+\S{1,253}){0,6}?[ \t]+password[ \t]+\S)",
)
_BASE64_JSON = re.compile(r"eyJ[A-Za-z0-9+/_-]{17,}={0,2}")  # a whole value that is base64 of a JSON object


def is_secret_name(name: str) -> bool:
    """Whether a variable's name says it holds a credential (`PWD`, `TOKENIZERS_PARALLELISM`,
    `KEYBOARD_LAYOUT` and `MONKEY` do not)."""
    if name in _HARMLESS or _GIT_CONFIG_ENTRY.match(name.upper()):
        return False
    return bool(_SECRET_NAME.search(name))


def is_secret_value(value: str) -> bool:
    """Whether a value is a credential by its form: it starts with a well-known token format, or
    is a URL with a password (in its user part or a `password=`-like parameter)."""
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


def carries_credential(value: str) -> bool:
    """Whether a variable's value carries a credential anywhere in it: `is_secret_value`, a token
    format, a JWT, a private key, an `Authorization:` or `Bearer` header, a `password=` pair, a
    JSON secret field, or base64 of a JSON object. A value too long for a program's environment
    counts too (it is not read)."""
    if len(value) > MAX_VALUE_CHARS:
        return True
    return is_secret_value(value) or bool(_CREDENTIAL_IN_VALUE.search(value)) or bool(_BASE64_JSON.fullmatch(value))


def is_credential(name: str, value: str) -> bool:
    """Whether the variable `name=value` is withheld from host commands by the credential filter:
    its name or its value says it holds one, or it is an address (`*_URL`, `*_URI`, `*_DSN`) with
    a user part."""
    if is_secret_name(name) or carries_credential(value):
        return True
    return bool(_ADDRESS_NAME.search(name)) and bool(_USERINFO.search(value))


def _matches(name: str, patterns: Iterable[str]) -> bool:
    folded = name.upper()
    return any(fnmatch.fnmatchcase(folded, p.upper()) for p in patterns)


_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ShellEnvironmentPolicy(BaseModel):
    """Which variables commands the model runs on the host see (`bash`, `process`).

    Applied in order: inherit, the default credential filter (except `passthrough` names),
    `exclude`, `include_only`, then `set`."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

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
    out = {k: v for k, v in out.items() if k in keep or not (k.upper() in extra or is_credential(k, v))}
    if any(_GIT_CONFIG_ENTRY.match(k.upper()) for k in env.keys() - out.keys()):
        # git refuses to run when one of GIT_CONFIG_COUNT's entries is missing: drop them all.
        out = {k: v for k, v in out.items() if k in keep or not (k.upper() == "GIT_CONFIG_COUNT" or _GIT_CONFIG_ENTRY.match(k.upper()))}
    if policy.exclude:
        out = {k: v for k, v in out.items() if not _matches(k, policy.exclude)}
    if policy.include_only:
        out = {k: v for k, v in out.items() if _matches(k, policy.include_only)}
    out.update(policy.set)
    return out


def settings_tool_environment(settings: Settings, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """`tool_environment` for one run: its shell environment policy, its provider key variables dropped."""
    return tool_environment(environ, settings.shell_environment, extra_secret_names=settings.secret_env_names)

