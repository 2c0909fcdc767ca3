"""One resolver for both front ends: the same flags given to `osprey agent` and to `osprey` (the
terminal UI) resolve to the same settings and session options, apart from what is decided by
whether a person can answer (the default approval policy, what --read-only stands for, the
default turn limit). Each command parses the flags as it does on the command line, then resolves
them through its own path; the journal is a real one in a private OSPREY_HOME."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click
import pytest

from osprey.cli import main
from osprey.cli.agent import agent
from osprey.cli.options import EFFORTS, HEADLESS_ONLY, HEADLESS_PROVIDERS
from osprey.config import DEFAULT_MODELS, HEADLESS_MAX_TURNS, INTERACTIVE_MAX_TURNS, ApprovalPolicy, Effort, ProviderName
from osprey.errors import ConfigError, OspreyError
from osprey.events import AssistantText, SessionStart, UserMessageEvent
from osprey.messages import AssistantMessage, UserMessage
from osprey.session.core import SessionOptions
from osprey.session.flags import FlagError, Flags, parse_flags
from osprey.sessions.journal import Journal, journal_path

RECORDED = "a1b2c3d4e5f6"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """This process's environment as `osprey` sees it: a private home with a journaled session
    (anthropic, claude-rec, effort low, run in `elsewhere`), keys, and the workspace as cwd."""
    workspace, elsewhere, home = tmp_path / "ws", tmp_path / "elsewhere", tmp_path / "home"
    for path in (workspace, elsewhere, home):
        path.mkdir()
    for name in [n for n in os.environ if n.startswith(("OSPREY_", "OPENAI_", "ANTHROPIC_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OSPREY_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.chdir(workspace)
    journal = Journal(journal_path(home))
    for event in (SessionStart(session_id=RECORDED, provider="anthropic", model="claude-rec", effort="low", cwd=str(elsewhere),
                               tool_service="local", tools=["read_file"], approval_policy="never", max_turns=5),
                  UserMessageEvent(text="What is here?"), AssistantText(turn=1, text="Nothing much.")):
        journal.record(event, RECORDED, str(elsewhere))
    journal.close()
    return {"workspace": workspace.resolve(), "elsewhere": elsewhere.resolve(), "home": home}


def headless_options(args: list[str]) -> SessionOptions:
    """`osprey agent ARGS PROMPT`, resolved as the command resolves it."""
    from osprey.headless import resolve_options

    params = agent.make_context("agent", [*args, "a prompt"]).params
    params.pop("prompt")
    return resolve_options(params).session_options()


def tui_options(args: list[str]) -> SessionOptions:
    """`osprey ARGS`, resolved as the command resolves it, and its first session's options."""
    from osprey.cli.tui import plan_for, resolve_options
    from osprey.tui.launch import session_options

    plan = plan_for(resolve_options(main.make_context("osprey", list(args)).params))
    return session_options(plan, plan.settings, "first", plan.resume)


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flat(item, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): value}


def differences(headless: SessionOptions, tui: SessionOptions) -> dict[str, tuple[Any, Any]]:
    a, b = _flat(headless.model_dump()), _flat(tui.model_dump())
    assert a.keys() == b.keys()
    return {key: (a[key], b[key]) for key in a if a[key] != b[key] and key != "session_id"}


SOCKET = "/tmp/osprey-test-lane/tools.sock"
# Flag sets, and what each must resolve to (checked on both front ends' options).
CASES: list[tuple[list[str], dict[str, Any]]] = [
    ([], {"settings.provider": "openai", "settings.model": DEFAULT_MODELS["openai"], "resume": None}),
    (["--provider", "anthropic", "--model", "claude-x", "--effort", "high"],
     {"settings.provider": "anthropic", "settings.model": "claude-x", "settings.effort": "high"}),
    (["--base-url", "http://127.0.0.1:9/v1", "--model", "local-model"],
     {"settings.base_url": "http://127.0.0.1:9/v1", "settings.model": "local-model"}),
    (["--approval-policy", "on-failure"], {"settings.approval_policy": "on-failure"}),
    (["--yolo"], {"settings.approval_policy": "never"}),
    (["--read-only"], {}),
    (["--max-turns", "7"], {"settings.max_turns": 7}),
    (["--allow", "bash(git diff *)", "--allow", "read_file"], {"allow": ["bash(git diff *)", "read_file"]}),
    (["--toolset", "readonly"], {"toolset": "readonly"}),
    (["--sandbox", "--sandbox-network"], {"settings.sandbox.enabled": True, "settings.sandbox.network": True}),
    (["--sandbox-socket", SOCKET, "--sandbox-token-file", "token"],
     {"settings.sandbox.enabled": True, "settings.sandbox.socket": SOCKET, "settings.sandbox.token_file": "{workspace}/token"}),
    (["-C", "{elsewhere}"], {"settings.cwd": "{elsewhere}"}),
    # A resumed session: its id, conversation, directory and model, unless flags say otherwise.
    (["--resume", RECORDED[:5]], {"session_id": RECORDED, "settings.cwd": "{elsewhere}", "settings.provider": "anthropic",
                                  "settings.model": "claude-rec", "settings.effort": "low", "resume.turns": 1}),
    (["--resume", RECORDED, "-C", "{workspace}", "--model", "claude-other"],
     {"settings.cwd": "{workspace}", "settings.provider": "anthropic", "settings.model": "claude-other", "settings.effort": "low"}),
    (["--resume", RECORDED, "--effort", "high"], {"settings.provider": "anthropic", "settings.model": "claude-rec", "settings.effort": "high"}),
    (["--resume", RECORDED, "--provider", "openai"], {"settings.provider": "openai", "settings.model": DEFAULT_MODELS["openai"], "settings.effort": None}),
    (["-C", "{elsewhere}", "--continue"], {"session_id": RECORDED, "settings.model": "claude-rec"}),
]


@pytest.mark.parametrize(("args", "expected"), CASES, ids=[" ".join(args) or "(none)" for args, _ in CASES])
def test_the_same_flags_resolve_the_same_in_both_front_ends(env: dict[str, Path], args: list[str], expected: dict[str, Any]) -> None:
    args = [arg.format(**env) for arg in args]
    headless, tui = headless_options(args), tui_options(args)
    assert not headless.interactive and tui.interactive
    for key, value in expected.items():
        value = value.format(**env) if isinstance(value, str) else value
        for options in (headless, tui):
            found = _flat(options.model_dump())[key]
            assert (str(found) if isinstance(found, Path) else found) == value, (key, found, value)
    if "--resume" in args or "--continue" in args:
        assert headless.session_id == tui.session_id == RECORDED
        assert headless.resume is not None and headless.resume == tui.resume
        assert headless.resume.messages == [UserMessage(content="What is here?"), AssistantMessage(text="Nothing much.")]
    # What may differ is decided by `interactive` alone.
    allowed: dict[str, tuple[Any, Any]] = {"interactive": (False, True)}
    if not {"--yolo", "--approval-policy", "--read-only"} & set(args):
        allowed["settings.approval_policy"] = ("deny-untrusted", "on-request")
    if "--read-only" in args:
        allowed["settings.approval_policy"] = ("deny-untrusted", "unless-trusted")
    if "--max-turns" not in args:
        allowed["settings.max_turns"] = (HEADLESS_MAX_TURNS, INTERACTIVE_MAX_TURNS)
    assert differences(headless, tui) == allowed


@pytest.mark.parametrize(("args", "kind", "message"), [
    (["--yolo", "--read-only"], FlagError, "choose one of --yolo, --read-only and --approval-policy"),
    (["--allow", "bash(git diff"], FlagError, "--allow 'bash(git diff'"),
    (["--sandbox-network"], FlagError, "--sandbox-network needs --sandbox"),
    (["--resume", RECORDED, "--continue"], FlagError, "choose one of --resume and --continue"),
    (["--resume", "nosuchsession"], OspreyError, "no session 'nosuchsession'"),
    (["--continue"], OspreyError, "no journaled session in"),
])
def test_flags_that_cannot_be_taken_fail_alike_in_both_front_ends(env: dict[str, Path], args: list[str], kind: type[Exception],
                                                                   message: str) -> None:
    for resolve in (headless_options, tui_options):
        with pytest.raises(kind, match=message.replace("(", r"\(").replace("|", r"\|")) as info:
            resolve(args)
        assert isinstance(info.value, FlagError) == (kind is FlagError), info.value


def test_a_recorded_model_that_no_longer_resolves_stops_both_front_ends(env: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    for resolve in (headless_options, tui_options):
        with pytest.raises(ConfigError, match="cannot go on with anthropic · claude-rec, the model session a1b2c3d4e5f6 ran with: "
                                              "ANTHROPIC_API_KEY is not set.*give --provider/--model to choose another") as info:
            resolve(["--resume", RECORDED])
        assert not isinstance(info.value, FlagError)
        assert resolve(["--resume", RECORDED, "--provider", "openai"]).settings.provider == "openai"


def test_both_commands_take_every_session_flag_and_only_agent_the_headless_ones() -> None:
    tui = {p.name for p in main.params if p.expose_value}
    headless = {p.name for p in agent.params if p.expose_value} - {"prompt"}
    assert tui <= headless
    assert headless - tui == {"replay_file", "record_file", "events_jsonl", "journal", "output_schema", "budget"}
    # Every option reaches the resolver (the two that do not are how the run prints and journals).
    assert (headless - {"events_jsonl", "journal"}) | {"interactive"} == set(Flags.model_fields)
    agent_help = {p.opts[-1]: p.help or "" for p in agent.params if isinstance(p, click.Option)}
    for flag in HEADLESS_ONLY:
        assert agent_help[flag].startswith("(osprey agent only)"), flag
    assert not any("(osprey agent only)" in (p.help or "") for p in main.params if isinstance(p, click.Option))
    # The choices offered are the settings' own.
    assert set(HEADLESS_PROVIDERS) == set(ProviderName.__args__) and set(EFFORTS) == set(Effort.__args__)
    policies = next(p for p in agent.params if p.name == "approval_policy").type
    assert isinstance(policies, click.Choice) and set(policies.choices) == set(ApprovalPolicy.__args__)


def test_the_headless_only_flags_are_refused_for_the_terminal_ui() -> None:
    for values in ({"budget": 10.0}, {"replay_file": "r.jsonl"}, {"record_file": "r.jsonl"}, {"output_schema": "s.json"}, {"provider": "replay"}):
        with pytest.raises(FlagError, match="is an option of `osprey agent` only"):
            parse_flags(values, interactive=True)
        assert parse_flags(values, interactive=False).interactive is False
    with pytest.raises(FlagError, match="--max-turns: "):
        parse_flags({"max_turns": 0}, interactive=False)
    with pytest.raises(FlagError, match="--no-such"):
        parse_flags({"no_such": 1}, interactive=False)
