"""Child sessions: a session a tool started (a subagent, a workflow's agent).

A child borrows its parent's parts: the ToolService home (unless it asks for one of its own, or
the parent's options say children get their own), the HTTP client, the requests-per-minute
limiter, the approver, the journal and the MCP servers. It never has more than its parent: its
tools are a subset of the parent's, and it gets the parent's `--allow` rules and approval policy. It is journaled
with the parent's id, its events carry `agent_id` and `parent_id` and reach the parent's front
end, and it lives until it is closed: a parent cancels its children when its task is stopped, and
closes them before it closes itself.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..policy.approvals import ApprovalAnswer, ApprovalRequest, Approver

if TYPE_CHECKING:
    from ..events import TaskEnd
    from ..tools.base import ChildRequest
    from .core import Session


class ChildApprovalRequest(ApprovalRequest):
    """An approval a child session asks for: the person sees which agent asks."""

    agent: str  # the child's name (its persona's), as the person knows it
    agent_id: str


class ChildApprover:
    """The parent's approver, asked on a child's behalf: each request names the child."""

    def __init__(self, inner: Approver, name: str, agent_id: str) -> None:
        self.inner = inner
        self.name = name
        self.agent_id = agent_id

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        if isinstance(request, ChildApprovalRequest):
            return await self.inner.ask(request)  # a grandchild's: it names the agent that asks
        fields = request.model_dump()
        fields.update(agent=self.name or self.agent_id, agent_id=self.agent_id)
        return await self.inner.ask(ChildApprovalRequest(**fields))


class Child:
    """A running child session, as the tool that started it sees it (`tools.base.ChildAgent`)."""

    def __init__(self, session: Session, *, name: str, parent: Session) -> None:
        self.session = session
        self._parent = parent
        self.agent_id = session.session_id
        self.parent_id = parent.session_id
        self.name = name
        self._task: asyncio.Task[TaskEnd] | None = None
        self._closing: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        """A prompt is being worked on."""
        return self._task is not None and not self._task.done()

    def _submit(self, prompt: str) -> None:
        self._task = asyncio.ensure_future(self._work(prompt))

    async def _work(self, prompt: str) -> TaskEnd:
        """The child's task; when it ends, the children it left running are cancelled: no one is
        left to wait for them (its parent sees only its end)."""
        try:
            return await self.session.submit(prompt)
        finally:
            for child in list(self.session.children):
                child.cancel()

    async def wait(self) -> TaskEnd:
        """The end of the child's current task. Cancelling the wait leaves the child running."""
        assert self._task is not None
        return await asyncio.shield(self._task)

    async def send(self, prompt: str) -> None:
        """Give the child its next prompt, once its current task has ended."""
        if self.running:
            raise RuntimeError(f"the agent {self.agent_id} is still working; wait for it or cancel it first")
        if self._closing is not None:
            raise RuntimeError(f"the agent {self.agent_id} was closed")
        self._submit(prompt)

    def cancel(self) -> bool:
        """Stop the child's task: it ends Cancelled (the stop came from outside it)."""
        return self.session.cancel(outside=True)

    async def close(self) -> None:
        """Cancel the child's task, then close its session (its own children first) and let its
        parent forget it. Idempotent."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        self.cancel()
        try:
            if self._task is not None:
                try:
                    await asyncio.shield(self._task)
                except Exception:  # noqa: BLE001 - its end is in its record; closing goes on
                    pass
            await self.session.close()
        finally:
            if self in self._parent.children:
                self._parent.children.remove(self)


def child_persona(parent: Session, name: str, offered: list[str]) -> Any:
    """The persona a child runs as: resolved like the parent's, spawnable, and with every tool of
    its `tools` list among the parent's (a child applies the list, not the persona's toolset). A
    ConfigError says why not."""
    from ..personas import check_tools, resolve_persona

    persona = resolve_persona(name, workspace_root=parent.settings.workspace_root, home=parent.settings.home)
    if not persona.spawnable:
        raise ConfigError(f"the persona {persona.name!r} is not spawnable: only personas with `spawnable: true` run as child agents")
    servers = parent.mcp.servers if parent.mcp is not None else {}

    def all_of_a_server(name: str) -> bool:
        """`mcp__SERVER` or `mcp__SERVER__*`, naming all the tools of one of the parent's MCP servers."""
        return name.startswith("mcp__") and name.removeprefix("mcp__").removesuffix("__*") in servers

    unknown = [name for name in check_tools(persona, offered) if not all_of_a_server(name)]
    if unknown:
        raise ConfigError(f"the persona {persona.name!r} lists tools this session does not have: {', '.join(unknown)}")
    return persona


async def start_child(parent: Session, request: ChildRequest) -> Child:
    """Build and start a child of `parent` for `request`, and submit its task. The child is a
    session of the parent's own kind, with options of the parent's kind."""
    settings = parent.settings
    if request.model is not None and request.model != settings.model:
        if parent._http is None:
            raise ConfigError("this session's provider was given to it, so a child cannot talk to another model")
        settings = settings.model_copy(update={"model": request.model})
    own_home = request.own_home if request.own_home is not None else parent.child_homes == "own"
    # Never more tools than the parent has (its toolset is in what it has), its MCP servers' as they are now.
    parent._sync_mcp()
    offered = parent.tool_names()
    tools = offered if request.tools is None else [name for name in request.tools if name in offered]
    persona = child_persona(parent, request.persona, offered) if request.persona else None
    options = type(parent.options)(
        settings=settings, parent_id=parent.session_id, agent_name=request.name or request.persona or "",
        allow=list(parent.options.allow), interactive=False, extensions=parent.options.extensions,
        judgement=parent.options.judgement, tools=tools,
        child_homes=parent.child_homes, persona=persona,
    )
    # The parent's provider object only when no client of its own can make another (a provider
    # passed in); otherwise a provider of the child's own on the parent's client.
    provider = parent.provider if parent._http is None else None
    # The approval policy is the parent's (its settings); a question goes to the parent's approver,
    # labelled with the child's name.
    approver = ChildApprover(parent.approver, options.agent_name, options.session_id)
    session = type(parent)(
        options, emit=parent._emit_out, approver=approver, warn=parent.warn, progress=parent.progress,
        provider=provider, http=parent._http, limiter=parent.limiter, journal=parent.journal, close_journal=False,
        home=None if own_home else parent.home,
    )
    session.spawn_slots = parent.spawn_slots  # one count of running children for the whole tree
    session.mcp = parent.mcp  # the lead's MCP servers: a child never starts its own
    child = Child(session, name=options.agent_name, parent=parent)
    parent.children.append(child)
    try:
        await session.start()
    except BaseException:
        parent.children.remove(child)
        raise
    child._submit(request.task)
    return child
