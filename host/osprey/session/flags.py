"""A front end's command-line flags, resolved into what its session runs with.

`osprey` (the terminal UI) and `osprey agent` (headless) both pass their flags through `resolve`,
so a flag means the same in both. What differs is decided here from `interactive` alone: the
approval policy no layer sets (on-request in the TUI, deny-untrusted headless), what --read-only
stands for, and the default turn limit.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..config import ApprovalPolicy, Effort, ProviderName, Settings, load_home, load_settings
from ..config.schema import BaseURL
from ..errors import ConfigError, OspreyError
from ..events import Event

if TYPE_CHECKING:
    from ..sessions.journal import SessionRow
    from ..sessions.resume import ResumePoint
    from .core import SessionOptions

# Flags only `osprey agent` has: they make no sense for an interactive session.
HEADLESS_ONLY = {"replay_file": "--replay", "record_file": "--record", "budget": "--budget", "output_schema": "--output-schema"}
# The settings a resumed session's record may choose (its provider, model and effort).
MODEL_FLAGS = ("provider", "model", "effort")


class FlagError(ConfigError):
    """A flag, or a combination of flags, the command line cannot take: a usage error (exit 2)."""


class Flags(BaseModel):
    """The flags a front end was given; None (or False, or nothing) is a flag not given."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # True for the terminal UI (a person can answer approvals), False for `osprey agent`.
    interactive: bool = False
    cwd: str | None = None
    provider: ProviderName | None = None
    model: str | None = None
    base_url: BaseURL | None = None
    effort: Effort | None = None
    max_turns: int | None = Field(None, ge=1)
    approval_policy: ApprovalPolicy | None = None
    yolo: bool = False
    read_only: bool = False
    allow: tuple[str, ...] = ()
    toolset: str | None = None
    persona: str | None = Field(None, min_length=1, max_length=80)
    skills: tuple[str, ...] = ()
    skill_dirs: tuple[str, ...] = ()
    sandbox: bool | None = None
    sandbox_network: bool | None = None
    sandbox_socket: str | None = None
    sandbox_token_file: str | None = None
    sandbox_lane: str | None = None
    resume: str | None = None
    continue_: bool = False
    # Headless only.
    replay_file: str | None = None
    record_file: str | None = None
    budget: float | None = Field(None, gt=0)
    output_schema: str | None = None

    @model_validator(mode="after")
    def _front_end(self) -> Flags:
        if self.interactive:
            given = [flag for name, flag in HEADLESS_ONLY.items() if getattr(self, name) is not None]
            if given or self.provider == "replay":
                raise ValueError(f"{(given or ['--provider replay'])[0]} is an option of `osprey agent` only")
        return self


def parse_flags(values: Mapping[str, Any], *, interactive: bool) -> Flags:
    """A front end's flags by their names (as its command parsed them); a FlagError when one is
    not a valid value or belongs to the other front end."""
    try:
        return Flags.model_validate({**values, "interactive": interactive})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        name = f"--{where.rstrip('_').replace('_', '-')}: " if where else ""
        raise FlagError(f"{name}{error['msg'].removeprefix('Value error, ')}") from None


@dataclass(frozen=True)
class Resumed:
    """A journaled session a front end goes on with: its row, its record and where it resumes."""

    row: SessionRow
    events: list[Event]
    point: ResumePoint


@dataclass(frozen=True)
class Resolution:
    """What a front end's flags resolve to: the settings, the `--allow` rules, the journaled session
    to go on with, and the provider, model and effort taken from its record."""

    flags: Flags
    settings: Settings
    # The values the command line gives the settings (`load_settings`'s flags), for `settings_for`.
    config_flags: dict[str, Any]
    resumed: Resumed | None = None
    # What the resumed session's record chose that no flag did (empty when nothing was taken).
    model_flags: dict[str, str] = field(default_factory=dict)
    environ: Mapping[str, str] | None = None

    def settings_for(self, change: Mapping[str, Any]) -> Settings:
        """The settings with `change` (a /model switch, say) over the command line's flags."""
        return load_settings(self.settings.cwd, {**self.config_flags, **change}, self.environ, interactive=self.flags.interactive)

    def session_options(self) -> SessionOptions:
        """The options of the session these flags start (the resumed one's id and resume point)."""
        from .core import SessionOptions

        flags = self.flags
        options = SessionOptions(
            settings=self.settings, allow=list(flags.allow), interactive=flags.interactive, toolset=flags.toolset,
            record_file=Path(flags.record_file) if flags.record_file else None, budget=flags.budget,
            output_schema=Path(flags.output_schema) if flags.output_schema else None,
        )
        if self.resumed is not None:
            options.session_id, options.resume = self.resumed.row.id, self.resumed.point
        options.persona = self.persona()
        options.skills = list(flags.skills)
        options.skill_dirs = [Path(d) for d in flags.skill_dirs] + ([self.settings.skill_dir] if self.settings.skill_dir else [])
        return options

    def persona(self) -> Any:
        """The persona the session starts as: --persona, else the resumed session's own, else
        `[agent].default_persona`; None when none is named. A ConfigError when it does not resolve."""
        name = self.flags.persona
        if name is None and self.resumed is not None:
            from ..sessions.resume import recorded_persona

            name = recorded_persona(self.resumed.events)
        name = name or self.settings.agent.default_persona
        if name is None:
            return None
        from ..personas import resolve_persona  # only when a persona is named

        return resolve_persona(name, workspace_root=self.settings.workspace_root, home=self.settings.home)


def _absolute(path: str | None) -> str | None:
    # A flag's path is relative to where the user is, not to -C or a resumed session's directory.
    return os.path.abspath(path) if path else None


def resolve(flags: Flags, environ: Mapping[str, str] | None = None) -> Resolution:
    """Resolve `flags` (and the settings files) for one launch. A FlagError for flags that cannot
    go together; another OspreyError for settings that do not resolve or a session that cannot be
    resumed. `environ` is the real environment (default: this process's)."""
    from ..policy.approvals import policy_from_flags
    from .core import parse_allow_rules

    if flags.resume and flags.continue_:
        raise FlagError("choose one of --resume and --continue")
    try:
        policy = policy_from_flags(yolo=flags.yolo, read_only=flags.read_only, approval_policy=flags.approval_policy,
                                   interactive=flags.interactive)
    except ValueError as exc:
        raise FlagError(str(exc)) from None
    try:
        parse_allow_rules(flags.allow)  # a bad rule is a usage error now, not when the session starts
    except ConfigError as exc:
        raise FlagError(str(exc)) from None
    cwd = _absolute(flags.cwd)
    resumed = None
    if flags.resume or flags.continue_:
        resumed = _find(flags, cwd, environ)
        if cwd is None and os.path.isdir(resumed.row.cwd):
            cwd = resumed.row.cwd  # go on where the session ran, unless -C says otherwise
    lane = {
        "enabled": flags.sandbox or bool(flags.sandbox_socket) or bool(flags.sandbox_lane) or None, "network": flags.sandbox_network,
        "socket": _absolute(flags.sandbox_socket), "token_file": _absolute(flags.sandbox_token_file), "lane_file": _absolute(flags.sandbox_lane),
    }
    config_flags: dict[str, Any] = {
        "provider": flags.provider, "model": flags.model, "base_url": flags.base_url, "effort": flags.effort,
        "max_turns": flags.max_turns, "replay_file": _absolute(flags.replay_file), "approval_policy": policy,
        "sandbox": {k: v for k, v in lane.items() if v is not None},
    }
    settings = load_settings(cwd, config_flags, environ, interactive=flags.interactive)
    if settings.sandbox.network and not settings.sandbox.enabled:
        raise FlagError("--sandbox-network needs --sandbox")
    taken: dict[str, str] = {}
    if resumed is not None:
        taken = _recorded(resumed.events, config_flags)
        if taken:
            try:
                settings = load_settings(cwd, {**config_flags, **taken}, environ, interactive=flags.interactive)
            except OspreyError as exc:
                raise ConfigError(f"cannot go on with {taken.get('provider', settings.provider)} · {taken.get('model', settings.model)}, "
                                  f"the model session {resumed.row.id} ran with: {exc}; give --provider/--model to choose another") from None
    if flags.skill_dirs:
        flags = flags.model_copy(update={"skill_dirs": tuple(os.path.abspath(d) for d in flags.skill_dirs)})
    if flags.record_file or flags.output_schema:
        flags = flags.model_copy(update={"record_file": _absolute(flags.record_file), "output_schema": _absolute(flags.output_schema)})
    return Resolution(flags=flags, settings=settings, config_flags=config_flags, resumed=resumed, model_flags=taken,
                      environ=environ)


def _find(flags: Flags, cwd: str | None, environ: Mapping[str, str] | None) -> Resumed:
    """The session --resume names, or the newest one of the working directory (--continue), read
    from the journal."""
    from ..sessions.journal import JournalError, find_session, journal_path, list_sessions, read_events
    from ..sessions.resume import resume_point

    journal = journal_path(load_home(environ))
    if flags.resume:
        row = find_session(journal, flags.resume)
    else:
        where = str(Path(cwd or os.getcwd()).resolve())
        newest = list_sessions(journal, where, limit=1)
        if not newest:
            raise JournalError(f"no journaled session in {where}; `osprey sessions list --all` shows the saved ones")
        row = newest[0]
    events = read_events(journal, row.id)
    return Resumed(row=row, events=events, point=resume_point(events))


def _recorded(events: list[Event], config_flags: Mapping[str, Any]) -> dict[str, str]:
    """The provider, model and effort of a session's record that the command line leaves open. A
    provider chosen here (--provider, or --replay) chooses the model too: a recorded model name
    belongs to the recorded provider."""
    from ..sessions.resume import recorded_model

    if config_flags.get("provider") is not None or config_flags.get("replay_file") is not None:
        return {}
    return {k: v for k, v in recorded_model(events).items() if k in MODEL_FLAGS and config_flags.get(k) is None}
