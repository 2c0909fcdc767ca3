"""Subagents: the model's tools that start child sessions and work with them.

`spawn_subagent` starts a child as a spawnable persona on a task and returns its id at once (the
child works in the background); `send_input` gives a child whose task has ended its next prompt;
`wait_agent` waits, up to a timeout, for one or several children and returns each one's outcome,
result, usage and session id; `cancel_agent` stops one. At most `SpawnSlots.limit` children run at
once across one spawn tree (a lead and all its descendants share one `SpawnSlots`): a spawn past it
waits for a slot, and says so.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import Field

from ..errors import ConfigError
from ..tools.base import ChildRequest, Invocation, Tool, ToolContext, ToolInput, ToolOutcome, ToolSource

if TYPE_CHECKING:
    from ..tools.base import ChildAgent

TOOL_NAMES = ("spawn_subagent", "send_input", "wait_agent", "cancel_agent")
MAX_WAIT = 600.0  # seconds one wait_agent call may wait
MAX_RESULT_CHARS = 8000  # of each child's final text in wait_agent's answer
CANCEL_WAIT = 30.0  # seconds cancel_agent waits for the child's task to end
# Children whose task has ended are kept open for send_input, the oldest closed past this many (a
# child with a home of its own holds a process or a lane while it is open).
MAX_IDLE_OPEN = 8


class SpawnSlots:
    """At most `limit` running children across one spawn tree. `acquire` waits for a slot, in the
    order the waits began; waiting is cancellable. A released slot goes to the oldest waiter."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("at least one child must be able to run")
        self.limit = limit
        self.running = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def waiting(self) -> int:
        return sum(1 for waiter in self._waiters if not waiter.done())

    @property
    def full(self) -> bool:
        return self.running >= self.limit or self.waiting > 0

    async def acquire(self) -> None:
        if not self.full:
            self.running += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was handed over as the wait was cancelled: pass it on
            else:
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass  # a release passed over it as it was cancelled
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot goes to it: `running` stays
                return
        self.running = max(0, self.running - 1)


class SpawnInput(ToolInput):
    persona: str = Field(min_length=1, max_length=80, description="A spawnable persona's name; the child runs as it, with its tools.")
    task: str = Field(min_length=1, max_length=100_000, description="The child's first prompt: everything it needs to know, since it does not see this conversation.")
    model: str | None = Field(None, min_length=1, max_length=200, description="Another model of this session's provider (default: this session's).")


class SendInput(ToolInput):
    id: str = Field(min_length=1, max_length=64, description="The agent's id, as spawn_subagent returned it.")
    prompt: str = Field(min_length=1, max_length=100_000, description="The agent's next prompt (its conversation so far is kept).")


class WaitInput(ToolInput):
    ids: list[str] = Field(min_length=1, max_length=32, description="The ids of the agents to wait for.")
    timeout: float = Field(60.0, ge=0, le=MAX_WAIT, description="Seconds to wait at most; an agent still working then is reported as running.")


class CancelInput(ToolInput):
    id: str = Field(min_length=1, max_length=64, description="The agent's id.")


@dataclass
class _Agent:
    child: ChildAgent
    persona: str
    holding: asyncio.Task[None] | None = None  # keeps a slot while the child's task runs
    closed: bool = False  # closed while idle: it can be waited for, not given input
    prompts: int = 1
    started: float = field(default_factory=time.monotonic)


def _error(text: str, category: str = "invalid_arguments") -> ToolOutcome:
    return ToolOutcome(f"Error: {text}", True, category)


class SubagentTools(ToolSource):
    """The four subagent tools of one session; it knows the children it started (a session waits
    for, feeds and cancels its own children only). `note` tells the person something (a spawn
    waiting for a slot). The session closes the children themselves; closing this source lets go
    of their slots."""

    name = "subagents"

    def __init__(self, slots: SpawnSlots, *, note: Callable[[str], None] = lambda _: None) -> None:
        self.slots = slots
        self._note = note
        self._agents: dict[str, _Agent] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def tools(self) -> Sequence[Tool]:
        # They change only Osprey's own state (its agents): no approval asked; each child's own
        # calls meet the approval policy.
        return [
            Tool.from_model("spawn_subagent", "Start a child agent as a spawnable persona on a task. It works in the background, with the persona's "
                            "tools, and returns its id at once; get its result with wait_agent. At most "
                            f"{self.slots.limit} agents run at once: past that, the spawn waits for a slot.", SpawnInput, self._spawn, own_state=True),
            Tool.from_model("send_input", "Give a child agent whose task has ended its next prompt (it keeps its conversation); "
                            "refused while the agent is still working.", SendInput, self._send, own_state=True),
            Tool.from_model("wait_agent", "Wait for one or several child agents, up to a timeout; returns for each its outcome, final result, "
                            "usage and session id, or that it is still running.", WaitInput, self._wait, own_state=True),
            Tool.from_model("cancel_agent", "Stop a child agent's task; its outcome is then Cancelled.", CancelInput, self._cancel, own_state=True),
        ]

    async def close(self) -> None:
        holding = [agent.holding for agent in self._agents.values() if agent.holding is not None]
        for task in holding:
            task.cancel()
        await asyncio.gather(*holding, *self._closing, return_exceptions=True)

    def _close_idle(self) -> None:
        """Close the oldest children whose task has ended past `MAX_IDLE_OPEN` of them."""
        idle = [agent for agent in self._agents.values() if not agent.closed and not agent.child.running]
        for agent in idle[:max(0, len(idle) - MAX_IDLE_OPEN)]:
            agent.closed = True
            closing = asyncio.ensure_future(agent.child.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    # ------------------------------------------------------------------ slots

    async def _slot(self) -> str:
        """Take a slot, waiting for one when the tree is full; what the wait was, for the result."""
        if not self.slots.full:
            await self.slots.acquire()
            return ""
        running = self.slots.running
        self._note(f"a subagent waits for a slot: {running} agents are running (at most {self.slots.limit})")
        began = time.monotonic()
        await self.slots.acquire()
        return f" It waited {time.monotonic() - began:.1f} s for a slot ({running} agents were running, at most {self.slots.limit})."

    def _hold(self, agent: _Agent) -> None:
        """Keep the slot taken for `agent` until its task ends."""

        async def hold() -> None:
            try:
                await agent.child.wait()
            except BaseException:  # noqa: BLE001 - the slot is given back however the task ended
                pass
            finally:
                self.slots.release()

        agent.holding = asyncio.ensure_future(hold())

    def _agent(self, agent_id: str) -> _Agent | ToolOutcome:
        found = self._agents.get(agent_id)
        if found is None:
            known = ", ".join(self._agents) or "none yet"
            return _error(f"there is no agent {agent_id!r} started by this session (its agents: {known}).")
        return found

    # ------------------------------------------------------------------ the tools

    async def _spawn(self, call: Invocation, ctx: ToolContext) -> ToolOutcome:
        given: SpawnInput = call.input
        if ctx.spawn is None:
            return _error("this session cannot start agents.", "unavailable")
        request = ChildRequest(task=given.task, persona=given.persona, name=given.persona, model=given.model)
        waited = await self._slot()
        try:
            child = await ctx.spawn(request)
        except ConfigError as exc:
            self.slots.release()
            return _error(str(exc).rstrip(".") + ".")
        except BaseException:
            self.slots.release()
            raise
        agent = self._agents[child.agent_id] = _Agent(child, given.persona)
        self._hold(agent)
        self._close_idle()
        return ToolOutcome(f"Started agent {child.agent_id} as {given.persona}; it works in the background. "
                           f"wait_agent {{\"ids\": [\"{child.agent_id}\"]}} returns its result.{waited}")

    async def _send(self, call: Invocation, ctx: ToolContext) -> ToolOutcome:
        given: SendInput = call.input
        agent = self._agent(given.id)
        if isinstance(agent, ToolOutcome):
            return agent
        if agent.child.running:
            return _error(f"the agent {given.id} is still working on its task; wait_agent for it, or cancel_agent it, before sending it input.",
                          "agent_busy")
        if agent.closed:
            return _error(f"the agent {given.id} was closed to free its resources (at most {MAX_IDLE_OPEN} finished agents are kept "
                          "open); spawn a new agent with what it needs to know.", "agent_closed")
        waited = await self._slot()
        try:
            await agent.child.send(given.prompt)
        except RuntimeError as exc:
            self.slots.release()
            return _error(f"{exc}.", "agent_busy")
        except BaseException:
            self.slots.release()
            raise
        agent.prompts += 1
        self._hold(agent)
        return ToolOutcome(f"Agent {given.id} works on its next prompt; wait_agent returns its result.{waited}")

    async def _wait(self, call: Invocation, ctx: ToolContext) -> ToolOutcome:
        given: WaitInput = call.input
        ids = list(dict.fromkeys(given.ids))
        unknown = [agent_id for agent_id in ids if agent_id not in self._agents]
        if unknown:
            known = ", ".join(self._agents) or "none yet"
            return _error(f"no agent {', '.join(repr(u) for u in unknown)} was started by this session (its agents: {known}).")
        waits = {agent_id: asyncio.ensure_future(self._agents[agent_id].child.wait()) for agent_id in ids}
        try:
            # A timeout of 0 still lets the children that have ended be seen as ended.
            await asyncio.wait(waits.values(), timeout=max(given.timeout, 0.01))
        finally:
            for waiting in waits.values():
                waiting.cancel()  # the child goes on: only the wait is let go (Child.wait is shielded)
        report = []
        for agent_id, waiting in waits.items():
            agent = self._agents[agent_id]
            entry: dict[str, object] = {"id": agent_id, "persona": agent.persona, "session_id": agent.child.agent_id}
            if waiting.done() and not waiting.cancelled() and waiting.exception() is None:
                end = waiting.result()
                final, dropped = end.final_text, 0
                if len(final) > MAX_RESULT_CHARS:
                    final, dropped = final[:MAX_RESULT_CHARS], len(final) - MAX_RESULT_CHARS
                entry.update(outcome=end.outcome, result=final, usage=end.usage.model_dump(exclude_defaults=True), turns=end.turns)
                if dropped:
                    entry["result_cut"] = f"{dropped} characters dropped"
                if end.error:
                    entry["error"] = end.error[:2000]
            elif waiting.done() and not waiting.cancelled():
                entry.update(outcome="Error", error=f"{type(waiting.exception()).__name__}: {waiting.exception()}"[:2000])
            else:
                entry.update(outcome="running")
            report.append(entry)
        return ToolOutcome(json.dumps(report, ensure_ascii=False, indent=1))

    async def _cancel(self, call: Invocation, ctx: ToolContext) -> ToolOutcome:
        given: CancelInput = call.input
        agent = self._agent(given.id)
        if isinstance(agent, ToolOutcome):
            return agent
        if not agent.child.cancel():
            end = await agent.child.wait()
            return ToolOutcome(f"Agent {given.id} was not working (its last task ended {end.outcome}).")
        try:
            end = await asyncio.wait_for(agent.child.wait(), CANCEL_WAIT)
        except TimeoutError:
            return ToolOutcome(f"Agent {given.id} was told to stop; its task has not ended yet.")
        return ToolOutcome(f"Agent {given.id} was cancelled: its task ended {end.outcome}.")
