"""The settings schema: what a config file may hold (`FileConfig`), the resolved settings of one
run (`Settings`), and the defaults and orders they use."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, StrictBool, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from .environment import ShellEnvironmentPolicy
from .mcp import MAX_SERVERS, McpServerConfig, ResolvedMcp, ServerName

ProviderName = Literal["openai", "anthropic", "replay"]
Effort = Literal["minimal", "low", "medium", "high"]
ApprovalPolicy = Literal["on-request", "on-failure", "unless-trusted", "deny-untrusted", "never"]

DEFAULT_MODELS = {"openai": "gpt-4.1", "anthropic": "claude-sonnet-4-5", "replay": "replay"}
DEFAULT_BASE_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com/v1"}
API_KEY_VARS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
DEFAULT_APPROVAL_POLICY: ApprovalPolicy = "deny-untrusted"
# The TUI's default: a person is there to answer the asks.
INTERACTIVE_APPROVAL_POLICY: ApprovalPolicy = "on-request"
# Loosest first: how much runs before a person says yes. A project may only move rightwards.
APPROVAL_STRICTNESS: tuple[ApprovalPolicy, ...] = ("never", "on-failure", "unless-trusted", "on-request", "deny-untrusted")

# Model turns a task may take before it ends MaxContinuations, unless configured: a headless run
# stops at 150; the terminal UI, where a person watches and can stop it, effectively never.
HEADLESS_MAX_TURNS = 150
INTERACTIVE_MAX_TURNS = 4_294_967_295


MAX_URL_CHARS = 2048


def _scheme_for(host: str, port: int | None) -> str:
    """The scheme a base URL written without one most likely meant: https for a public name on the
    default port (an API such as api.openai.com), http for an address, a name without a dot (a
    local one) or another port (a server on this machine or the network)."""
    try:
        ipaddress.ip_address(host)
        return "http"
    except ValueError:
        pass
    return "https" if "." in host and host != "localhost" and not host.endswith(".localhost") and port in (None, 443) else "http"


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_HTTP_WITHOUT_SLASHES = re.compile(r"(https?):/*", re.IGNORECASE)


def base_url_problem(value: str) -> str | None:
    """What is wrong with `value` as a model server's base URL (an http:// or https:// URL with a
    host), with the fix; None when nothing is."""
    if len(value) > MAX_URL_CHARS:
        return f"a base URL is at most {MAX_URL_CHARS} characters"
    if any(c.isspace() or not c.isprintable() for c in value):
        return "a base URL holds no spaces or control characters"
    if not _SCHEME.match(value):
        http = _HTTP_WITHOUT_SLASHES.match(value)  # http:127.0.0.1 or http:/127.0.0.1
        rest = value[http.end():] if http else value.lstrip("/")
        try:
            parts = urlsplit("//" + rest)
            host, port = parts.hostname or "", parts.port
        except ValueError:
            host, port = "", None
        if not host:
            return "not a URL: a base URL starts with http:// or https:// and names a host, e.g. http://127.0.0.1:8080/v1"
        scheme = http.group(1).lower() if http else _scheme_for(host, port)
        return f"the URL has no scheme (http:// or https://); did you mean {scheme}://{rest}?"
    try:
        parts = urlsplit(value)
        named = parts.hostname
        parts.port  # noqa: B018 - a port that is not a number from 0 to 65535 raises ValueError here
    except ValueError as exc:
        what = "its port is not a number from 0 to 65535" if "port" in str(exc).lower() else str(exc)
        return f"not a URL ({what}); write it as http://HOST:PORT/PATH, e.g. http://127.0.0.1:8080/v1"
    if parts.scheme.lower() not in ("http", "https"):
        return f"the scheme {parts.scheme}:// is not one a model server is spoken to with: use http:// or https://"
    if not named:
        return f"the URL names no host; write it as {parts.scheme.lower()}://HOST:PORT/PATH, e.g. {parts.scheme.lower()}://127.0.0.1:8080/v1"
    return None


def _checked_base_url(value: str) -> str:
    problem = base_url_problem(value)
    if problem is not None:
        raise PydanticCustomError("base_url", problem)
    return value


# A model server's base URL, checked when the configuration loads.
BaseURL = Annotated[str, AfterValidator(_checked_base_url)]


# Every settings model builds its validator at its first use (a run uses a few of them; nested
# ones are built into their parent's), not at import.
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


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
    lane_file: str | None = Field(None, description="attach to a lane on another machine's engine that this file describes (`osprey.testing`'s lane writes one)")
    protect_git: bool = Field(True, description="mount the workspace's .git and .osprey read-only in lanes; false lets a lane write them")
    engine: str | None = Field(None, min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$",
                               description="the Docker context whose engine runs lanes; unset: DOCKER_CONTEXT, DOCKER_HOST, else the local socket")
    registry: str | None = Field(None, max_length=255, pattern=r"^[a-z0-9][a-z0-9.-]*(:[0-9]{1,5})?(/[a-z0-9][a-z0-9._-]*)*$",
                                 description="a registry (HOST[:PORT][/PATH]) lanes on another machine's engine pull the lane image from, by digest; "
                                             "`osprey sandbox build --push` puts it there")
    sync_max_files: int = Field(100_000, ge=1, le=10_000_000, description="a lane on another machine: files, directories and symlinks copied there or back, at most")
    sync_max_bytes: str = Field("2g", pattern=r"^[0-9]+[bkmg]?$", description="a lane on another machine: bytes of files copied there or back, at most")


class AgentSettings(_Strict):
    """`[agent]`: how a session's child sessions (subagents, workflows' agents) run."""

    # At most this many model requests a minute across a lead session and its children (none: no limit).
    requests_per_minute: int | None = Field(None, ge=1, le=100_000)
    # Children run their tools in their parent's home ("shared") or each in one of its own ("own").
    child_lanes: Literal["shared", "own"] = "shared"
    # At most this many children (subagents) run at once across one spawn tree; a spawn past it waits.
    max_children: int = Field(8, ge=1, le=64)
    # The persona a session starts as when --persona does not name one (see `osprey docs personas`).
    default_persona: str | None = Field(None, min_length=1, max_length=80)


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


HINDSIGHT_URLS = {"cloud": "https://api.hindsight.vectorize.io", "local_external": "http://localhost:8888"}


class HindsightSettings(_Strict):
    """`[memory.hindsight]`: the Hindsight service memory is kept in."""

    mode: Literal["cloud", "local_external"] = Field("cloud", description="cloud needs HINDSIGHT_API_KEY; local_external is a service another process hosts")
    api_url: BaseURL | None = Field(None, description="replaces the endpoint the mode selects")
    bank_id: str = Field("osprey", min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:-]+$")
    recall_budget: Literal["low", "mid", "high"] = "mid"
    timeout_secs: float = Field(120.0, gt=0, le=3600)

    @property
    def url(self) -> str:
        """The endpoint: `api_url`, else the mode's default."""
        return (self.api_url or HINDSIGHT_URLS[self.mode]).rstrip("/")


class MemorySettings(_Strict):
    """`[memory]`: the memory tool's provider and, for the built-in one, each target's size."""

    provider: Literal["builtin", "hindsight", "none"] = Field("builtin", description="none removes the memory tool and its prompt block")
    memory_char_limit: int = Field(2200, ge=100, le=1_000_000)
    user_char_limit: int = Field(1375, ge=100, le=1_000_000)
    hindsight: HindsightSettings = Field(default_factory=HindsightSettings)


class LspServerSettings(_Strict):
    """`[lsp.servers.NAME]`: one language server, run where the tools run (see `osprey docs lsp`)."""

    # Non-empty once the layers are merged (a layer may only turn a server off, `enabled = false`).
    command: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(default_factory=list, max_length=100, description="the server's argv, e.g. [\"basedpyright-langserver\", \"--stdio\"]")
    extensions: list[Annotated[str, Field(pattern=r"^\.[A-Za-z0-9_.+-]{1,30}$")]] = Field(default_factory=list, max_length=100, description="the file names it serves, e.g. [\".py\", \".pyi\"]")
    root_markers: list[Annotated[str, Field(min_length=1, max_length=255)]] = Field(default_factory=list, max_length=100, description="files or directories marking a project root, looked for upwards from a file")
    initialization_options: dict[str, Any] = Field(default_factory=dict, description="sent as initializationOptions (and answered to workspace/configuration)")
    env: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,100}$")], Annotated[str, Field(max_length=32_768)]] = Field(default_factory=dict, max_length=100, description="more environment variables for the server")
    enabled: bool = True


class LspSettings(_Strict):
    """`[lsp]`: the language servers of the `lsp` tool and its bounds."""

    servers: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")], LspServerSettings] = Field(default_factory=dict)
    request_timeout: float = Field(30.0, gt=0, le=600, description="seconds a request may take")
    initialize_timeout: float = Field(60.0, gt=0, le=600, description="seconds a server may take to start and initialize")
    diagnostics_wait: float = Field(10.0, gt=0, le=600, description="seconds to wait for a file's diagnostics after it is opened or changed")
    max_results: int = Field(50, ge=1, le=1000, description="at most this many items in a result")


class ExtensionsSettings(_Strict):
    """`[extensions]`: settings of the extension layers (`osprey docs extensions`)."""

    # Parsed and shown (`osprey extensions`), governing nothing yet: agent-written user tools and
    # hooks need a trust pin whatever it says. Guarded: a project layer cannot turn it on untrusted.
    trust_agent_authored: StrictBool = Field(False, description="governs no behavior yet; agent-written executable artifacts still need a trust pin")


class RetrieveSettings(_Strict):
    """`[retrieve]`: keeping cut tool results whole for the `retrieve` tool, and how it ranks."""

    enabled: bool = Field(True, description="keep cut tool results and offer the retrieve tool")
    max_output_bytes: int = Field(64 * 1024 * 1024, ge=1024, le=1024**3, description="one kept output at most; a longer one keeps its head and tail")
    max_session_bytes: int = Field(512 * 1024 * 1024, ge=1024, le=64 * 1024**3, description="a session's kept outputs at most; the oldest are dropped first")
    embeddings_url: BaseURL | None = Field(None, description="an OpenAI-compatible embeddings endpoint, e.g. http://127.0.0.1:8080/v1/embeddings")
    embeddings_model: str = Field("text-embedding-3-small", min_length=1, max_length=200)
    embeddings_api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,100}$", description="the variable holding the endpoint's key")


class ResolvedRetrieve(RetrieveSettings):
    """`[retrieve]` with the embeddings endpoint's key read from the environment."""

    embeddings_api_key: SecretStr | None = None


# A model's name as a preset gives it (no spaces; e.g. "gpt-4.1", "meta-llama/llama-3.3-70b").
# (Its length is a constraint apart: a pattern of 1 to 200 non-space characters makes a large
# automaton, built whenever the settings are first read.)
MoaModelName = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^\S+$")]
MoaPresetName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
# The providers a preset's model may name; one left out talks to the session's own provider.
MoaProvider = Literal["openai", "anthropic"]
MOA_MIN_REFERENCES, MOA_MAX_REFERENCES = 2, 8


class MoaPreset(_Strict):
    """`[moa.presets.NAME]`: the reference models that answer a /moa prompt in parallel and the
    aggregator that merges their answers (see `osprey docs moa`)."""

    reference_models: list[MoaModelName] = Field(min_length=MOA_MIN_REFERENCES, max_length=MOA_MAX_REFERENCES)
    aggregator: MoaModelName
    providers: dict[MoaModelName, MoaProvider] = Field(default_factory=dict, max_length=MOA_MAX_REFERENCES + 1,
                                                       description="a model's provider, when it is not the session's")
    instructions: str | None = Field(None, min_length=1, max_length=20_000, description="more instructions for the aggregator")
    timeout: float = Field(300.0, gt=0, le=3600, description="seconds each model may take to answer")

    @model_validator(mode="after")
    def _consistent(self) -> MoaPreset:
        seen: set[str] = set()
        for model in self.reference_models:
            if model in seen:
                raise ValueError(f"reference_models lists {model!r} twice; list each model once")
            seen.add(model)
        stray = [m for m in self.providers if m not in seen and m != self.aggregator]
        if stray:
            raise ValueError(f"providers names {', '.join(map(repr, stray))}, which is neither a reference model nor the aggregator")
        return self


class MoaSettings(_Strict):
    """`[moa]`: the Mixture of Agents presets (`/moa`, `/moa-config`) and the one `/moa` uses."""

    default: MoaPresetName | None = Field(None, description="the preset /moa runs")
    presets: dict[MoaPresetName, MoaPreset] = Field(default_factory=dict, max_length=64)


class ProviderEndpoint(_Strict):
    """Where a provider's requests go and the key they carry (resolved from `[providers.NAME]`,
    the defaults and the environment)."""

    base_url: str
    api_key: SecretStr | None = None
    api_key_env: str = Field(description="the variable the key is read from, to name when it is missing")


class ResolvedMoa(MoaSettings):
    """`[moa]` once merged, with the endpoint of each provider a preset names."""

    endpoints: dict[MoaProvider, ProviderEndpoint] = Field(default_factory=dict)


class WorkflowsSettings(_Strict):
    """`[workflows]`: JavaScript workflows (`osprey docs workflows`)."""

    enabled: bool = Field(True, description="offer run_workflow and propose_workflow, and the TUI's workflow commands")
    max_concurrent_agents: int = Field(16, ge=1, le=256, description="at most this many agents at once across the session's workflow runs; more wait for a slot")
    max_agents: int = Field(1000, ge=1, le=100_000, description="at most this many agents in one run; the next is refused")
    timeout_s: float = Field(3600.0, gt=0, le=7 * 86400, description="a run's wall-clock limit in seconds")
    heap_mb: int = Field(256, ge=16, le=16 * 1024, description="the script's JavaScript heap limit in MB")


class ProviderOverrides(_Strict):
    base_url: BaseURL | None = None
    api_key_env: str | None = None
    model: str | None = None


class TopLevelConfig(_Strict):
    """The keys of a config.toml that hold one value each: all that flags and `OSPREY_*` variables set."""

    provider: ProviderName | None = None
    model: str | None = None
    base_url: BaseURL | None = None
    effort: Effort | None = None
    max_turns: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    approval_policy: ApprovalPolicy | None = None
    replay_file: str | None = None


class FileConfig(TopLevelConfig):
    """Everything a config.toml may hold; unknown keys are errors."""

    tool_results: ToolResultLimits = Field(default_factory=ToolResultLimits)
    retry: RetrySettings = Field(default_factory=RetrySettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    shell_environment: ShellEnvironmentPolicy = Field(default_factory=ShellEnvironmentPolicy)
    providers: dict[ProviderName, ProviderOverrides] = Field(default_factory=dict)
    web_search: WebSearchSettings = Field(default_factory=WebSearchSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    extensions: ExtensionsSettings = Field(default_factory=ExtensionsSettings)
    lsp: LspSettings = Field(default_factory=LspSettings)
    retrieve: RetrieveSettings = Field(default_factory=RetrieveSettings)
    workflows: WorkflowsSettings = Field(default_factory=WorkflowsSettings)
    moa: MoaSettings = Field(default_factory=MoaSettings)
    mcp_servers: dict[ServerName, McpServerConfig] = Field(default_factory=dict, max_length=MAX_SERVERS, description="MCP servers (`osprey docs mcp`)")


def checked_config(data: Mapping[str, Any]) -> FileConfig:
    """`FileConfig.model_validate(data)`. Data of top-level keys and whole sections alone (a run's
    flags, its `OSPREY_*` variables) is checked key by key, each section by its own model, and the
    rest take their defaults: the same result without building the whole file schema (every
    section inlined again, about 10 ms of a start). A problem is reported by the whole schema, as
    always."""
    fields = FileConfig.model_fields
    top_keys = TopLevelConfig.model_fields.keys()
    if data.keys() <= fields.keys():
        top = {key: value for key, value in data.items() if key in top_keys}
        sections = {key: (fields[key].annotation, value) for key, value in data.items() if key not in top_keys}
        if all(isinstance(model, type) and issubclass(model, BaseModel) and isinstance(value, dict) for model, value in sections.values()):
            try:
                checked = TopLevelConfig.model_validate(top)
                values = {name: getattr(checked, name) for name in top_keys}
                values.update({key: model.model_validate(value) for key, (model, value) in sections.items()})  # type: ignore[union-attr]
            except ValidationError:
                pass
            else:
                return FileConfig.model_construct(set(data), **values)
    return FileConfig.model_validate(data)


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
    agent: AgentSettings = Field(default_factory=AgentSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    extensions: ExtensionsSettings = Field(default_factory=ExtensionsSettings)
    lsp: LspSettings = Field(default_factory=LspSettings)
    retrieve: ResolvedRetrieve = Field(default_factory=ResolvedRetrieve)
    workflows: WorkflowsSettings = Field(default_factory=WorkflowsSettings)
    moa: ResolvedMoa = Field(default_factory=ResolvedMoa)
    mcp: ResolvedMcp = Field(default_factory=ResolvedMcp, description="the MCP servers that run, and those declared that do not")
    # HINDSIGHT_API_KEY, from the real environment or a .env file: the Hindsight cloud's key.
    hindsight_api_key: SecretStr | None = None
    system_prompt_file: Path | None = Field(None, description="OSPREY_SYSTEM_PROMPT_FILE (the real environment only): replaces the base system prompt")
    tool_descriptions_file: Path | None = Field(None, description="OSPREY_TOOL_DESCRIPTIONS_FILE (the real environment only): overrides tool descriptions")
    skill_dir: Path | None = Field(None, description="OSPREY_SKILL_DIR (the real environment only): one more skill root, as --skill-dir")
    secret_env_names: list[str] = Field(default_factory=list, description="variables holding provider keys; host commands never see them")
    sources: list[str] = Field(default_factory=list, description="files that contributed, lowest precedence first")
    warnings: list[str] = Field(default_factory=list, description="settings ignored and why; print each one")


def size_bytes(value: str) -> int:
    """A size such as "512m" or "2g" (docker's units) in bytes."""
    units = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
    value = value.lower()
    return int(value[:-1]) * units[value[-1]] if value[-1] in units else int(value)
