"""Subagents against the scripted model server on loopback: the model's spawn_subagent,
send_input, wait_agent and cancel_agent; at most eight running children across a spawn tree (a
ninth spawn waits for a slot and says so); one requests-per-minute limit across parent and
children (measured request times); cancelling the parent leaves nothing running.

The server's script is one queue that parent and children draw from in whatever order their
requests come, so each test's replies are chosen to mean the same whoever draws them."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from session_harness import Harness
from test_session_parts import server_settings, sleepers

from osprey.agents.subagents import SpawnSlots
from osprey.events import Event, Notice, SessionStart, TaskEnd, ToolResultEvent, UserMessageEvent
from osprey.policy.approvals import ApprovalAnswer, ApprovalRequest
from osprey.session.children import ChildApprovalRequest
from osprey.session.core import Session
from osprey.sessions.journal import Journal, journal_path, read_events, session_tree
from osprey.testing.model_server import ModelServer, Reply, ToolCall

READER = ("---\nname: reader\nspawnable: true\ntools: [read_file, grep]\n---\n\nRead what you are asked to read and report it.\n")
SHELL = ("---\nname: shell\nspawnable: true\ntools: [bash, write_file]\n---\n\nRun what you are asked to run.\n")
LEADER = ("---\nname: leader\nspawnable: true\ntools: [read_file, spawn_subagent, wait_agent]\n---\n\nDelegate.\n")


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    h = Harness.under(tmp_path, {"notes.txt": "alpha\n"}, git=True)
    personas = h.workspace / ".osprey" / "personas"
    personas.mkdir(parents=True)
    for name, text in (("reader", READER), ("shell", SHELL), ("leader", LEADER)):
        (personas / f"{name}.md").write_text(text)
    return h


def spawn(persona: str, task: str = "Read notes.txt and report it.", **more: Any) -> ToolCall:
    return ToolCall("spawn_subagent", {"persona": persona, "task": task, **more})


def results(events: list[Event], name: str, *, lead: bool = True) -> list[ToolResultEvent]:
    return [e for e in events if isinstance(e, ToolResultEvent) and e.name == name and (e.agent_id is None) == lead]


def spawned_ids(events: list[Event]) -> list[str]:
    return [r.output.split()[2] for r in results(events, "spawn_subagent") if r.ok]


async def until(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


# ------------------------------------------------------------------ the tools


async def test_wait_agent_returns_each_childs_outcome_result_usage_and_session(harness: Harness) -> None:
    events: list[Event] = []
    script = [Reply.tool_calls([spawn("reader", "Read A."), spawn("reader", "Read B.")]), *[Reply.text("the notes say alpha", usage=(40, 7))] * 3]
    with ModelServer(script) as server:
        session = Session(server_settings(harness, server), emit=events.append, journal=Journal(journal_path(harness.home)))
        async with session:
            assert {"spawn_subagent", "send_input", "wait_agent", "cancel_agent"} <= set(session.tool_names())
            end = await session.submit("Delegate the reading.")
            ids = spawned_ids(events)
            assert len(ids) == 2
            waited = await session.run_tool("wait_agent", {"ids": ids, "timeout": 30})
            report = json.loads(waited.text)
        server.assert_clean()
    assert end.outcome == "Completed"
    assert [entry["id"] for entry in report] == ids
    for entry in report:
        assert entry["outcome"] == "Completed" and entry["result"] == "the notes say alpha"
        assert entry["usage"]["input_tokens"] == 40 and entry["usage"]["output_tokens"] == 7
        assert entry["session_id"] == entry["id"]
    # Each child is a persisted session in the lead's tree, with its own outcome.
    tree = session_tree(journal_path(harness.home), session.session_id)
    assert {row.id for depth, row in tree if depth == 1} == set(ids)
    assert {row.outcome for depth, row in tree if depth == 1} == {"Completed"}

    # `osprey sessions show` lists the children under their parent, with outcome and usage.
    from click.testing import CliRunner

    from osprey.cli.sessions import sessions

    shown = CliRunner().invoke(sessions, ["show", session.session_id], env={"OSPREY_HOME": str(harness.home)})
    assert shown.exit_code == 0, shown.output
    assert "2 child sessions" in shown.output
    for agent_id in ids:
        [line] = [line for line in shown.output.splitlines() if line.startswith(f"  {agent_id}")]
        assert "reader" in line and "Completed" in line and "tokens 40 in / 7 out" in line, line


async def test_a_childs_tools_are_its_personas_and_it_cannot_spawn_unless_listed(harness: Harness) -> None:
    events: list[Event] = []
    script = [Reply.tool_calls([spawn("reader"), spawn("leader")]), *[Reply.text("done")] * 3]
    with ModelServer(script) as server:
        session = Session(server_settings(harness, server), emit=events.append)
        async with session:
            await session.submit("Delegate.")
            await session.run_tool("wait_agent", {"ids": spawned_ids(events), "timeout": 30})
    starts = {e.persona: e for e in events if isinstance(e, SessionStart) and e.agent_id is not None}
    loop_tools = {"task_status", "question", "todo_write", "switch_persona"}
    assert set(starts["reader"].tools) - loop_tools == {"read_file", "grep"}
    assert set(starts["leader"].tools) - loop_tools == {"read_file", "spawn_subagent", "wait_agent"}


@pytest.mark.parametrize(("persona", "why"), [("architect", "not spawnable"), ("nobody", "nobody")])
async def test_spawning_a_persona_that_cannot_run_as_a_child_is_a_clear_error(harness: Harness, persona: str, why: str) -> None:
    events: list[Event] = []
    with ModelServer([Reply.tool_calls([spawn(persona)]), Reply.text("could not")]) as server:
        session = Session(server_settings(harness, server), emit=events.append)
        async with session:
            await session.submit("Delegate.")
            assert session.children == []
            assert session.spawn_slots.running == 0  # the slot taken for it was given back
    [result] = results(events, "spawn_subagent")
    assert not result.ok and why in result.output and result.output.startswith("Error:"), result.output


async def test_send_input_is_refused_while_the_child_works_and_taken_after(harness: Harness) -> None:
    events: list[Event] = []
    script = [Reply.tool_calls([spawn("reader")]), Reply.text("lead done"), Reply.hold(1, Reply.text("first answer")),
              Reply.text("second answer")]
    with ModelServer(script) as server:
        session = Session(server_settings(harness, server), emit=events.append)
        async with session:
            # The lead's next request draws "lead done", then its child's draws the held answer.
            await session.submit("Delegate.")
            [agent_id] = spawned_ids(events)
            assert await asyncio.to_thread(server.wait_held, 1, 30)
            busy = await session.run_tool("send_input", {"id": agent_id, "prompt": "And now?"})
            assert not busy.ok and "still working" in busy.text, busy.text
            server.release()
            first = json.loads((await session.run_tool("wait_agent", {"ids": [agent_id], "timeout": 30})).text)
            sent = await session.run_tool("send_input", {"id": agent_id, "prompt": "And now?"})
            assert sent.ok, sent.text
            second = json.loads((await session.run_tool("wait_agent", {"ids": [agent_id], "timeout": 30})).text)
            unknown = await session.run_tool("send_input", {"id": "nobody", "prompt": "hi"})
        server.assert_clean()
    assert first[0]["result"] == "first answer" and second[0]["result"] == "second answer"
    assert not unknown.ok and "no agent 'nobody'" in unknown.text


async def test_a_child_still_working_at_the_timeout_is_reported_running_and_cancel_agent_stops_it(harness: Harness) -> None:
    events: list[Event] = []
    script = [Reply.tool_calls([spawn("reader")]), Reply.text("lead done"), Reply.hold(1, Reply.text("never seen"))]
    with ModelServer(script) as server:
        session = Session(server_settings(harness, server), emit=events.append)
        async with session:
            await session.submit("Delegate.")
            [agent_id] = spawned_ids(events)
            assert await asyncio.to_thread(server.wait_held, 1, 30)
            began = time.monotonic()
            report = json.loads((await session.run_tool("wait_agent", {"ids": [agent_id], "timeout": 0.3})).text)
            assert 0.25 <= time.monotonic() - began < 10
            assert report == [{"id": agent_id, "persona": "reader", "session_id": agent_id, "outcome": "running"}]
            cancelled = await session.run_tool("cancel_agent", {"id": agent_id})
            assert session.spawn_slots.running == 0
            after = json.loads((await session.run_tool("wait_agent", {"ids": [agent_id], "timeout": 5})).text)
            server.release()
    assert cancelled.ok and "Cancelled" in cancelled.text, cancelled.text
    assert after[0]["outcome"] == "Cancelled"


# ------------------------------------------------------------------ limits


async def test_a_ninth_spawn_waits_for_a_slot_and_says_so(harness: Harness) -> None:
    events: list[Event] = []
    script = [Reply.tool_calls([spawn("reader", f"Task {n}.") for n in range(9)])]
    script += [Reply.delay(2.0, Reply.text("done"))] * 10  # long enough for eight spawns to overlap on a loaded machine
    with ModelServer(script) as server:
        session = Session(server_settings(harness, server), emit=events.append)
        async with session:
            await session.submit("Delegate nine.")
            ids = spawned_ids(events)
            assert len(ids) == 9
            report = json.loads((await session.run_tool("wait_agent", {"ids": ids, "timeout": 60})).text)
            assert session.spawn_slots.running == 0
        server.assert_clean()
    assert {entry["outcome"] for entry in report} == {"Completed"}
    spawns = results(events, "spawn_subagent")
    assert all("waited" not in r.output for r in spawns[:8])
    assert "waited" in spawns[8].output and "8 agents were running" in spawns[8].output, spawns[8].output
    assert any(isinstance(e, Notice) and "waits for a slot" in e.message for e in events)
    # At no moment did more than eight children work: each one's task, from its prompt to its end.
    spans = []
    for agent_id in ids:
        began = next(e.ts for e in events if isinstance(e, UserMessageEvent) and e.agent_id == agent_id)
        ended = next(e.ts for e in events if isinstance(e, TaskEnd) and e.agent_id == agent_id)
        spans.append((began, ended))
    points = sorted([(b, 1) for b, _ in spans] + [(e, -1) for _, e in spans])
    most = running = 0
    for _, step in points:
        running += step
        most = max(most, running)
    assert most == 8


async def test_a_spawn_waiting_for_a_slot_is_cancelled_with_its_parent() -> None:
    slots = SpawnSlots(1)
    await slots.acquire()
    waiting = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0.01)
    assert slots.full and slots.waiting == 1
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert slots.waiting == 0 and slots.running == 1
    slots.release()
    assert slots.running == 0 and not slots.full


async def test_cancelling_the_lead_ends_a_spawn_waiting_for_a_slot(harness: Harness) -> None:
    events: list[Event] = []
    script = [Reply.tool_calls([spawn("reader", "First."), spawn("reader", "Second.")]), Reply.hold(1, Reply.text("never"))]
    with ModelServer(script) as server:
        session = Session(server_settings(harness, server, agent={"max_children": 1}), emit=events.append)
        await session.start()
        working = asyncio.ensure_future(session.submit("Delegate two."))
        await until(lambda: any(isinstance(e, Notice) and "waits for a slot" in e.message for e in events))
        assert session.spawn_slots.running == 1 and session.spawn_slots.waiting == 1
        assert session.cancel()
        end = await asyncio.wait_for(working, 30)
        assert session.spawn_slots.waiting == 0
        assert len(session.children) == 1
        await asyncio.wait_for(session.close(), 30)
        assert session.spawn_slots.running == 0
    assert end.outcome == "Stopped"
    assert len(spawned_ids(events)) == 1
    assert [e.outcome for e in events if isinstance(e, TaskEnd) and e.agent_id is not None] == ["Cancelled"]


class TimedServer(ModelServer):
    """The scripted server, noting when each request arrives."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.times: list[float] = []

    def _handle(self, h: Any) -> None:
        self.times.append(time.monotonic())
        super()._handle(h)


async def test_one_requests_per_minute_limit_holds_across_parent_and_children(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    import osprey.providers.limiter as limiter

    window, per_window = 2.0, 3
    monkeypatch.setattr(limiter, "WINDOW", window)  # a minute is long for a test; the rule is the same
    events: list[Event] = []
    # Four agents (the lead, three children) draw these; each ends at its first text: 7 or 8
    # requests, more than two windows' worth.
    script = [Reply.tool_calls([spawn("reader", f"Read {n}.") for n in range(3)])]
    script += [Reply.tool_call("read_file", {"path": "notes.txt"})] * 3 + [Reply.text("done")] * 4
    with TimedServer(script) as server:
        options = server_settings(harness, server, agent={"requests_per_minute": per_window})
        session = Session(options, emit=events.append)
        async with session:
            await session.submit("Delegate.")
            report = json.loads((await session.run_tool("wait_agent", {"ids": spawned_ids(events), "timeout": 60})).text)
            assert all(child.session.provider.limiter is session.limiter for child in session.children)  # type: ignore[attr-defined]
        server.assert_clean()
        times, requests = server.times, server.requests
    assert {entry["outcome"] for entry in report} == {"Completed"}
    assert len(times) in (7, 8)
    assert sum("Read what you are asked" in str(r.body["messages"][0]["content"]) for r in requests) >= 3  # children asked too
    slack = 0.5  # between the limiter's slot and the request's arrival, on a loaded machine
    for n, at in enumerate(times):
        assert sum(1 for t in times[n:] if t - at < window - slack) <= per_window, times
    assert times[-1] - times[0] >= 2 * window - slack


# ------------------------------------------------------------------ approvals


class Recording:
    def __init__(self) -> None:
        self.asked: list[ApprovalRequest] = []

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        self.asked.append(request)
        return ApprovalAnswer(decision="deny", reason="not now")


async def test_a_childs_approval_reaches_the_parents_approver_labelled_and_headless_denies(harness: Harness) -> None:
    events: list[Event] = []
    approver = Recording()
    # The person starts the child (`run_tool`), so that only the child asks the model: a lead asking
    # at the same time could take the child's scripted answers on a loaded machine.
    script = [Reply.tool_call("write_file", {"path": "out.txt", "content": "x"}), Reply.text("child done")]
    with ModelServer(script) as server:
        options = server_settings(harness, server, approval_policy="unless-trusted")
        session = Session(options.model_copy(update={"interactive": True}), emit=events.append, approver=approver)
        async with session:
            await session.run_tool("spawn_subagent", {"persona": "shell", "task": "Write a file."})
            [agent_id] = spawned_ids(events)
            await session.run_tool("wait_agent", {"ids": [agent_id], "timeout": 30})
    [asked] = approver.asked
    assert isinstance(asked, ChildApprovalRequest) and asked.agent == "shell" and asked.agent_id == agent_id
    assert asked.tool == "write_file"
    [denied] = results(events, "write_file", lead=False)
    assert not denied.ok and not (harness.workspace / "out.txt").exists()

    # Headless: the lead's own approver denies the child's call as it would the lead's.
    events.clear()
    with ModelServer(script) as server:
        session = Session(server_settings(harness, server, approval_policy="unless-trusted"), emit=events.append)
        async with session:
            await session.run_tool("spawn_subagent", {"persona": "shell", "task": "Write a file."})
            await session.run_tool("wait_agent", {"ids": spawned_ids(events), "timeout": 30})
    [denied] = results(events, "write_file", lead=False)
    assert not denied.ok and not (harness.workspace / "out.txt").exists()


# ------------------------------------------------------------------ cancelling


async def _cancel_tree(harness: Harness, events: list[Event], **flags: Any) -> Session:
    """A lead that starts three shell children, each running a long command (and the lead one of
    its own), cancelled mid-way; returns the closed lead."""
    marker = f"sleep 97.{os.getpid()}"
    script = [Reply.tool_calls([spawn("shell", f"Wait {n}.") for n in range(3)])] + [Reply.tool_call("bash", {"command": marker})] * 4
    with ModelServer(script) as server:
        session = Session(server_settings(harness, server, **flags), emit=events.append, journal=Journal(journal_path(harness.home)))
        await session.start()
        working = asyncio.ensure_future(session.submit("Delegate and wait."))
        await until(lambda: len([e for e in events if e.type == "tool_call" and getattr(e, "name", "") == "bash"]) >= 4, 240)
        await until(lambda: len(sleepers(marker)) >= 4, 240)  # each command runs (a lane's processes are the host's too)
        assert session.cancel()
        await asyncio.wait_for(working, 60)
        children = list(session.children)
        assert len(children) == 3
        homes = {id(child.session.home) for child in children}
        assert homes == ({id(session.home)} if session.child_homes == "shared" else homes - {id(session.home)}) and len(homes) in (1, 3)
        await asyncio.wait_for(session.close(), 120)
        assert not any(child.running for child in children)
        assert session.spawn_slots.running == 0
    return session


async def test_cancelling_the_parent_leaves_no_child_process_or_home_running(harness: Harness) -> None:
    from test_session_parts import _alive

    events: list[Event] = []
    session = await _cancel_tree(harness, events, agent={"child_lanes": "own"})
    ends = [e for e in events if isinstance(e, TaskEnd) and e.agent_id is not None]
    assert [e.outcome for e in ends] == ["Cancelled"] * 3
    assert not sleepers(f"sleep 97.{os.getpid()}")
    homes = {e.agent_id for e in events if isinstance(e, SessionStart) and e.agent_id is not None}
    assert len(homes) == 3
    assert not _alive(session.home)
    for agent_id in homes:
        recorded = read_events(journal_path(harness.home), agent_id)
        assert recorded[-1].type == "session_end"


@pytest.mark.parametrize("child_lanes", ["shared", "own"])
async def test_cancelling_a_sandboxed_parent_leaves_no_lane(harness: Harness, child_lanes: str) -> None:
    from helpers import require_docker

    from osprey.toolservice.images import docker_client

    require_docker()
    events: list[Event] = []
    session = await _cancel_tree(harness, events, sandbox={"enabled": True}, agent={"child_lanes": child_lanes})
    starts = [e for e in events if isinstance(e, SessionStart)]
    assert [e.tool_service for e in starts] == ["lane"] * 4
    ids = [session.session_id] + [e.agent_id for e in starts if e.agent_id is not None]
    assert [e.outcome for e in events if isinstance(e, TaskEnd) and e.agent_id is not None] == ["Cancelled"] * 3
    assert not sleepers(f"sleep 97.{os.getpid()}")
    client = docker_client()
    try:
        left = [c for agent_id in ids for c in client.containers.list(all=True, filters={"label": f"osprey.session={agent_id}"})]
    finally:
        client.close()
    assert left == []


async def test_a_cancelled_wait_for_a_slot_stays_a_cancel_when_a_slot_is_released_at_once() -> None:
    slots = SpawnSlots(1)
    await slots.acquire()
    waiting = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0)
    waiting.cancel()
    slots.release()  # in the same turn of the loop as the cancel
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert (slots.running, slots.waiting) == (0, 0)
    await slots.acquire()  # the slot is free for the next one
    assert slots.running == 1


async def test_a_child_whose_task_ends_cancels_the_children_it_left_running(harness: Harness) -> None:
    from osprey.tools.base import ChildRequest

    events: list[Event] = []
    # The child's answer comes after a second; meanwhile it has a child of its own, whose request is held.
    script = [Reply.delay(1.0, Reply.text("I delegated it.")), Reply.hold(1, Reply.text("late"))]
    with ModelServer(script) as server:
        session = Session(server_settings(harness, server), emit=events.append)
        async with session:
            child = await session.spawn(ChildRequest(task="Delegate the reading.", persona="leader"))
            assert await asyncio.to_thread(server.wait_requests, 1, 30)
            grandchild = await child.session.spawn(ChildRequest(task="Read notes.txt.", name="reader"))
            assert await asyncio.to_thread(server.wait_held, 1, 30)
            end = await child.wait()
            assert end.outcome == "Completed"
            grand_end = await asyncio.wait_for(grandchild.wait(), 30)
            assert grand_end.outcome == "Cancelled" and not grandchild.running
            server.release()


async def test_finished_children_past_eight_are_closed_and_cannot_be_given_input(harness: Harness) -> None:
    events: list[Event] = []
    script = [Reply.text("the notes say alpha")] * 10
    with ModelServer(script) as server:
        session = Session(server_settings(harness, server), emit=events.append)
        async with session:
            ids: list[str] = []
            for _ in range(10):
                outcome = await session.run_tool("spawn_subagent", {"persona": "reader", "task": "Read notes.txt."})
                ids.append(outcome.text.split()[2])
                await session.run_tool("wait_agent", {"ids": [ids[-1]], "timeout": 30})
            await until(lambda: len(session.children) <= 9)
            # The first finished ones were closed; every one's last result is still reported.
            report = json.loads((await session.run_tool("wait_agent", {"ids": ids, "timeout": 1})).text)
            assert [entry["outcome"] for entry in report] == ["Completed"] * 10
            refused = await session.run_tool("send_input", {"id": ids[0], "prompt": "More."})
            assert not refused.ok and "closed" in refused.text and refused.category == "agent_closed"
            assert len([c for c in session.children if not c.running]) <= 9
