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

The package is split by concern: `schema` (the settings models and their defaults), `layers` (the
layers, trust gating, `load_settings`, `inspect_project`) and `environment` (the environment of
host commands). Files are read through `osprey.files`. Every public name of the package is importable from here.
"""

from .environment import (
    CORE_VARIABLES,
    INHERIT_STRICTNESS,
    Inherit,
    ShellEnvironmentPolicy,
    is_secret_name,
    is_secret_value,
    settings_tool_environment,
    tool_environment,
)
from .layers import (
    ENV_KEYS,
    LOOSEN_SHELL,
    REDIRECT,
    Guarded,
    Layer,
    ProjectFile,
    ProjectReport,
    find_project_configs,
    inspect_project,
    load_home,
    load_settings,
    loosening,
    parse_dotenv,
    resolve_web_search,
    workspace_root,
)
from .schema import (
    API_KEY_VARS,
    APPROVAL_STRICTNESS,
    DEFAULT_APPROVAL_POLICY,
    DEFAULT_BASE_URLS,
    DEFAULT_MODELS,
    HEADLESS_MAX_TURNS,
    INTERACTIVE_APPROVAL_POLICY,
    INTERACTIVE_MAX_TURNS,
    AgentSettings,
    ApprovalPolicy,
    Effort,
    FileConfig,
    ProviderName,
    ProviderOverrides,
    ResolvedWebSearch,
    RetrySettings,
    SandboxSettings,
    Settings,
    ToolResultLimits,
    WebSearchSettings,
    size_bytes,
)

__all__ = [
    "API_KEY_VARS", "APPROVAL_STRICTNESS", "CORE_VARIABLES", "DEFAULT_APPROVAL_POLICY", "DEFAULT_BASE_URLS",
    "DEFAULT_MODELS", "ENV_KEYS", "HEADLESS_MAX_TURNS", "INHERIT_STRICTNESS", "INTERACTIVE_APPROVAL_POLICY",
    "INTERACTIVE_MAX_TURNS", "LOOSEN_SHELL", "REDIRECT", "AgentSettings", "ApprovalPolicy", "Effort", "FileConfig",
    "Guarded", "Inherit", "Layer", "ProjectFile", "ProjectReport", "ProviderName", "ProviderOverrides",
    "ResolvedWebSearch", "RetrySettings", "SandboxSettings", "Settings", "ShellEnvironmentPolicy", "ToolResultLimits",
    "WebSearchSettings", "find_project_configs", "inspect_project", "is_secret_name", "is_secret_value", "load_home",
    "load_settings", "loosening", "parse_dotenv", "resolve_web_search",
    "settings_tool_environment", "size_bytes", "tool_environment", "workspace_root",
]
