"""MCP prompts as slash commands (`osprey.mcp.prompts`): their names, parsing what is typed after
the command into the prompt's arguments, rendering what the server returns into one prompt text,
and the errors; against small in-memory servers, then against the SDK test server over stdio."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from homes import local_home

from osprey.errors import OspreyError
from osprey.mcp.prompts import (
    MAX_PROMPT_CHARS,
    McpPromptError,
    PromptCommand,
    command_name,
    commands_of,
    find,
    parse_arguments,
    prompt_commands,
    render,
    run_prompt,
)

SDK_SERVER = Path(__file__).parent / "mcp_servers" / "sdk_server.py"


@dataclass
class Prompt:
    name: str
    description: str | None = None
    arguments: tuple[tuple[str, str | None, bool], ...] = ()


@dataclass
class Server:
    """A server as the prompt commands see it: its spec, state, prompts and `get_prompt`."""

    name: str
    prompts: list[Prompt]
    state: str = "ready"
    error: str | None = None
    answer: Any = None  # the messages get_prompt returns, or an exception it raises
    delay: float = 0.0
    asked: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    tools: tuple[Any, ...] = ()

    @property
    def spec(self) -> Any:
        return SimpleNamespace(name=self.name, tool_timeout_sec=0.05)

    async def get_prompt(self, name: str, arguments: dict[str, str]) -> list[tuple[str, str]]:
        self.asked.append((name, arguments))
        await asyncio.sleep(self.delay)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return list(self.answer or [("user", f"{name} {arguments}")])


def servers(*items: Server) -> Any:
    return SimpleNamespace(servers={s.name: s for s in items})


REVIEW = Prompt("review", "Ask for a review\nof a subject.", (("subject", "what to review", True), ("tone", None, False)))


def review_command() -> PromptCommand:
    [command] = commands_of([Server("Git.Hub", [REVIEW])])
    return command


def test_names_are_sanitized_like_tool_names_in_lower_case() -> None:
    assert command_name("Git.Hub", "Review PR!") == "mcp__git_hub__review_pr_"
    assert command_name("a-b", "x_y") == "mcp__a-b__x_y"
    assert len(command_name("s", "p" * 500)) == 128


def test_only_ready_servers_prompts_are_commands_and_a_name_taken_ends_with_a_hash() -> None:
    ready = Server("git", [REVIEW, Prompt("Review"), Prompt("Review")])  # meets `review` once in lower case
    starting = Server("web", [Prompt("search")], state="starting")
    failed = Server("db", [Prompt("query")], state="failed", error="exited with code 2")
    found = prompt_commands(servers(ready, starting, failed))
    assert [c.name for c in found] == ["mcp__git__review", "mcp__git__review_2f773408"]
    assert [(c.server, c.prompt) for c in found] == [("git", "review"), ("git", "Review")]
    assert prompt_commands(None) == []


def test_usage_and_about_name_the_arguments() -> None:
    command = review_command()
    assert command.usage == "/mcp__git_hub__review SUBJECT [TONE]"
    assert command.about == "Ask for a review of a subject. (arguments: subject, tone?)"
    [bare] = commands_of([Server("s", [Prompt("hello")])])
    assert bare.usage == "/mcp__s__hello" and bare.about == "The prompt hello of the MCP server s."
    assert find([command, bare], "MCP__S__HELLO") is bare and find([command], "nothing") is None


def test_positional_words_fill_the_arguments_in_declared_order() -> None:
    command = review_command()
    assert parse_arguments(command, "parser.py") == {"subject": "parser.py"}
    assert parse_arguments(command, "'the parser' harsh") == {"subject": "the parser", "tone": "harsh"}
    assert parse_arguments(command, '"a \\"quoted\\" one"') == {"subject": 'a "quoted" one'}


def test_key_value_words_name_arguments_and_mix_with_positional_ones() -> None:
    command = review_command()
    assert parse_arguments(command, "tone=dry subject='the lexer'") == {"subject": "the lexer", "tone": "dry"}
    assert parse_arguments(command, "tone=dry lexer.py") == {"subject": "lexer.py", "tone": "dry"}
    assert parse_arguments(command, "subject='a=b' tone=") == {"subject": "a=b", "tone": ""}


@pytest.mark.parametrize(("typed", "said"), [
    ("", "the required argument subject is missing; usage: /mcp__git_hub__review SUBJECT [TONE]; or name them: subject=VALUE tone=VALUE"),
    ("tone=dry", "the required argument subject is missing"),
    ("colour=red x", "it has no argument 'colour' (its arguments: subject, tone)"),
    ("subject=a subject=b", "the argument 'subject' is given twice"),
    ("one two three", "too many values (three left over); quote a value holding spaces"),
    ("'unclosed", "No closing quotation; usage: /mcp__git_hub__review"),
])
def test_argument_errors_name_what_is_wrong_and_the_usage(typed: str, said: str) -> None:
    with pytest.raises(McpPromptError) as caught:
        parse_arguments(review_command(), typed)
    assert said in str(caught.value) and "/mcp__git_hub__review" in str(caught.value)
    assert isinstance(caught.value, OspreyError)


def test_a_prompt_without_arguments_takes_none() -> None:
    [bare] = commands_of([Server("s", [Prompt("hello")])])
    assert parse_arguments(bare, "  ") == {}
    with pytest.raises(McpPromptError, match="it takes no arguments"):
        parse_arguments(bare, "surplus")
    with pytest.raises(McpPromptError, match="at most 100,000 are taken"):
        parse_arguments(bare, "x" * 100_001)


def test_messages_are_joined_an_assistant_one_marked_and_control_characters_dropped() -> None:
    text = render([("user", "Look at this:\r\n\x1b]0;title\x07code"), ("assistant", "I see it."), ("user", "Now fix it.")])
    assert text == "Look at this:\ncode\n\n[assistant message]\nI see it.\n\nNow fix it."
    assert "\x1b" not in text and "\x07" not in text


def test_a_long_prompt_is_cut_with_a_note() -> None:
    text = render([("user", "x" * (MAX_PROMPT_CHARS + 5_000))])
    assert text.startswith("x" * MAX_PROMPT_CHARS)
    assert text.endswith("\n[cut: 5,000 more characters of the prompt]")
    assert len(render([("user", "y" * 50)], limit=10)) < 60


async def test_run_prompt_asks_the_server_with_the_parsed_arguments() -> None:
    server = Server("git", [REVIEW], answer=[("user", "Review it."), ("assistant", "Sure.")])
    [command] = prompt_commands(servers(server))
    assert await run_prompt(servers(server), command, "'the diff' tone=dry") == "Review it.\n\n[assistant message]\nSure."
    assert server.asked == [("review", {"subject": "the diff", "tone": "dry"})]


async def test_run_prompt_errors_a_server_not_ready_its_own_error_a_timeout_and_an_empty_prompt() -> None:
    server = Server("git", [REVIEW])
    [command] = prompt_commands(servers(server))
    server.state, server.error = "restarting", "it exited with code 4"
    with pytest.raises(McpPromptError, match="the MCP server git is restarting: it exited with code 4; /status shows its state"):
        await run_prompt(servers(server), command, "x")
    with pytest.raises(McpPromptError, match="not part of this session"):
        await run_prompt(servers(), command, "x")
    server.state = "ready"
    server.answer = OspreyError("the MCP server git: unknown prompt review")
    with pytest.raises(McpPromptError, match="/mcp__git__review: the MCP server git: unknown prompt review"):
        await run_prompt(servers(server), command, "x")
    server.answer, server.delay = None, 5.0
    with pytest.raises(McpPromptError, match="did not return the prompt within 1.55 s"):
        await run_prompt(servers(server), command, "x")
    server.answer, server.delay = [("user", " \x1b[2J ")], 0.0
    with pytest.raises(McpPromptError, match="returned an empty prompt"):
        await run_prompt(servers(server), command, "x")
    assert len(server.asked) == 3  # a bad argument never reaches the server
    with pytest.raises(McpPromptError, match="missing"):
        await run_prompt(servers(server), command, "")
    assert len(server.asked) == 3


async def test_the_sdk_servers_prompt_is_a_command_and_renders(tmp_path: Path) -> None:
    from osprey.config.mcp import McpServerSpec
    from osprey.mcp.connection import McpServers

    spec = McpServerSpec(name="Tester", origin="user", transport="stdio", command=sys.executable, args=(str(SDK_SERVER),))
    async with local_home([str(tmp_path)]) as home:
        mcp = McpServers([spec], client=home.client, workdir=str(tmp_path))
        mcp.start()
        try:
            await mcp.wait_started(60)
            assert mcp.servers["Tester"].state == "ready", mcp.servers["Tester"].error
            [command] = prompt_commands(mcp)
            assert (command.name, command.usage) == ("mcp__tester__review", "/mcp__tester__review SUBJECT [TONE]")
            assert await run_prompt(mcp, command, "parser.py") == "Review parser.py in a kind tone."
            assert await run_prompt(mcp, command, "tone=stern 'the lexer'") == "Review the lexer in a stern tone."
        finally:
            await mcp.close()
    with pytest.raises(McpPromptError, match="the MCP server Tester is stopped"):
        await run_prompt(mcp, command, "x")


def test_what_a_server_declares_is_shown_bounded_and_sent_back_as_declared() -> None:
    odd = "path\x1b[2J" + "p" * 100
    many = tuple((f"a{i}", None, False) for i in range(20))
    [command, crowded] = commands_of([Server("s", [Prompt("odd\x07", None, ((odd, "the\nfile", True),)), Prompt("many", None, many)])])
    assert "\x1b" not in command.usage and "\x07" not in command.about and len(command.usage) < 100
    assert parse_arguments(command, "x.py") == {odd: "x.py"}  # the name the server declared
    assert crowded.usage.endswith("[A15] …") and crowded.about.endswith("a15?, …)")
    with pytest.raises(McpPromptError) as caught:
        parse_arguments(crowded, "zz=" + "v" * 50_000)
    assert len(str(caught.value)) < 1_000
