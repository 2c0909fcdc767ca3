"""The headless terminal renderer puts each tool result under its own call: calls run together print
their headers first, so a result that does not follow its own header gets the call named again
(`↳ name(first argument)`) above it; a result that follows its call gets nothing extra."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from test_e2e_agent import OSPREY, run_on_pty

from osprey.events import ToolCallEvent, ToolResultEvent
from osprey.render import TerminalRenderer
from osprey.testing.model_server import ModelServer, Reply
from osprey.testing.model_server import ToolCall as Call

HEADER = re.compile(r"^(?:▸|↳) (\w+)\((.*)\)$")


def call(call_id: str, path: str, name: str = "read_file", **more: object) -> ToolCallEvent:
    return ToolCallEvent(turn=1, id=call_id, name=name, arguments={"path": path, **more})


def result(call_id: str, output: str, name: str = "read_file", ok: bool = True) -> ToolResultEvent:
    return ToolResultEvent(turn=1, id=call_id, name=name, ok=ok, output=output, error_category=None if ok else "not_found")


def shown(*events: ToolCallEvent | ToolResultEvent) -> list[str]:
    out = io.StringIO()
    renderer = TerminalRenderer(out, io.StringIO(), color=False)
    for event in events:
        renderer(event)
    return out.getvalue().splitlines()


def owner_of(lines: list[str], text: str) -> str:
    """The header nearest above the line `text` (the call a reader takes that line to belong to)."""
    at = lines.index(text)
    return next(line for line in reversed(lines[:at]) if HEADER.match(line))


def test_results_in_the_order_of_their_calls_each_get_their_call_named() -> None:
    lines = shown(call("a", "a.txt"), call("b", "b.txt"), result("a", "alpha"), result("b", "beta"))
    assert lines == [
        "▸ read_file(path='a.txt')",
        "▸ read_file(path='b.txt')",
        "↳ read_file(path='a.txt')",
        "  alpha",
        "↳ read_file(path='b.txt')",
        "  beta",
    ]
    assert owner_of(lines, "  alpha").endswith("(path='a.txt')") and owner_of(lines, "  beta").endswith("(path='b.txt')")


def test_a_result_right_under_its_call_is_not_named_again() -> None:
    lines = shown(call("a", "a.txt"), call("b", "b.txt"), result("b", "beta"), result("a", "alpha\nmore"))
    assert lines == [
        "▸ read_file(path='a.txt')",
        "▸ read_file(path='b.txt')",
        "  beta",
        "↳ read_file(path='a.txt')",
        "  alpha",
        "  more",
    ]
    assert owner_of(lines, "  beta") == "▸ read_file(path='b.txt')"
    assert owner_of(lines, "  alpha") == owner_of(lines, "  more") == "↳ read_file(path='a.txt')"


def test_calls_one_after_another_print_no_repeated_header() -> None:
    lines = shown(call("a", "a.txt"), result("a", "alpha"), call("b", "b.txt"), result("b", "no such file", ok=False))
    assert lines == ["▸ read_file(path='a.txt')", "  alpha", "▸ read_file(path='b.txt')", "  no such file"]


def test_the_repeated_header_names_the_first_argument_only() -> None:
    lines = shown(
        ToolCallEvent(turn=1, id="g", name="grep", arguments={"pattern": "x" * 80, "glob": "*.py"}),
        ToolCallEvent(turn=1, id="l", name="list_directory", arguments={}),
        result("g", "a.py:1:x", name="grep"), result("l", "a.py", name="list_directory"),
    )
    assert lines[0] == f"▸ grep(pattern='{'x' * 60}…', glob='*.py')"
    assert lines[2:] == [f"↳ grep(pattern='{'x' * 60}…', …)", "  a.py:1:x", "↳ list_directory()", "  a.py"]


def test_the_repeated_header_is_cleaned_and_styled_as_a_call() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, io.StringIO(), color=True)
    for event in (ToolCallEvent(turn=1, id="a", name="read\x1b[2Jfile", arguments={"path": "a\x1b]0;x\x07.txt"}),
                  call("b", "b.txt"), result("a", "alpha"), result("b", "beta")):
        renderer(event)
    repeated = out.getvalue().splitlines()[2]
    assert repeated.startswith("\x1b[36m↳ read") and repeated.endswith("\x1b[0m")
    assert "\x1b[2J" not in repeated and "\x1b]0" not in repeated and "\x07" not in repeated


def test_live_output_of_a_lone_command_is_unchanged() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, io.StringIO(), color=False)
    renderer(ToolCallEvent(turn=1, id="c", name="bash", arguments={"command": "make"}))
    renderer.tool_output("c", b"one\ntw")
    renderer.tool_output("c", b"o")
    renderer(ToolResultEvent(turn=1, id="c", name="bash", ok=False, error_category="exit_code", output="one\ntwo\nexit code 2"))
    assert out.getvalue().splitlines() == ["▸ bash(command='make')", "  one", "  two", "  exit code 2"]


def test_live_output_and_results_interleaved_each_sit_under_their_call() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, io.StringIO(), color=False)
    renderer(ToolCallEvent(turn=1, id="c", name="bash", arguments={"command": "make", "timeout_ms": 9}))
    renderer(call("b", "b.txt"))
    renderer.tool_output("c", b"building")  # stops mid-line
    renderer(result("b", "beta"))
    renderer.tool_output("c", b" done\n")
    renderer(ToolResultEvent(turn=1, id="c", name="bash", ok=True, output="building done\nexit code 0"))
    lines = out.getvalue().splitlines()
    assert lines == [
        "▸ bash(command='make', timeout_ms='9')",
        "▸ read_file(path='b.txt')",
        "↳ bash(command='make', …)",
        "  building",
        "↳ read_file(path='b.txt')",
        "  beta",
        "↳ bash(command='make', …)",
        "   done",
        "  exit code 0",
    ]


def test_a_result_after_a_child_sessions_lines_names_its_call() -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, io.StringIO(), color=False)
    renderer(ToolCallEvent(turn=1, id="t", name="task", arguments={"description": "look"}))
    renderer(ToolCallEvent(turn=1, id="x", name="grep", arguments={"pattern": "y"}, agent_id="sub1", parent_id="s"))
    renderer(ToolResultEvent(turn=1, id="t", name="task", ok=True, output="found it"))
    assert out.getvalue().splitlines() == ["▸ task(description='look')", "[sub1] ▸ grep", "↳ task(description='look')", "  found it"]


@pytest.mark.e2e
def test_osprey_agent_on_a_terminal_shows_two_reads_each_under_its_call(workspace: Path, model_server: ModelServer,
                                                                          osprey_env: dict[str, str]) -> None:
    (workspace / "a.txt").write_text("alpha-content\n")
    (workspace / "b.txt").write_text("beta-content\n")
    model_server.add(Reply.tool_calls([Call("read_file", {"path": "a.txt"}), Call("read_file", {"path": "b.txt"})]),
                     Reply.text("Both read."))
    rc, screen, stderr = run_on_pty(osprey_env, [OSPREY, "agent", "-C", str(workspace), "--base-url", model_server.base_url, "Read both."])
    assert rc == 0, screen + stderr
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in screen.splitlines()]
    first = lines.index("▸ read_file(path='a.txt')")
    assert lines[first + 1] == "▸ read_file(path='b.txt')", screen
    alpha = next(line for line in lines if "alpha-content" in line)
    beta = next(line for line in lines if "beta-content" in line)
    assert owner_of(lines, alpha) == "↳ read_file(path='a.txt')", screen
    assert owner_of(lines, beta) == "↳ read_file(path='b.txt')", screen
    assert lines.index(alpha) < lines.index(beta) < lines.index("Both read."), screen
