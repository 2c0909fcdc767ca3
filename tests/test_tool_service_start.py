"""The ToolService comes up in the background while the session does its first model request: a
tool call made before it answers waits for it, a failed start ends the session with its error
(the model request in flight is cancelled), and closing a session whose service is still
starting leaves nothing behind. The homes are real local dispatchers; a gate holds one back.
A home passed to a session is borrowed: the session leaves it open, and its owner (the test)
closes it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from session_harness import FAST_RETRY, FakeProvider, Harness, calls, text

from osprey.errors import DispatcherError
from osprey.events import TaskEnd, ToolCallEvent, ToolResultEvent
from osprey.messages import ModelRequest, ModelTurn
from osprey.session.core import Session
from osprey.toolservice.homes import LocalDispatcher


class GatedDispatcher(LocalDispatcher):
    """A real local dispatcher whose process is started at once but whose coming up waits for
    `gate`, then fails with `failure` if one is given."""

    def __init__(self, roots: list[str], gate: asyncio.Event, failure: str | None = None) -> None:
        super().__init__(roots)
        self.gate = gate
        self.failure = failure

    async def _come_up(self) -> None:
        await self.gate.wait()
        if self.failure is not None:
            raise DispatcherError(self.failure)
        await super()._come_up()


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path, {"notes.txt": "alpha\nbeta\n"})


async def gated_session(harness: Harness, script: list[Any], failure: str | None = None, trace: Any = None) -> tuple[Session, FakeProvider, GatedDispatcher]:
    gate = asyncio.Event()
    home = GatedDispatcher([str(harness.workspace)], gate, failure)
    await home.begin()
    provider = FakeProvider(script)
    session = Session(harness.options("never", None, FAST_RETRY, ()), emit=harness.events.append, provider=provider, home=home,
                      trace=trace or (lambda _: None))
    await session.start()
    return session, provider, home



async def test_a_turn_without_tools_never_waits_for_the_tool_service(harness: Harness) -> None:
    session, provider, home = await gated_session(harness, [text("done")])
    try:
        end = await asyncio.wait_for(session.submit("Say done."), 30)
        assert (end.outcome, end.final_text) == ("Completed", "done")
        assert home.starting is not None and not home.starting.done()  # still held back all along
        assert home.proc is not None and home.proc.returncode is None
    finally:
        await session.close()
    # Borrowed: left open by the session, still held back.
    assert home.proc is not None and home.proc.returncode is None and not home.closed
    await home.close()
    assert home.proc is None and home.dir is None  # the held start was cancelled, the process stopped


async def test_a_tool_call_made_before_the_service_answers_waits_for_it(harness: Harness) -> None:
    steps: list[str] = []
    session, provider, home = await gated_session(harness, [calls(("read_file", {"path": "notes.txt"})), text("read it")], trace=steps.append)
    try:
        task = asyncio.create_task(session.submit("Read notes.txt."))
        while not any(isinstance(e, ToolCallEvent) for e in harness.events):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        assert not any(isinstance(e, ToolResultEvent) for e in harness.events)  # waiting, not failed
        assert "tool service ready" not in steps
        home.gate.set()
        end = await asyncio.wait_for(task, 30)
    finally:
        await session.close()
        await home.close()
    assert end.outcome == "Completed"
    [result] = [e for e in harness.events if isinstance(e, ToolResultEvent)]
    assert result.ok and "beta" in result.output
    assert "tool service ready" in steps


async def test_a_failed_start_cancels_the_model_request_and_ends_the_task_with_its_error(harness: Harness) -> None:
    cancelled: list[bool] = []

    async def slow(request: ModelRequest) -> ModelTurn:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return text("never")

    session, provider, home = await gated_session(harness, [slow], failure="the local dispatcher did not start serving: test")
    try:
        task = asyncio.create_task(session.submit("Do the task."))
        while not provider.requests:
            await asyncio.sleep(0.01)
        home.gate.set()
        end = await asyncio.wait_for(task, 30)
        assert cancelled == [True]
        assert (end.outcome, end.exit_status) == ("Error", 1)
        assert end.error == "the local dispatcher did not start serving: test"
        assert isinstance(session.tools_failure, DispatcherError)
        # The session cannot go on: a later prompt ends the same way, without asking the model.
        again = await asyncio.wait_for(session.submit("Try again."), 30)
        assert (again.outcome, again.error) == ("Error", "the local dispatcher did not start serving: test")
        assert len(provider.requests) == 1
    finally:
        closed = await session.close()
    assert closed is not None and closed.outcome == "Error"
    assert not home.closed  # borrowed
    await home.close()
    assert home.proc is None and home.dir is None
    assert [e.outcome for e in harness.events if isinstance(e, TaskEnd)] == ["Error", "Error"]


async def test_a_failure_while_a_tool_call_waits_fails_that_call_and_the_task(harness: Harness) -> None:
    session, provider, home = await gated_session(harness, [calls(("read_file", {"path": "notes.txt"})), text("unreachable")],
                                                  failure="the lane could not start: test")
    try:
        task = asyncio.create_task(session.submit("Read notes.txt."))
        while not any(isinstance(e, ToolCallEvent) for e in harness.events):
            await asyncio.sleep(0.01)
        home.gate.set()
        end = await asyncio.wait_for(task, 30)
    finally:
        await session.close()
        await home.close()
    assert (end.outcome, end.error) == ("Error", "the lane could not start: test")
    assert len(provider.requests) == 1  # the model was not asked again with the failed result


async def test_closing_a_session_whose_dispatcher_is_still_starting_leaves_nothing(harness: Harness) -> None:
    session = Session(harness.options("never", None, FAST_RETRY, ()), emit=harness.events.append, provider=FakeProvider([]))
    await session.start()
    home = session.home
    assert isinstance(home, LocalDispatcher) and home.proc is not None
    proc, directory = home.proc, home.dir
    assert directory is not None and os.path.isdir(directory)
    await session.close()
    assert proc.returncode is not None
    assert not os.path.exists(directory)


async def test_a_session_s_tools_work_once_its_dispatcher_is_up(harness: Harness) -> None:
    end, provider = await harness.run([calls(("bash", {"command": "echo hi"})), text("ok")])
    [result] = harness.of(ToolResultEvent)
    assert result.ok and "hi" in result.output
    assert end.outcome == "Completed"
