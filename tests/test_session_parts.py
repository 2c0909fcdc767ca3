"""A session's parts: borrowed ones stay open, owned ones close once in reverse order (also when
start-up fails half-way), interceptors run in their declared order, and child sessions borrow
their parent's parts and end with it."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from session_harness import FAST_RETRY, FakeProvider, Harness, calls, text

from osprey.config import load_settings
from osprey.errors import ConfigError
from osprey.events import Event, SessionStart, TaskEnd, ToolCallEvent
from osprey.interception import Interceptor, InterceptorChain, Order, PendingCall, Verdict
from osprey.providers.limiter import LimitedProvider, RequestLimiter
from osprey.session.core import Session, SessionOptions
from osprey.sessions.journal import Journal, journal_path, read_events, session_tree
from osprey.testing.model_server import ModelServer, Reply
from osprey.tools.base import ChildAgent, ChildRequest, Invocation, Tool, ToolContext, ToolSource
from osprey.toolservice.homes import open_tool_service


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path, {"notes.txt": "alpha\n"}, git=True)


class Source(ToolSource):
    """A tool source that records its start and close, and may fail when asked for its tools."""

    def __init__(self, name: str, tools: Sequence[Tool] = (), fail: bool = False) -> None:
        self.name = name
        self._tools = list(tools)
        self.fail = fail
        self.started = 0
        self.closed = 0

    async def start(self) -> None:
        self.started += 1

    def tools(self) -> Sequence[Tool]:
        if self.fail:
            raise RuntimeError(f"{self.name} has no tools to give")
        return self._tools

    async def close(self) -> None:
        self.closed += 1


def server_settings(harness: Harness, server: ModelServer, **flags: Any) -> SessionOptions:
    settings = load_settings(harness.workspace, {"provider": "openai", "model": "m", "base_url": server.base_url,
                                                 "approval_policy": "never", **flags},
                             {"OSPREY_HOME": str(harness.home), "OPENAI_API_KEY": "unused"})
    return SessionOptions(settings=settings.model_copy(update={"retry": FAST_RETRY}))


# ------------------------------------------------------------------ borrowed and owned


async def test_borrowed_parts_are_used_and_left_open(harness: Harness) -> None:
    source = Source("lent", [Tool("lent_tool", "A lent tool.", {"type": "object", "properties": {}}, run=_ok, read_only=True)])
    limiter = RequestLimiter(1000)
    with ModelServer([Reply.tool_call("lent_tool", {}), Reply.tool_call("read_file", {"path": "notes.txt"}), Reply.text("done")]) as server:
        async with httpx.AsyncClient() as http, open_tool_service([str(harness.workspace)]) as home:
            session = Session(server_settings(harness, server), emit=harness.events.append, http=http, home=home, limiter=limiter,
                              tool_sources=[source])
            async with session:
                end = await session.submit("Use the tools.")
            assert end.outcome == "Completed"
            assert source.started == 0 and source.closed == 0  # its lender starts and closes it
            assert not http.is_closed
            assert "alpha" in (await home.client.read_file("notes.txt")).content  # the home still serves
            assert session.owned_parts == ["processes", "tools:builtin", "tools:web", "tools:control", "tools:skills", "tools:memory", "tools:retrieve", "tools:subagents",
                                           "tools:workflows", "tools:extensions"]
            assert isinstance(session.provider, LimitedProvider) and session.provider.limiter is limiter
        server.assert_clean()


async def _ok(call: Invocation, ctx: ToolContext) -> str:
    return "ok"


async def test_owned_parts_close_once_in_reverse_order(harness: Harness) -> None:
    with ModelServer([Reply.text("done")]) as server:
        session = Session(server_settings(harness, server), emit=harness.events.append)
        async with session:
            await session.submit("Say done.")
            http, home = session._http, session.home
            assert http is not None and home is not None
        await session.close()  # a second close closes nothing again
    assert session.owned_parts == ["home", "http", "processes", "tools:builtin", "tools:web", "tools:control", "tools:skills", "tools:memory", "tools:retrieve", "tools:subagents",
                                   "tools:workflows", "tools:extensions"]
    assert session.closed_parts == list(reversed(session.owned_parts))
    assert http.is_closed
    assert not _alive(home)


def _alive(home: Any) -> bool:
    """Whether the local dispatcher's process is still running (None: no home was made)."""
    proc = getattr(home, "proc", None)
    if proc is None:
        return False
    pid = proc.pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


@pytest.mark.parametrize("step", range(13))
async def test_a_failure_at_each_step_of_start_up_closes_what_was_made(harness: Harness, step: int) -> None:
    """The trace names each owned part as it is made (the HTTP client, the home, the process
    manager, the built-in, web, control, skills, memory, retrieve, subagents, workflows and extensions
    tool sources); failing there
    is a failure at that step. At the last step a lent source fails to give its tools, before the
    extensions are found."""
    lent = Source("lent")
    failing = step == 12
    made: list[str] = []

    def trace(name: str) -> None:
        if name.startswith("part "):
            made.append(name[5:])
            if len(made) == step + 1 and not failing:
                raise RuntimeError(f"injected failure after {name}")

    with ModelServer([]) as server:
        async with httpx.AsyncClient() as borrowed_http:
            options = server_settings(harness, server)
            sources = [Source("broken", fail=True), lent] if failing else [lent]
            session = Session(options, emit=harness.events.append, trace=trace, tool_sources=sources)
            with pytest.raises(RuntimeError):
                await session.start()
            # A child borrowing this client would leave it open; this session made its own.
            assert not borrowed_http.is_closed
    assert len(session.owned_parts) == (11 if failing else step + 1)
    if session._http is not None:
        assert session._http.is_closed
    assert session.closed_parts == list(reversed(session.owned_parts))
    assert len(session.closed_parts) == len(set(session.closed_parts))
    assert lent.closed == 0
    assert not _alive(session.home)
    assert not [e for e in harness.events if isinstance(e, SessionStart)]


# ------------------------------------------------------------------ declared order


class Recorder(Interceptor):
    def __init__(self, name: str, order: int, seen: list[str]) -> None:
        self.name = name
        self.order = order  # type: ignore[misc]
        self.seen = seen

    async def before_call(self, call: PendingCall) -> Verdict | None:
        self.seen.append(self.name)
        return None


def test_the_chain_keeps_declared_order_whatever_the_insertion_order() -> None:
    seen: list[str] = []
    late, early, middle, tie = Recorder("late", Order.ADJUDICATOR, seen), Recorder("early", Order.STALLS, seen), \
        Recorder("middle", Order.DEFAULT, seen), Recorder("tie", Order.DEFAULT, seen)
    chain = InterceptorChain([late, middle])
    chain.add(early)
    chain.add(tie)
    assert [i.name for i in chain] == ["early", "middle", "tie", "late"]
    chain.remove(middle)
    chain.remove(middle)  # removing what is not there changes nothing
    assert [i.name for i in chain] == ["early", "tie", "late"] and len(chain) == 3 and late in chain


async def test_calls_pass_interceptors_in_declared_order(harness: Harness) -> None:
    seen: list[str] = []
    given = (Recorder("after-hooks", Order.DEFAULT, seen), Recorder("first", Order.STALLS - 1, seen))
    await harness.run([calls(("read_file", {"path": "notes.txt"})), text("done")], interceptors=given)
    assert seen == ["first", "after-hooks"]


# ------------------------------------------------------------------ the limiter


async def test_the_limiter_holds_requests_past_the_limit_in_a_window() -> None:
    now = [0.0]
    limiter = RequestLimiter(2, clock=lambda: now[0])
    await limiter.acquire()
    await limiter.acquire()
    assert limiter.wait_needed() == pytest.approx(60.0)
    now[0] = 59.0
    assert limiter.wait_needed() == pytest.approx(1.0)
    waiting = asyncio.ensure_future(limiter.acquire())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    now[0] = 60.0
    await asyncio.wait_for(waiting, 5)
    with pytest.raises(ValueError):
        RequestLimiter(0)


# ------------------------------------------------------------------ children


def spawner(count: int, task: str, agents: list[ChildAgent], **request: Any) -> Tool:
    """A minimal internal tool: starts `count` children on `task` and waits for them all."""

    async def run(call: Invocation, ctx: ToolContext) -> str:
        assert ctx.spawn is not None
        for n in range(count):
            agents.append(await ctx.spawn(ChildRequest(task=task, name=f"child-{n}", **request)))
        ends = [await agent.wait() for agent in agents]
        return "; ".join(f"{agent.agent_id}: {end.outcome} {end.final_text}" for agent, end in zip(agents, ends, strict=True))

    return Tool("spawn_children", "Start children.", {"type": "object", "properties": {}}, run=run)


def sleepers(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return out.stdout.split()


async def test_children_share_the_parents_parts_and_report_to_it(harness: Harness) -> None:
    agents: list[ChildAgent] = []
    events: list[Event] = []
    source = Source("spawner", [spawner(2, "Read the notes.", agents, tools=["read_file"])])
    script = [Reply.tool_call("spawn_children", {}),
              Reply.tool_call("read_file", {"path": "notes.txt"}), Reply.tool_call("read_file", {"path": "notes.txt"}),
              Reply.text("child done"), Reply.text("child done"), Reply.text("all done")]
    with ModelServer(script) as server:
        session = Session(server_settings(harness, server), emit=events.append, tool_sources=[source],
                          journal=Journal(journal_path(harness.home)))
        async with session:
            end = await session.submit("Delegate.")
            home, http = session.home, session._http
            assert all(child.session.home is home and child.session._http is http for child in session.children)
            for child in session.children:
                await child.close()  # a child never closes what it borrowed
            assert http is not None and not http.is_closed
            assert "alpha" in (await home.client.read_file("notes.txt")).content
        server.assert_clean()
    assert end.outcome == "Completed" and end.final_text == "all done"
    ids = {agent.agent_id for agent in agents}
    for agent in agents:
        assert agent.parent_id == session.session_id
    child_events = [e for e in events if e.agent_id is not None]
    assert {e.agent_id for e in child_events} == ids and {e.parent_id for e in child_events} == {session.session_id}
    child_tools = [e for e in child_events if isinstance(e, SessionStart)]
    assert [e.tools for e in child_tools] == [["read_file"], ["read_file"]]
    assert not [e for e in events if e.agent_id is None and isinstance(e, ToolCallEvent) and e.name == "read_file"]
    tree = session_tree(journal_path(harness.home), session.session_id)
    assert [(depth, row.id) for depth, row in tree][0] == (0, session.session_id)
    assert {row.id for depth, row in tree if depth == 1} == ids
    assert all(row.parent_id == session.session_id for depth, row in tree if depth == 1)
    for agent in agents:
        recorded = read_events(journal_path(harness.home), agent.agent_id)
        assert recorded[0] == next(e for e in child_tools if e.agent_id == agent.agent_id)


async def test_cancelling_a_parent_mid_turn_cancels_three_children_and_leaves_nothing(harness: Harness) -> None:
    marker = f"sleep 77.{os.getpid()}"
    agents: list[ChildAgent] = []
    events: list[Event] = []
    source = Source("spawner", [spawner(3, "Wait.", agents)])
    script = [Reply.tool_call("spawn_children", {})] + [Reply.tool_call("bash", {"command": marker}) for _ in range(3)]
    with ModelServer(script) as server:
        session = Session(server_settings(harness, server), emit=events.append, tool_sources=[source],
                          journal=Journal(journal_path(harness.home)))
        await session.start()
        working = asyncio.ensure_future(session.submit("Delegate and wait."))
        for _ in range(300):
            if len(sleepers(marker)) >= 3:
                break
            await asyncio.sleep(0.05)
        assert len(sleepers(marker)) >= 3, "the three children's commands run"
        assert session.cancel()
        parent_end = await asyncio.wait_for(working, 30)
        ends = [await asyncio.wait_for(agent.wait(), 30) for agent in agents]
        await session.close()
        server.assert_clean()
    assert parent_end.outcome == "Stopped"
    assert [end.outcome for end in ends] == ["Cancelled"] * 3
    assert not sleepers(marker)
    assert not _alive(session.home)
    tree = session_tree(journal_path(harness.home), session.session_id)
    assert len(tree) == 4 and [depth for depth, _ in tree].count(1) == 3
    for agent in agents:
        recorded = read_events(journal_path(harness.home), agent.agent_id)
        assert isinstance(recorded[-2], TaskEnd) and recorded[-2].outcome == "Cancelled"
        assert recorded[-1].type == "session_end"


async def test_closing_a_parent_closes_its_running_children_first(harness: Harness) -> None:
    marker = f"sleep 78.{os.getpid()}"
    agents: list[ChildAgent] = []
    source = Source("spawner", [spawner(1, "Wait.", agents)])
    with ModelServer([Reply.tool_call("spawn_children", {}), Reply.tool_call("bash", {"command": marker})]) as server:
        session = Session(server_settings(harness, server), emit=harness.events.append, tool_sources=[source])
        await session.start()
        working = asyncio.ensure_future(session.submit("Delegate."))
        for _ in range(300):
            if sleepers(marker):
                break
            await asyncio.sleep(0.05)
        await asyncio.wait_for(session.close(), 30)
        await asyncio.wait_for(working, 5)
    assert not agents[0].running
    assert (await agents[0].wait()).outcome == "Cancelled"
    assert not sleepers(marker)


async def test_a_child_borrows_a_provider_given_to_its_parent(harness: Harness) -> None:
    agents: list[ChildAgent] = []
    provider = FakeProvider([calls(("spawn_children", {})), text("child says hi"), text("parent done")])
    options = harness.options("never", None, FAST_RETRY, ())
    session = Session(options, emit=harness.events.append, provider=provider,
                      tool_sources=[Source("spawner", [spawner(1, "Say hi.", agents)])])
    async with session:
        end = await session.submit("Go.")
        with pytest.raises(ConfigError, match="another model"):
            await session.spawn(ChildRequest(task="x", model="other"))
    assert end.final_text == "parent done"
    assert "child says hi" in str(provider.requests[2].messages[-1])


async def test_children_in_the_parents_lane_are_cancelled_and_no_lane_remains(harness: Harness) -> None:
    """With --sandbox the children share their parent's lane: cancelling the parent stops their
    commands in it, and closing it removes the lane."""
    from helpers import require_docker

    from osprey.toolservice.images import docker_client

    require_docker()
    marker = f"sleep 79.{os.getpid()}"
    agents: list[ChildAgent] = []
    source = Source("spawner", [spawner(3, "Wait.", agents)])
    script = [Reply.tool_call("spawn_children", {})] + [Reply.tool_call("bash", {"command": marker}) for _ in range(3)]
    with ModelServer(script) as server:
        options = server_settings(harness, server, sandbox={"enabled": True})
        session = Session(options, emit=harness.events.append, tool_sources=[source])
        await session.start()
        working = asyncio.ensure_future(session.submit("Delegate and wait."))
        ran: list[ToolCallEvent] = []
        for _ in range(1200):
            ran = [e for e in harness.events if isinstance(e, ToolCallEvent) and e.name == "bash" and e.agent_id is not None]
            if len(ran) == 3:
                break
            await asyncio.sleep(0.05)
        assert len(ran) == 3, "each child runs its command in the lane"
        await asyncio.sleep(0.5)
        assert session.tool_service_kind == "lane"
        assert all(child.session.home is session.home for child in session.children)
        assert session.cancel()
        await asyncio.wait_for(working, 60)
        ends = [await asyncio.wait_for(agent.wait(), 60) for agent in agents]
        await session.close()
    assert [end.outcome for end in ends] == ["Cancelled"] * 3
    client = docker_client()
    try:
        left = client.containers.list(all=True, filters={"label": f"osprey.session={session.session_id}"})
    finally:
        client.close()
    assert left == []


async def test_a_child_never_gets_more_tools_or_fewer_rules_than_its_parent(harness: Harness) -> None:
    agents: list[ChildAgent] = []
    provider = FakeProvider([calls(("spawn_children", {})), text("child done"), text("parent done")])
    options = harness.options("deny-untrusted", None, FAST_RETRY, ("bash(git status)", "spawn_children")).model_copy(
        update={"tools": ["read_file", "spawn_children"]})
    session = Session(options, emit=harness.events.append, provider=provider,
                      tool_sources=[Source("spawner", [spawner(1, "Look.", agents, tools=["read_file", "bash", "write_file"])])])
    async with session:
        await session.submit("Go.")
        [child] = session.children
        assert child.session.tool_names() == ["read_file"]
        assert child.session.options.allow == ["bash(git status)", "spawn_children"]
        assert child.session.journal is session.journal
        await child.close()
        assert session.children == []  # a closed child is forgotten


async def test_the_persons_own_call_finds_a_built_in_tool_the_model_is_not_offered(harness: Harness) -> None:
    options = harness.options("never", None, FAST_RETRY, ()).model_copy(update={"tools": ["read_file"]})
    session = Session(options, emit=harness.events.append, provider=FakeProvider([]))
    async with session:
        assert session.tool_names() == ["read_file"]
        result = await session.run_tool("bash", {"command": "echo from-the-person"})
    assert result.ok and "from-the-person" in result.text
    [call] = [e for e in harness.events if isinstance(e, ToolCallEvent)]
    assert call.requested_by == "user"


def test_a_terminal_shows_a_childs_calls_and_ending_marked_with_its_id() -> None:
    import io

    from osprey.messages import Usage
    from osprey.render import TerminalRenderer

    out = io.StringIO()
    render = TerminalRenderer(out=out, err=out, color=False)
    ids = {"agent_id": "c1", "parent_id": "p0"}
    render(SessionStart(session_id="c1", provider="openai", model="m", cwd="/w", tool_service="local", tools=[],
                        approval_policy="never", max_turns=1, **ids))
    render(ToolCallEvent(turn=1, id="x", name="grep", arguments={"pattern": "a"}, **ids))
    render(TaskEnd(session_id="c1", outcome="Cancelled", exit_status=130, turns=1, usage=Usage(), **ids))
    assert out.getvalue().splitlines() == ["[c1] ▸ grep", "[c1] Cancelled · 1 turn"]
