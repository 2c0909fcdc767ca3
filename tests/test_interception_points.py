"""The interception points hooks plug into, driven through the session core: a prompt blocked or
given context, context added beside a call's result, and compaction announced."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest
from session_harness import Harness, calls, text

from osprey.events import Notice, TaskEnd, ToolResultEvent, UserMessageEvent
from osprey.interception import Interceptor, PendingCall, PromptSubmission, PromptVerdict, Verdict


class Recorder(Interceptor):
    name = "recorder"

    def __init__(self, prompt: PromptVerdict | None = None, call: Verdict | None = None) -> None:
        self.prompt = prompt
        self.call = call
        self.prompts: list[str] = []
        self.compactions: list[tuple[str, int]] = []

    async def prompt_submitted(self, prompt: PromptSubmission) -> PromptVerdict | None:
        self.prompts.append(prompt.text)
        return self.prompt

    async def before_call(self, call: PendingCall) -> Verdict | None:
        return self.call

    async def before_compaction(self, reason: Literal["manual", "auto"], messages: int) -> None:
        self.compactions.append((reason, messages))


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path, {"a.txt": "alpha\n"})


async def test_a_blocked_prompt_ends_the_task_without_asking_the_model_and_stays_out_of_the_conversation(harness: Harness) -> None:
    blocker = Recorder(prompt=PromptVerdict(block=True, reason="no deploys on Fridays", source="hook guard.sh"))
    session, provider = await harness.start([text("never")], interceptors=(blocker,))
    try:
        end = await session.submit("deploy it")
        assert (end.outcome, end.exit_status) == ("Error", 1)
        assert end.error == "the prompt was blocked by hook guard.sh: no deploys on Fridays"
        assert provider.requests == [] and session.messages == []
        assert any(isinstance(e, Notice) and "no deploys on Fridays" in e.message for e in harness.events)
        blocker.prompt = None
        again = await session.submit("say hi")
    finally:
        await session.close()
    assert again.outcome == "Completed" and blocker.prompts == ["deploy it", "say hi"]
    assert [m.content for m in provider.requests[0].messages] == ["say hi"]  # type: ignore[union-attr]


async def test_prompt_context_reaches_the_model_with_the_prompt(harness: Harness) -> None:
    adder = Recorder(prompt=PromptVerdict(context="the branch is release-2"))
    end, provider = await harness.run([text("ok")], prompt="what branch?", interceptors=(adder,))
    assert end.outcome == "Completed"
    [message] = provider.requests[0].messages
    assert message.content == "what branch?\n\n[context] the branch is release-2"  # type: ignore[union-attr]
    [shown] = harness.of(UserMessageEvent)
    assert "release-2" in shown.text


@pytest.mark.parametrize("verdict", [Verdict("continue", context="lint is slow here"), Verdict.deny("hook", "not now", ) ])
async def test_call_context_is_added_after_the_result_whatever_the_verdict(harness: Harness, verdict: Verdict) -> None:
    from dataclasses import replace

    verdict = replace(verdict, context="lint is slow here")
    end, provider = await harness.run([calls(("read_file", {"path": "a.txt"})), text("done")], interceptors=(Recorder(call=verdict),))
    [result] = harness.of(ToolResultEvent)
    assert result.output.endswith("\n\n[context] lint is slow here")
    assert result.ok == (verdict.action != "deny")
    sent: Any = provider.requests[1].messages[-1]
    assert sent.content.endswith("[context] lint is slow here")


async def test_compaction_is_announced_before_it_happens(harness: Harness) -> None:
    watcher = Recorder()
    session, provider = await harness.start([text("first answer"), text("the summary")], interceptors=(watcher,))
    try:
        await session.submit("start")
        await session.compact()
    finally:
        await session.close()
    assert watcher.compactions == [("manual", 2)]
    assert [e.outcome for e in harness.of(TaskEnd)] == ["Completed"]
