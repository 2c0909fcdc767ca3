"""The TUI's plain parts: slash-command parsing and completion, the transcript, the prompt history, TuiApprover, TuiAsker."""

from __future__ import annotations

import asyncio

from osprey.policy.approvals import ApprovalAnswer, ApprovalRequest
from osprey.tui import commands
from osprey.tui.approver import CLOSING_REASON, TuiApprover
from osprey.tui.asker import TuiAsker
from osprey.tui.transcript import PromptHistory, Transcript, format_arguments


def test_parse_commands() -> None:
    assert commands.parse("/export  notes.md ") == ("export", "notes.md")
    assert commands.parse("  /HELP") == ("help", "")
    assert commands.parse("fix /etc/hosts parsing") is None
    assert commands.parse("//not a command") is None


def test_matching_and_completion() -> None:
    assert [c.name for c in commands.matching("/")] == [c.name for c in commands.COMMANDS]
    assert [c.name for c in commands.matching("/t")] == ["tools", "timestamps"]
    assert commands.matching("/export x") == [] and commands.matching("hello") == []
    assert commands.complete("/ex") is None  # export and extensions share only the ex
    assert commands.complete("/exp") == "/export "
    assert commands.complete("/ver") == "/verify "
    assert commands.complete("/t") is None  # tools and timestamps share only the t
    assert commands.complete("/ti") == "/timestamps "
    assert commands.complete("/zzz") is None
    assert all(c.usage.startswith(f"/{c.name}") for c in commands.COMMANDS)
    assert "/copy [all]" in commands.help_text()
    assert commands.complete("/sess") == "/session"  # /session and /sessions
    assert not hasattr(commands, "planned_text")  # every command in the registry works
    assert commands.complete("/moa-") == "/moa-config "
    assert commands.complete("/deep") == "/deep-research "


def test_transcript_markdown_and_last_answer() -> None:
    t = Transcript()
    assert t.last_answer() is None
    t.add("user", "why?")
    t.add("assistant", "Because.")
    t.add("tool", "bash\ncommand: echo ```")
    t.add("assistant", "  ")
    t.add("notice", "Stopped")
    assert t.last_answer() == "Because."
    md = t.to_markdown()
    assert md.startswith("# Osprey transcript")
    assert "## You\n\nwhy?" in md and "## Osprey\n\nBecause." in md
    assert "````text\nbash\ncommand: echo ```\n````" in md  # a fence the output cannot close
    assert "> Stopped" in md


def test_questions_task_lists_and_long_notices_in_the_transcript() -> None:
    from osprey.tui.transcript import question_markdown, todo_markdown

    t = Transcript()
    t.add("question", question_markdown("Which port?\nThe default is taken.", "8081"))
    t.add("question", question_markdown("Keep the old file?", None))
    t.add("question", question_markdown("Anything else?", ""))
    t.add("todo", todo_markdown([{"content": "read\n  the code", "status": "completed"}, {"content": "fix it", "status": "in_progress"},
                                 {"content": "test it", "status": "pending"}]))
    t.add("todo", todo_markdown([]))
    t.add("notice", "verification objections still open:\n- FAILED: make test (exit 2)")
    md = t.to_markdown()
    assert "## Osprey asks\n\n> Which port?\n> The default is taken.\n\n**Answer:**\n\n> 8081" in md
    assert "> Keep the old file?\n\n**Answer:**\n\n_(closed without an answer)_" in md
    assert "**Answer:**\n\n_(an empty answer)_" in md
    assert "**Tasks:**\n\n- [x] read the code\n- [~] fix it _(in progress)_\n- [ ] test it" in md
    assert "**Tasks:**\n\n_(cleared)_" in md
    assert "> verification objections still open:\n> - FAILED: make test (exit 2)" in md


def test_format_arguments_keeps_a_command_whole() -> None:
    command = "echo " + "x" * 500 + " && make test"
    assert format_arguments({"command": command, "timeout": 30}) == f"command: {command}\ntimeout: 30"


def test_prompt_history_walks_and_keeps_the_draft() -> None:
    h = PromptHistory()
    assert h.previous("draft") is None
    h.add("one")
    h.add("two")
    h.add("two")
    assert h.items == ["one", "two"]
    assert h.previous("half typed") == "two"
    assert h.previous("two") == "one"
    assert h.previous("one") is None
    assert h.next() == "two"
    assert h.next() == "half typed"
    assert h.next() is None


def _request(n: int) -> ApprovalRequest:
    return ApprovalRequest(call_id=f"c{n}", tool="bash", arguments={"command": f"echo {n}"}, policy="on-request", reason="", suggested_rule="bash")


async def test_approver_asks_one_at_a_time_in_order() -> None:
    shown: list[str] = []
    gate: asyncio.Queue[ApprovalAnswer] = asyncio.Queue()

    async def show(request: ApprovalRequest) -> ApprovalAnswer:
        shown.append(request.call_id)
        return await gate.get()

    approver = TuiApprover(show)
    asks = [asyncio.ensure_future(approver.ask(_request(n))) for n in range(3)]
    await asyncio.sleep(0.01)
    assert shown == ["c0"] and approver.pending == 3
    await gate.put(ApprovalAnswer(decision="allow_once"))
    await asyncio.sleep(0.01)
    assert shown == ["c0", "c1"]
    await gate.put(ApprovalAnswer(decision="deny", reason="no"))
    await gate.put(ApprovalAnswer(decision="allow_always", scope="global"))
    answers = await asyncio.gather(*asks)
    assert [a.decision for a in answers] == ["allow_once", "deny", "allow_always"]
    assert approver.pending == 0


async def test_deny_all_answers_pending_and_later_asks() -> None:
    cancelled: list[str] = []

    async def show(request: ApprovalRequest) -> ApprovalAnswer:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(request.call_id)
            raise
        raise AssertionError("unreachable")

    approver = TuiApprover(show)
    asks = [asyncio.ensure_future(approver.ask(_request(n))) for n in range(2)]
    await asyncio.sleep(0.01)
    assert approver.deny_all() == 2
    answers = await asyncio.wait_for(asyncio.gather(*asks), 5)
    assert all(a.decision == "deny" and a.reason == CLOSING_REASON for a in answers)
    await asyncio.sleep(0)
    assert cancelled == ["c0"]  # the prompt on screen was taken down; the queued one never shown
    later = await asyncio.wait_for(approver.ask(_request(9)), 5)
    assert later.decision == "deny"


def test_an_edit_is_shown_as_a_unified_diff() -> None:
    from osprey.tui.transcript import MAX_DIFF_LINES, edit_diff

    lines = edit_diff("edit_file", {"path": "calc.py", "old_string": "def add(a, b):\n    return a - b\n", "new_string": "def add(a, b):\n    return a + b\n"})
    assert lines is not None
    assert lines[:2] == ["--- a/calc.py", "+++ b/calc.py"]
    assert "-    return a - b" in lines and "+    return a + b" in lines
    assert edit_diff("write_file", {"path": "x", "content": "y"}) is None
    assert edit_diff("edit_file", {"path": "x", "old_string": 3, "new_string": "y"}) is None
    many = edit_diff("edit_file", {"path": "x", "old_string": "", "new_string": "\n".join(str(i) for i in range(2000))})
    assert many is not None and len(many) == MAX_DIFF_LINES + 1 and many[-1].startswith("[…")


def test_the_status_line_shows_an_estimated_cost_when_prices_are_known() -> None:
    from osprey.catalog import ModelInfo, estimated_cost
    from osprey.tui.presenter import status_line

    priced = ModelInfo(provider="openai", id="m", input_price=2.0, output_price=8.0)
    assert estimated_cost(1_000_000, 500_000, priced) == 6.0
    assert estimated_cost(10, 10, ModelInfo(provider="openai", id="m")) is None
    assert estimated_cost(10, 10, None) is None
    line = status_line(provider="openai", model="m", policy="on-request", home="local", input_tokens=1000, output_tokens=10, state="ready", cost=0.01234)
    assert "≈$0.0123" in line
    assert "$" not in status_line(provider="openai", model="m", policy="on-request", home="local", input_tokens=1, output_tokens=1, state="ready")


async def test_asker_asks_one_at_a_time_and_close_all_leaves_them_unanswered() -> None:
    shown: list[str] = []
    gate: asyncio.Queue[str] = asyncio.Queue()

    async def show(question: str) -> str | None:
        shown.append(question)
        return await gate.get()

    asker = TuiAsker(show)
    asks = [asyncio.ensure_future(asker.ask(f"q{n}")) for n in range(3)]
    await asyncio.sleep(0.01)
    assert shown == ["q0"] and asker.pending == 3
    await gate.put("first")
    await asyncio.sleep(0.01)
    assert shown == ["q0", "q1"]
    assert asker.close_all() == 2
    answers = await asyncio.wait_for(asyncio.gather(*asks), 5)
    assert answers == ["first", None, None]
    assert shown == ["q0", "q1"]  # the third was never put in front of the person
    assert asker.pending == 0
    assert await asyncio.wait_for(asker.ask("later"), 5) is None and shown == ["q0", "q1"]


def test_the_status_line_shows_the_task_list_progress() -> None:
    from osprey.tui.presenter import status_line

    def line(todo: tuple[int, int] | None) -> str:
        return status_line(provider="openai", model="m", policy="on-request", home="local", input_tokens=1, output_tokens=1, state="ready",
                           todo=todo)

    assert " · todo 2/5 · ready" in line((2, 5))
    assert "todo" not in line(None) and "todo" not in line((0, 0))


def test_a_bash_result_is_split_into_the_output_and_its_exit_code() -> None:
    from osprey.tui.presenter import bash_output

    assert bash_output(" a | 1 +\n\ndiff --git a/a b/a\n[exit code 0]") == (" a | 1 +\n\ndiff --git a/a b/a", 0)
    assert bash_output("[exit code 0]") == ("", 0)
    assert bash_output("fatal: not a git repository\n[exit code 128] [processes left running in the background were stopped]") == (
        "fatal: not a git repository", 128)
    # What the diff itself says is output; the tool's status is the last one, on a line of its own.
    assert bash_output("+echo [exit code 3]\n+[exit code 4]\n[exit code 1]") == ("+echo [exit code 3]\n+[exit code 4]", 1)
    assert bash_output("Error (denied): bash is switched off") == ("Error (denied): bash is switched off", None)
    assert bash_output("x [exit code 2]") == ("x [exit code 2]", None)
    assert bash_output("out\n[exit code nope]") == ("out\n[exit code nope]", None)
