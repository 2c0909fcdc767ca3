"""Layers and trust gating: collecting the settings of one run from its layers, and keeping the
project layers from loosening guarded settings without the user's trust.

The layers, lowest precedence first, are described in `osprey.config`. A project layer (a
`.osprey/config.toml` of the workspace, or the workspace's `.env`) that would loosen a guarded
setting (see `loosening`) has those keys dropped, with a warning, unless the user trusted that
exact file (`osprey.trust`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError

from .. import tomlfile
from ..errors import ConfigError
from ..files import read_bounded
from .environment import INHERIT_STRICTNESS
from .mcp import MCP_JSON, ResolvedMcp
from .schema import (
    API_KEY_VARS,
    APPROVAL_STRICTNESS,
    DEFAULT_APPROVAL_POLICY,
    DEFAULT_BASE_URLS,
    DEFAULT_MODELS,
    HEADLESS_MAX_TURNS,
    INTERACTIVE_APPROVAL_POLICY,
    INTERACTIVE_MAX_TURNS,
    ApprovalPolicy,
    FileConfig,
    LspServerSettings,
    LspSettings,
    MoaPreset,
    ProviderEndpoint,
    ProviderOverrides,
    ResolvedMoa,
    ResolvedRetrieve,
    ResolvedWebSearch,
    Settings,
    WebSearchSettings,
    checked_config,
    size_bytes,
)

# The settings `OSPREY_*` variables give (from the real environment or a `.env` file).
ENV_KEYS = {
    "OSPREY_PROVIDER": "provider",
    "OSPREY_MODEL": "model",
    "OSPREY_BASE_URL": "base_url",
    "OSPREY_EFFORT": "effort",
    "OSPREY_MAX_TURNS": "max_turns",
    "OSPREY_APPROVAL_POLICY": "approval_policy",
}


def load_home(environ: Mapping[str, str] | None = None) -> Path:
    """`$OSPREY_HOME`, or `~/.osprey`. Pass the real environment: never a `.env` file's values."""
    env = os.environ if environ is None else environ
    return Path(env.get("OSPREY_HOME") or Path(env.get("HOME", "~")).expanduser() / ".osprey").expanduser()


# ---------------------------------------------------------------------------------------------
# Reading the layers


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
        data = tomlfile.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid TOML: the file is not UTF-8 text") from None
    except tomli.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    try:
        checked_config(data)
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
        checked_config(out)
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
REDIRECT_MEMORY = "change where memory (facts about you and your projects) is kept"
LOOSEN_SHELL = "loosen the shell environment policy"
RUN_LSP = "run a language server program"


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




def _checked_lsp(lsp: LspSettings) -> LspSettings:
    """`[lsp]` once merged: every enabled server has a command."""
    for name, server in lsp.servers.items():
        if server.enabled and not server.command:
            raise ConfigError(f"lsp.servers.{name} has no command: give its argv, e.g. command = [\"{name}\"], or set enabled = false")
    return lsp


def _lsp_loosens(entry: Any, below: LspServerSettings | None) -> bool:
    """Whether a project's `[lsp.servers.NAME]` table would run something the layers below do not."""
    if not isinstance(entry, Mapping):
        return True
    if entry.get("enabled", True) is False:
        return False  # turned off: nothing runs
    if below is None or not below.enabled:
        return True
    return any(value != getattr(below, key, _MISSING) for key, value in entry.items())


def _moa_redirects(entry: Any, below: MoaPreset | None, run_provider: str) -> bool:
    """Whether a project's `[moa.presets.NAME]` sends a model to a provider other than the run's
    own, where the layers below do not already send that model of that preset there."""
    if not isinstance(entry, Mapping):
        return True
    providers = entry.get("providers")
    for model, provider in (providers.items() if isinstance(providers, Mapping) else ()):
        if provider != run_provider and (below is None or below.providers.get(model) != provider):
            return True
    return False


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
    # Passages of kept tool output (and the key that goes with them) must not be sent elsewhere by a project.
    rt = below.retrieve
    for key in ("embeddings_url", "embeddings_api_key_env"):
        check(("retrieve", key), lambda v, key=key: v != getattr(rt, key), REDIRECT)
    providers = layer.get("providers")
    for name in providers if isinstance(providers, Mapping) else {}:
        theirs = below.providers.get(name) or ProviderOverrides()
        for key in ("base_url", "api_key_env"):
            check(("providers", name, key), lambda v, theirs=theirs, key=key: v != getattr(theirs, key), REDIRECT)
    # A preset whose model names another provider sends the conversation (and that provider's key)
    # there: the whole preset waits for trust.
    presets = _get(layer, ("moa", "presets"))
    run_provider = below.provider or ("replay" if below.replay_file else "openai")
    for name in presets if isinstance(presets, Mapping) else {}:
        check(("moa", "presets", name), lambda v, name=name: _moa_redirects(v, below.moa.presets.get(name), run_provider), REDIRECT)
    # Memory holds facts about the user and the projects: a project may not send it to a server.
    memory = below.memory
    check(("memory", "provider"), lambda v: v == "hindsight" and memory.provider != "hindsight", REDIRECT_MEMORY)
    for key in ("mode", "api_url", "bank_id"):
        check(("memory", "hindsight", key), lambda v, key=key: v != getattr(memory.hindsight, key), REDIRECT_MEMORY)
    # Trusting agent-written tools and hooks without a pin would let them run: never a project's say.
    check(("extensions", "trust_agent_authored"), lambda v: bool(v) and not below.extensions.trust_agent_authored,
          "trust the tools and hooks the agent writes")
    agent = below.agent
    check(("agent", "requests_per_minute"), lambda v: agent.requests_per_minute is not None and (v is None or v > agent.requests_per_minute),
          "raise the limit on model requests")
    check(("agent", "child_lanes"), lambda v: agent.child_lanes == "own" and v != "own", "let child sessions share a lane")
    check(("agent", "max_children"), lambda v: isinstance(v, int) and v > agent.max_children, "run more child agents at once")
    # Workflows run agents (model requests, tools) by the hundred: a project may lower their limits, never raise them.
    wf = below.workflows
    check(("workflows", "enabled"), lambda v: bool(v) and not wf.enabled, "turn workflows on")
    for key in ("max_concurrent_agents", "max_agents", "timeout_s", "heap_mb"):
        check(("workflows", key), lambda v, key=key: isinstance(v, int | float) and v > getattr(wf, key), "raise the workflows' limits")
    sb = below.sandbox
    check(("sandbox", "enabled"), lambda v: sb.enabled and not v, "turn the sandbox off")
    check(("sandbox", "network"), lambda v: bool(v) and not sb.network, "give the sandbox network access")
    check(("sandbox", "protect_git"), lambda v: sb.protect_git and not v, "let lanes write .git and .osprey")
    check(("sandbox", "base_image"), lambda v: v != sb.base_image, "choose the lane's base image")
    check(("sandbox", "socket"), lambda v: v != sb.socket, "attach the run to another lane")
    check(("sandbox", "token_file"), lambda v: v != sb.token_file, "attach the run to another lane")
    check(("sandbox", "lane_file"), lambda v: v != sb.lane_file, "attach the run to another lane")
    # The engine gets a copy of the workspace (and runs the tools): a project may not send it elsewhere.
    check(("sandbox", "engine"), lambda v: v != sb.engine, "choose the engine lanes run on")
    # The lane image is what runs the tools: a project may not name where it comes from.
    check(("sandbox", "registry"), lambda v: v != sb.registry, "choose the registry the lane image comes from")
    # A lane's limits keep a runaway command (a fork bomb, a memory hog) from the host.
    for key, measure in (("memory_limit", size_bytes), ("tmp_size", size_bytes), ("pids_limit", float), ("cpus", float),
                         ("sync_max_files", float), ("sync_max_bytes", size_bytes)):
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
    # A language server is a program the `lsp` tool runs: a project's entry (a new server, another
    # command, environment or options, or turning one on) needs trust; turning one off does not.
    servers = _get(layer, ("lsp", "servers"))
    for name in servers if isinstance(servers, Mapping) else {}:
        check(("lsp", "servers", name), lambda v, name=name: _lsp_loosens(v, below.lsp.servers.get(name)), RUN_LSP)
    # An MCP server: a stdio one runs a program (a new one, another command, args, env or cwd, or
    # turning one on); an HTTP one with a token or headers sends them where the project says.
    # Turning one off, its timeouts and tool lists, and a plain HTTP server (run untrusted) need no trust.
    mcp_servers = _get(layer, ("mcp_servers",))
    for name in mcp_servers if isinstance(mcp_servers, Mapping) else {}:
        from .mcp_resolve import mcp_entry_loosens

        reason = mcp_entry_loosens(mcp_servers[name], below.mcp_servers.get(name))
        if reason:
            found.append(Guarded(("mcp_servers", name), mcp_servers[name], reason))
    return found


@dataclass
class _Sources:
    home: Path
    root: Path
    layers: list[Layer]  # config-shaped, lowest precedence first (flags not included)
    env: dict[str, str]  # the real environment filled in from the .env files
    warnings: list[str]
    # The real environment filled in from $OSPREY_HOME/.env alone: what `${VAR}` in .mcp.json may
    # read (the workspace's .env comes with the repository, as .mcp.json does, so it must not
    # change what a trusted .mcp.json runs).
    user_env: dict[str, str] = field(default_factory=dict)


def _digest(raw: bytes) -> str:
    from ..trust import digest

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
        try:
            raw = read_bounded(path, "a config file")
            data = _parse_toml(path, raw) if raw is not None else None
        except ConfigError as exc:
            # A cloned repository (or a lane) writes these: one that cannot be read must not stop
            # Osprey from running in it. The warning says what was skipped.
            warnings.append(f"{exc}; it was skipped")
            continue
        if raw is not None and data is not None:
            layers.append(Layer(str(path), data, path=path, project=True, relpath=_relative(path, root), digest=_digest(raw)))

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
    user_env = dict(real)
    for project, values in sorted(fills, key=lambda fill: fill[0]):
        env.update({k: v for k, v in values.items() if k not in env})
        if not project:
            user_env.update({k: v for k, v in values.items() if k not in user_env})
    layers.extend(reversed(env_layers))  # the home .env below the workspace one
    layers.append(Layer("environment", _env_settings(real, "environment")))
    return _Sources(home, root, layers, env, warnings, user_env)


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
            layer.guarded = loosening(data, checked_config(merged), default_policy)
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
        from ..trust import load_trust

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


def resolve_retrieve(fc: FileConfig, env: Mapping[str, str]) -> ResolvedRetrieve:
    """`[retrieve]` with the embeddings endpoint's key read from the variable it names."""
    key = env.get(fc.retrieve.embeddings_api_key_env) if fc.retrieve.embeddings_api_key_env else None
    return ResolvedRetrieve(**fc.retrieve.model_dump(), embeddings_api_key=SecretStr(key) if key else None)


def resolve_moa(fc: FileConfig, env: Mapping[str, str], warnings: list[str]) -> ResolvedMoa:
    """`[moa]` with the endpoint of every provider its presets name (`[providers.NAME]`, else the
    provider's defaults); a default that names no preset is dropped, with a warning."""
    endpoints: dict[str, ProviderEndpoint] = {}
    for preset in fc.moa.presets.values():
        for provider in preset.providers.values():
            if provider in endpoints:
                continue
            overrides = fc.providers.get(provider) or ProviderOverrides()
            key_var = overrides.api_key_env or API_KEY_VARS[provider]
            endpoints[provider] = ProviderEndpoint(base_url=(overrides.base_url or DEFAULT_BASE_URLS[provider]).rstrip("/"),
                                                   api_key=SecretStr(env[key_var]) if env.get(key_var) else None, api_key_env=key_var)
    default = fc.moa.default
    if default is not None and default not in fc.moa.presets:
        warnings.append(f"moa.default names the preset {default!r}, which no [moa.presets.{default}] table defines; "
                        "/moa needs a default preset: define it, or pick one with /moa-config")
        default = None
    return ResolvedMoa(default=default, presets=fc.moa.presets, endpoints=endpoints)


def _resolve_mcp(sources: _Sources, env: Mapping[str, str], warnings: list[str]) -> ResolvedMcp:
    """The MCP servers of the run; the modules that read `.mcp.json` and judge the servers load
    only when a layer declares one or the workspace has an `.mcp.json`."""
    declared = any(layer.data.get("mcp_servers") for layer in sources.layers if not layer.dotenv)
    if not declared and not os.path.lexists(sources.root / MCP_JSON):
        return ResolvedMcp()
    from .mcp_resolve import resolve_mcp

    return resolve_mcp(sources, env, warnings)


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
        fc = checked_config(merged)
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
                    fc.web_search.exa_api_key_env, fc.web_search.brave_api_key_env, "HINDSIGHT_API_KEY"}
    if fc.retrieve.embeddings_api_key_env:
        secret_names.add(fc.retrieve.embeddings_api_key_env)
    for server in fc.mcp_servers.values():  # an MCP server's token, whatever its variable is called
        if server.bearer_token_env_var:
            secret_names.add(server.bearer_token_env_var)
        secret_names.update(server.env_http_headers.values())
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
        agent=fc.agent,
        memory=fc.memory,
        retrieve=resolve_retrieve(fc, env),
        extensions=fc.extensions,
        lsp=_checked_lsp(fc.lsp),
        workflows=fc.workflows,
        moa=resolve_moa(fc, env, warnings),
        mcp=_resolve_mcp(sources, env, warnings),
        hindsight_api_key=SecretStr(env["HINDSIGHT_API_KEY"]) if env.get("HINDSIGHT_API_KEY") else None,
        # Only the real environment names these files: a project's .env must not swap the prompt.
        system_prompt_file=_env_path(real_env, "OSPREY_SYSTEM_PROMPT_FILE", cwd),
        tool_descriptions_file=_env_path(real_env, "OSPREY_TOOL_DESCRIPTIONS_FILE", cwd),
        skill_dir=_env_path(real_env, "OSPREY_SKILL_DIR", cwd),
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
    from ..trust import load_trust

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
    # The workspace's .mcp.json: trusted by its own digest, next to the config files.
    from .mcp_json import read_mcp_json
    from .mcp_resolve import mcp_json_guarded

    mcp_json, mcp_warnings = read_mcp_json(sources.root)
    if mcp_json is not None:
        files.insert(0, ProjectFile(mcp_json.path, mcp_json.relpath, mcp_json.digest, store.status(sources.root, mcp_json.relpath, mcp_json.digest),
                                    [(f"mcpServers.{name}", table) for name, _, table in mcp_json_guarded(mcp_json, sources.layers)]))
    return ProjectReport(sources.root, files, store.problem, [*sources.warnings, *mcp_warnings])
