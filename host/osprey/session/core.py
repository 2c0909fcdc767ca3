"""The session core: the one place that builds provider, ToolService home, tool catalogue,
approvals and loop from typed options, and runs a conversation of many prompts.

Front ends (`osprey agent`, the TUI, subagents, workflows) drive it through `start`, `submit`,
`cancel` and `close`, and see everything through its events.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler
from pydantic_core import CoreSchema, core_schema

from ..config import Settings
from ..errors import ConfigError, OspreyError
from ..events import AssistantText, Compaction, Event, ModelSwitch, Notice, SessionEnd, SessionStart, TaskEnd, UsageEvent
from ..interception import Interceptor, InterceptorChain, PromptSubmission
from ..messages import AssistantMessage, Message, ToolSpec, Usage
from ..outcomes import Outcome, exit_status
from ..policy.approvals import ApprovalPolicy, Approver, HeadlessApprover
from ..sessions.resume import ResumePoint

if TYPE_CHECKING:
    import httpx

    from ..agents.workflows.runs import WorkflowRuns
    from ..config.schema import ResolvedMoa
    from ..extensions.session import SessionExtensions
    from ..mcp.connection import McpServers
    from ..mcp.source import McpTools
    from ..personas import Persona
    from ..providers.base import Provider, TextSink
    from ..providers.limiter import RequestLimiter
    from ..sessions.journal import Journal
    from ..tools.base import ChildRequest, Tool, ToolRegistry, ToolSource
    from ..tools.memory_tool import MemoryTools
    from ..toolservice.homes import ToolServiceHome
    from .calls import CallResult
    from .children import Child
    from .loop import AgentLoop, TaskResult
    from .output_schema import OutputSchema, OutputSchemaInterceptor
    from .skills import SkillTools
    from .verification import Checkpoint


# The settings a model switch may change.
PROVIDER_FIELDS = ("provider", "model", "base_url", "api_key", "effort", "max_tokens", "replay_file")


def new_session_id() -> str:
    return uuid.uuid4().hex[:12]


class _Given:
    """A field's value is an instance of `cls` (or None) that code made, never data to parse: it is
    checked by isinstance alone, so `cls`'s schema is not built for a session that never sets it."""

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.nullable_schema(core_schema.is_instance_schema(self.cls))


class SessionOptions(BaseModel):
    """Everything a front end decides about a session, besides the settings files."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, defer_build=True)

    settings: Settings
    session_id: str = Field(default_factory=new_session_id)
    # Rules given for this run (`--allow`), in the `Tool(pattern)` syntax.
    allow: list[str] = Field(default_factory=list)
    # Write the model's turns to this file for `--replay`.
    record_file: Path | None = None
    # Whether a person can answer approval prompts (the TUI); headless runs cannot.
    interactive: bool = False
    # Go on with a journaled session: its conversation, turns and usage (keep its session_id).
    resume: Annotated[ResumePoint | None, _Given(ResumePoint)] = None
    # The model's context window in tokens, for automatic compaction near it. None: from the
    # cached model catalog when it knows the model, else no automatic compaction.
    context_window: int | None = None
    # A named toolset (`--toolset`): the tools the model is offered (toolsets.toml).
    toolset: str | None = None
    # Whether the layers' extensions (custom tools, hooks, prompts, descriptions) are used.
    extensions: bool = True
    # The session's time budget in seconds (`--budget`): past it the running task ends BudgetExpired.
    budget: float | None = Field(None, gt=0)
    # A JSON Schema file the final answer must satisfy (`--output-schema`).
    output_schema: Path | None = None
    # Whether the session judges completion itself: the stall detectors and the finalization
    # adjudicator (tests of those parts turn it off and pass their own).
    judgement: bool = True
    # A child session: the session that started it (its events carry this as `parent_id`, and its
    # own id as `agent_id`), and how it is labelled to the person.
    parent_id: str | None = None
    agent_name: str = ""
    # Only these of the catalogue's tools (a child's subset); None: all of them.
    tools: list[str] | None = None
    # Where children run their tools: in this session's home ("shared") or each in one of its own;
    # None: as `[agent] child_lanes` says.
    child_homes: Literal["shared", "own"] | None = None
    # At most this many model requests a minute across this session and its children (a limiter
    # passed in is used instead); None: as `[agent] requests_per_minute` says.
    requests_per_minute: int | None = Field(None, ge=1)
    # More skill roots (`--skill-dir`, OSPREY_SKILL_DIR), after the project's and before the user's.
    skill_dirs: list[Path] = Field(default_factory=list)
    # Skills whose instructions are in the system prompt from the start (`--skill`).
    skills: list[str] = Field(default_factory=list)
    # The persona the session starts as (an `osprey.personas.Persona`, resolved by the front end from
    # `--persona` or `[agent].default_persona`); None: no persona, the base prompt and every tool.
    persona: Any = None


def compose_system_prompt(settings: Settings, tool_service: str | None = None) -> str:
    """The active system prompt for these settings (`tool_service`: `local` or `lane`, by
    default what the settings ask for). Front ends compose it at launch, before the session
    exists, so a prompt that cannot be made stops the launch early."""
    from ..prompt import system_prompt

    kind = tool_service or ("lane" if settings.sandbox.enabled else "local")
    return system_prompt(str(settings.cwd), kind, git_read_only=settings.sandbox.protect_git)


def parse_allow_rules(texts: Sequence[str]) -> list[Any]:
    """`--allow` rules, or a ConfigError naming the bad one."""
    if not texts:
        return []  # most runs give none: the rules' module is not loaded for them
    from ..policy.rules import Rule, RuleError

    rules = []
    for text in texts:
        try:
            rules.append(Rule.parse(text))
        except RuleError as exc:
            raise ConfigError(f"--allow {text!r}: {exc}") from None
    return rules


class Session:
    """One conversation with the model, its tools and its ToolService home.

    A session is assembled from parts: the provider (with its HTTP client and an optional shared
    requests-per-minute `limiter`), the ToolService `home`, tool sources and interceptors. A part
    passed in is borrowed: the session uses it and leaves it open. A part the session made itself
    is owned: it is closed with the session, once, in the reverse order of its making (also when
    start-up fails half-way). Interceptors run in their declared order (`Interceptor.order`).

    Tools may start child sessions (`ToolContext.spawn`): a child borrows this session's home,
    HTTP client and limiter, is journaled beside it, and is cancelled and closed with it.

    Use as an async context manager, or call `start()` and `close()`. A `journal` records every
    event the session emits and is closed (drained and checkpointed) with the session, unless
    `close_journal` is False (a child records into its parent's);
    `options.resume` starts from a journaled conversation."""

    def __init__(
        self,
        options: SessionOptions,
        *,
        emit: Callable[[Event], None],
        approver: Approver | None = None,
        on_text: TextSink | None = None,
        on_tool_output: Callable[[str, bytes], None] | None = None,
        progress: Callable[[str], None] = lambda _: None,
        warn: Callable[[str], None] = lambda _: None,
        provider: Provider | None = None,
        http: httpx.AsyncClient | None = None,
        interceptors: Sequence[Interceptor] = (),
        journal: Journal | None = None,
        home: ToolServiceHome | None = None,
        trace: Callable[[str], None] = lambda _: None,
        ask: Callable[[str], Awaitable[str | None]] | None = None,
        limiter: RequestLimiter | None = None,
        tool_sources: Sequence[ToolSource] = (),
        close_journal: bool = True,
    ) -> None:
        self.options = options
        self.settings = options.settings
        self.session_id = options.session_id
        # Every event is journaled (queued, never waiting on the disk) before a front end sees it.
        self.journal = journal
        self._close_journal = close_journal  # False: the journal is lent (a child records into its parent's)
        self._emit_out = emit  # the front end's sink (a child's: its parent's)
        self.emit = self._stamped(emit if journal is None else self._journaled(journal, emit))
        self.approver = approver or HeadlessApprover()
        self.on_text = on_text
        self.on_tool_output = on_tool_output
        self.progress = progress
        self.warn = warn
        self.provider = provider
        self._http = http
        self._plain_http: bool | None = None  # whether the session's own client speaks plain http only
        self.limiter = limiter
        self.interceptors = InterceptorChain(interceptors)
        self.allow_rules = parse_allow_rules(options.allow)
        self._stack = AsyncExitStack()
        # Borrowed: a home, provider, HTTP client, limiter or tool source passed in is used and left open.
        self.home: ToolServiceHome | None = home
        self._borrowed_sources = list(tool_sources)
        # The owned parts by name, in the order they were made, and in the order they were closed.
        self.owned_parts: list[str] = []
        self.closed_parts: list[str] = []
        self.trace = trace  # the launch steps, by name, as they happen
        self._record_sink: Any = None
        self.processes: Any = None  # the process tool's ProcessManager in plain host runs
        self.extensions: SessionExtensions | None = None
        self.memory: MemoryTools | None = None  # the lead session's memory tool and its frozen snapshot
        self.skills: SkillTools | None = None  # the lead session's skills and load_skill
        self.persona: Persona | None = options.persona  # switch_persona changes it from the next turn
        self._dev_tooling = ""  # what the persona's dev_tooling found, for its prompt section
        self.checkpoint: Checkpoint | None = None
        self.stalls: Interceptor | None = None
        self.schema_check: OutputSchemaInterceptor | None = None
        self.ask = ask
        self.output_schema: OutputSchema | None = None
        if options.output_schema is not None:
            from .output_schema import OutputSchema

            self.output_schema = OutputSchema.load(options.output_schema)
        self.registry: ToolRegistry | None = None
        self._person_tools: ToolRegistry | None = None
        self.policy: ApprovalPolicy | None = None
        self.loop: AgentLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._submitting: asyncio.Future[None] | None = None  # resolved once the task's task_end is out
        self._closing: asyncio.Future[None] | None = None
        self._cancel_signal: int | None = None
        self._cancelled_outside = False  # the stop came from outside (a signal, a parent): Cancelled
        self.children: list[Child] = []
        # The lead session's workflow runs (`agents.workflows.runs.WorkflowRuns`); None when workflows are off.
        self.workflows: WorkflowRuns | None = None
        # The MCP servers: the lead session's own (started with it, closed with it), a child's its lead's.
        self.mcp: McpServers | None = None
        self._mcp_tools: McpTools | None = None
        self._mcp_generation: int | None = None  # of the servers when their tools were last put in the catalogue
        self._mcp_added: dict[str, Tool] = {}  # the MCP tools in the catalogue, by name
        # The running children's count of this session's spawn tree (`agents.subagents.SpawnSlots`),
        # shared by the lead and every descendant.
        self.spawn_slots: Any = None
        self._tools_failed: BaseException | None = None  # the ToolService's background start failed
        self._budget_deadline: float | None = None  # loop time at which the session's budget runs out
        self._budget_out = False
        self._unrecorded_prompt: str | None = None  # a submitted prompt not yet in the conversation
        self._last: TaskEnd | None = None
        self._end: SessionEnd | None = None
        self._started = False
        self._announced = False  # session_start was emitted, so session_end will be
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    def _stamped(self, emit: Callable[[Event], None]) -> Callable[[Event], None]:
        """A child's events carry its own id as `agent_id` and its parent's as `parent_id`."""
        parent = self.options.parent_id
        if parent is None:
            return emit

        def stamp(event: Event) -> None:
            event.agent_id, event.parent_id = self.session_id, parent
            emit(event)

        return stamp

    def _own(self, name: str, close: Callable[[], Awaitable[Any]]) -> None:
        """A part the session made: closed with the session, once, after the parts made later."""
        async def closing() -> None:
            self.closed_parts.append(name)
            await close()

        self._stack.push_async_callback(closing)
        self.owned_parts.append(name)
        self.trace(f"part {name}")

    def _journaled(self, journal: Journal, emit: Callable[[Event], None]) -> Callable[[Event], None]:
        workspace = str(self.settings.workspace_root)

        def emit_and_record(event: Event) -> None:
            journal.record(event, self.session_id, workspace)
            emit(event)

        return emit_and_record

    async def __aenter__(self) -> Session:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> SessionStart:
        """Build everything inside one exit stack; emits `session_start`. A session starts once."""
        if self._started or self._closed:
            raise RuntimeError("a session starts once; make a new Session")
        self._started = True
        if self.options.budget is not None:
            self._budget_deadline = asyncio.get_running_loop().time() + self.options.budget
        try:
            await self._build()
            self.trace("tools")
        except BaseException:
            self._closed = True
            try:
                await self._stack.aclose()
            finally:
                if self.journal is not None and self._close_journal:
                    await asyncio.shield(asyncio.to_thread(self.journal.close))
            raise
        assert self.loop is not None and self.policy is not None
        event = SessionStart(
            session_id=self.session_id, provider=self.loop.provider.name, model=self.loop.provider.model,
            cwd=str(self.settings.cwd), tool_service=self.tool_service_kind, tools=self.tool_names(),
            approval_policy=self.policy.policy, max_turns=self.loop.max_turns, effort=self.settings.effort,
            persona=self.persona.name if self.persona is not None else None,
        )
        self._announced = True
        self.emit(event)
        if self.extensions is not None and self.options.parent_id is None:
            self.extensions.announce()  # what is present but does not run (a child's parent has told it)
        self.trace("agent")
        for interceptor in self.interceptors:
            await self._notify(interceptor, "session_start", interceptor.session_start(event))
        return event

    async def _notify(self, interceptor: Interceptor, point: str, call: Any) -> None:
        """Run an interceptor's start or end hook; its failure is reported, never fatal."""
        try:
            await call
        except Exception as exc:  # noqa: BLE001 - an interceptor's bug must not end the session
            self.warn(f"the interceptor {interceptor.name} failed at {point}: {type(exc).__name__}: {exc}")

    async def _build(self) -> None:
        from ..config import settings_tool_environment
        from ..policy.store import ApprovalStore
        from ..tools import ToolContext, ToolRegistry, base_tools
        from ..toolservice.homes import make_home
        from .calls import CallPath
        from .loop import AgentLoop

        settings = self.settings
        per_minute = self.options.requests_per_minute or settings.agent.requests_per_minute
        if self.limiter is None and per_minute is not None:
            from ..providers.limiter import RequestLimiter

            self.limiter = RequestLimiter(per_minute)
        host_env = settings_tool_environment(settings)
        if self.home is None:
            # Started first, in the background: the provider's set-up and the first model request
            # do not wait for it, and a tool call made before it answers does. A failed start ends
            # the session (`_watch_tools`).
            home_made = make_home([str(settings.cwd)], sandbox=settings.sandbox, session_id=self.session_id,
                                  progress=self.progress, home=settings.home, env=host_env)
            self.home = home_made
            self._own("home", home_made.close)
            await home_made.begin()
        if self.provider is None:
            self.provider = await self._make_provider()
        if settings.approval_policy == "never" and not settings.sandbox.enabled and self.options.parent_id is None:
            self.warn("tool calls run on the host without approval (--yolo without --sandbox); only isolation outside Osprey and the hardline floor protect this machine")
        home = self.home
        self._watch_tools(home)
        processes = None
        if self.tool_service_kind == "local":
            from ..tools.process import ProcessManager

            processes = ProcessManager(list(home.roots), env=host_env)
            self._own("processes", processes.close)
        self.processes = processes
        self.registry = ToolRegistry(max_result_chars=settings.tool_results.max_chars)
        from ..tools.base import StaticTools
        from ..web import web_tools

        # web_fetch always, web_search when a search service is configured; they run on the host.
        base = StaticTools("builtin", base_tools(host_processes=processes is not None))
        # The person's own calls (`run_tool`) find the built-in tools whatever the model is offered.
        self._person_tools = ToolRegistry(max_result_chars=settings.tool_results.max_chars)
        for tool in base.tools():
            self._person_tools.add(tool)
        made: list[ToolSource] = [base, StaticTools("web", web_tools(settings)), self._judgement()]
        persona = self.persona
        if persona is not None:
            from .personas import contract_of, switch_persona_tool, terminal_tool

            contract = contract_of(persona)
            made.append(StaticTools("persona", [switch_persona_tool(self._switch_persona), *(
                [terminal_tool(contract[0], contract[1], self._submit)] if contract is not None else [])]))
        if self.options.parent_id is None:
            from .skills import SkillTools

            self.skills = SkillTools(settings, skill_dirs=self.options.skill_dirs, preload=self.options.skills, warn=self.warn)
            made.append(self.skills)
        if self.options.parent_id is None and settings.memory.provider != "none":
            from ..tools.memory_tool import MemoryTools

            # The lead session's memory: its snapshot is frozen into the system prompt now.
            self.memory = MemoryTools(settings)
            made.append(self.memory)
        if any(server.enabled for server in settings.lsp.servers.values()) and ((offered := self._allowed_tools()) is None or "lsp" in offered):
            from ..lsp.tool import LspTools

            # Language servers run where the tools run; the tool is offered when one's program is there.
            lsp = LspTools(settings.lsp, home.client, list(home.roots), warn=self.warn)
            made.append(lsp)
            self.interceptors.add(lsp.changes)  # the model's writes and edits reach the servers
        if settings.retrieve.enabled:
            from ..retrieve.tool import RetrieveTools

            # A cut tool result is kept whole for this session (a child keeps its own) and searched by `retrieve`;
            # the lead session's start removes the kept outputs of sessions the journal no longer holds.
            retrieve = RetrieveTools(settings.retrieve, settings.home, self.session_id, max_chars=settings.tool_results.max_chars,
                                     journal=self.journal.path if self.journal is not None and self.options.parent_id is None else None,
                                     offered=lambda: self.registry is not None and self.registry.get("retrieve") is not None)
            self.registry.keep = retrieve.keep
            made.append(retrieve)
        if self.options.parent_id is None:
            from ..sessions.journal import journal_path
            from ..tools.session_search import SessionSearchTools

            # The lead session's search over the person's other saved sessions (never its own tree).
            saved = self.journal.path if self.journal is not None else journal_path(settings.home)
            if self.journal is not None or saved.is_file():
                made.append(SessionSearchTools(saved, self.session_id, settings.cwd))
        from ..agents.subagents import TOOL_NAMES, SpawnSlots, SubagentTools

        if self.options.parent_id is None or (persona is not None and set(persona.tools or ()) & set(TOOL_NAMES)):
            # Subagents: a lead session can start children; a child only when its persona lists the tools.
            if self.spawn_slots is None:
                self.spawn_slots = SpawnSlots(settings.agent.max_children)
            made.append(SubagentTools(self.spawn_slots, note=lambda text: self.emit(Notice(message=text, level="info"))))
        if self.options.parent_id is None and settings.workflows.enabled:
            from ..agents.workflows.runs import WorkflowRuns
            from ..agents.workflows.tools import WorkflowTools

            # Workflows: the lead session's runs (their agents are its children) and the model's
            # run_workflow and propose_workflow; closing the source interrupts the active runs.
            self.workflows = WorkflowRuns(self.spawn, settings, self.emit, offered=self.tool_names)
            made.append(WorkflowTools(self.workflows))
        for source in made:
            await source.start()
            self._own(f"tools:{source.name}", source.close)
        if self.mcp is not None or settings.mcp.servers:
            from ..mcp.source import McpTools

            # MCP servers start in the background and their tools join the catalogue at the turn
            # boundary after they are ready. A child uses its lead's servers and never starts its own.
            if self.mcp is not None:
                self._mcp_tools = McpTools(servers=self.mcp)
            elif self.options.parent_id is None:
                mcp = McpTools(settings.mcp.servers, client=home.client, workdir=str(settings.cwd), emit=self.emit)
                self._own("tools:mcp", mcp.close)
                self._mcp_tools, self.mcp = mcp, mcp.servers
                if self.options.interactive or self._http is None or settings.replay_file is not None:
                    # A person is about to type (nothing waits for the CPU), or no request goes through the session's client.
                    await mcp.start()
                else:
                    self._start_mcp_after_first_request(mcp)
        # A lent source was started by its owner, who also closes it.
        builtin = [tool for source in [*made, *self._borrowed_sources] for tool in source.tools()]
        if self.options.extensions:
            from ..extensions.manage_tool import manage_tool
            from ..extensions.session import SessionExtensions

            # The agent may manage your own extensions ($OSPREY_HOME); a change is found again at the
            # next turn boundary, and what runs programs stays inactive until you trust it.
            builtin.append(manage_tool(settings, builtin_tools=[t.name for t in builtin],
                                       on_change=lambda: self.extensions.request_reload() if self.extensions is not None else None))
            extensions = SessionExtensions(
                settings, builtin=builtin, toolset=self._toolset(), env=host_env, session_id=self.session_id,
                warn=self.warn, emit=self.emit, messages=lambda: self.messages, permission_mode=settings.approval_policy,
                only=self._allowed_tools(),
            )
            await extensions.start()
            self._own("tools:extensions", extensions.close)
            self.extensions = extensions
            extensions.apply(self.registry, self.interceptors)
        else:
            allowed = self._allowed_tools()
            for tool in builtin:
                if allowed is None or tool.name in allowed:
                    self.registry.add(tool)
        self._sync_mcp()
        context = ToolContext(
            client=home.client, cwd=str(settings.cwd), roots=list(home.roots),
            bash_max_output_bytes=settings.tool_results.bash_max_output_bytes, processes=processes,
            tool_service=self.tool_service_kind, spawn=self.spawn,
        )
        workspace = str(settings.workspace_root)
        store = ApprovalStore(settings.home / "approvals.toml", warn=self.warn)
        self.policy = ApprovalPolicy(settings.approval_policy, store=store, allow=self.allow_rules, workspace=workspace)
        calls = CallPath(
            registry=self.registry, context=context, policy=self.policy, emit=self.emit, approver=self.approver,
            interceptors=self.interceptors, workspace=workspace, on_output=self.on_tool_output,
        )
        self.loop = AgentLoop(
            provider=self.provider, calls=calls, system=lambda: self.system_prompt(), specs=lambda: self.tool_specs(), emit=self.emit,
            retry=settings.retry, max_turns=settings.max_turns, on_text=self.on_text, session_id=self.session_id,
            interceptors=self.interceptors, context_window_of=self._context_window, before_turn=self._turn_boundary,
            compaction_note=lambda: self.checkpoint.summary_note() if self.checkpoint is not None else "",
        )
        if persona is not None and persona.terminal:
            from .personas import contract_of

            self.loop.terminal_tool = (contract_of(persona) or ("", {}))[0]
        if persona is not None and persona.dev_tooling:
            from ..personas.dev_tooling import dev_tooling_report

            # Found where the tools run (the lane, when there is one), once, for the prompt.
            self._dev_tooling = await dev_tooling_report(home.client, str(settings.cwd))
        resume = self.options.resume
        if resume is not None:
            self.loop.messages = list(resume.messages)
            self.loop.turns = resume.turns
            self.loop.usage = resume.usage

    def _judgement(self) -> ToolSource:
        """The loop's judgement: the verification checkpoint (restored on resume), the stall
        detectors, the finalization adjudicator and the output schema (each at its declared place
        among the interceptors), and the control tools (todo_write, task_status, question), which
        it returns as a tool source."""
        from ..tools.base import StaticTools
        from ..tools.control import control_tools
        from .finalize import Adjudicator
        from .stalls import StallDetectors
        from .verification import Checkpoint

        source = StaticTools("control", control_tools(emit=self.emit, ask=self.ask, on_status=self._declared,
                                                      turn=lambda: self.loop.turns if self.loop is not None else 0))
        resume = self.options.resume
        self.checkpoint = Checkpoint.restore(resume.verification) if resume is not None and resume.verification else Checkpoint()
        checkpoint = self.checkpoint
        if not self.options.judgement:
            return source
        # A front end may pass its own detectors or adjudicator (other settings, another checkpoint).
        given = self.interceptors.of_type(StallDetectors)
        self.stalls = given[0] if given else StallDetectors(emit=self.emit, object=checkpoint.object, resolve=checkpoint.resolve)
        if not given:
            self.interceptors.add(self.stalls)
        if not self.interceptors.of_type(Adjudicator):
            # The launch's turn limit is the adjudicator's: an open objection is never accepted, and a
            # model that keeps declaring completion over it ends MaxContinuations.
            self.interceptors.add(Adjudicator(checkpoint, emit=self.emit, interactive=self.options.interactive,
                                              max_continuations=self.settings.max_turns))
        if self.output_schema is not None:
            from .output_schema import OutputSchemaInterceptor

            self.schema_check = OutputSchemaInterceptor(self.output_schema)
            self.interceptors.add(self.schema_check)
        return source

    def arm_verification(self) -> None:
        """`/verify`: re-arm the verification checkpoint (the next completion needs a passing check)
        and record it at once, so the journal has it whatever the audit ends with. Not while a
        prompt is being worked on."""
        if self._submitting is not None:
            raise RuntimeError("a prompt is still being worked on: verify when it has ended")
        if self.checkpoint is None:
            raise RuntimeError("the session has not started")
        from .finalize import Adjudicator

        self.checkpoint.arm()
        turn = self.loop.turns if self.loop is not None else 0
        judges = [i for i in self.interceptors.of_type(Adjudicator) if i.checkpoint is self.checkpoint]
        if judges:
            judges[0].record(turn)  # it then knows this version is recorded
        else:
            self.emit(self.checkpoint.snapshot(turn))

    def _declared(self, status: str, summary: str) -> None:
        if self.loop is not None:
            self.loop.declare(status, summary)

    def _watch_tools(self, home: ToolServiceHome) -> None:
        """When the ToolService's background start fails, the session cannot go on: the running
        task (its model request included) is stopped and ends with that error, and so does any
        task submitted later."""
        starting = home.starting
        if starting is None:
            return

        def done(start: asyncio.Future[None]) -> None:
            if start.cancelled():
                return
            failure = start.exception()
            if failure is None:
                self.trace("tool service ready")
                return
            self._tools_failed = failure
            self._stop_task()

        starting.add_done_callback(done)

    def _budget_expired(self) -> None:
        """The session's time budget ran out: the running task stops (BudgetExpired)."""
        self._budget_out = True
        self._stop_task()

    def _stop_task(self) -> None:
        """Stop the running task, every child's (theirs end Cancelled: it came from outside them)
        and every workflow run (`/run`'s in the background too: nothing keeps running)."""
        if self.workflows is not None:
            for run in self.workflows.active():
                run.interrupt()
        for child in self.children:
            child.cancel()
        if self._task is not None and not self._task.done():
            self._task.cancel()

    @property
    def tools_starting(self) -> asyncio.Future[None] | None:
        """The ToolService's background start (done once it answers or failed), if it had one."""
        return self.home.starting if self.home is not None else None

    @property
    def tools_failure(self) -> BaseException | None:
        """Why the ToolService could not start, once its background start failed."""
        return self._tools_failed

    async def _make_provider(self) -> Provider:
        import httpx

        from ..providers import effort_supported, make_provider
        from ..providers.base import http_client, plain_http

        settings = self.settings
        plain = plain_http(settings.base_url)
        if self._http is None or (self._plain_http is not None and self._plain_http != plain):
            # A client of our own; a switch between an http:// and an https:// server takes a new one.
            timeout = httpx.Timeout(settings.retry.turn_timeout, connect=settings.retry.connect_timeout)
            client = http_client(timeout, settings.base_url)
            self._http = await client.__aenter__()
            self._own("http", client.aclose)
            self._plain_http = plain
        provider = make_provider(settings, self._http, images=lambda: self._takes_images(settings))
        if self.limiter is not None:
            from ..providers.limiter import LimitedProvider

            provider = LimitedProvider(provider, self.limiter)
        if settings.effort and not effort_supported(settings):
            self.warn(f"--effort {settings.effort} has no effect: {settings.model} takes no reasoning setting")
        if self.options.record_file is not None:
            from ..providers.replay import RecordingProvider

            if self._record_sink is None:
                sink = self.options.record_file.open("w", encoding="utf-8")
                self._record_sink = sink

                async def close_record() -> None:
                    sink.close()

                self._own("record", close_record)
            provider = RecordingProvider(provider, self._record_sink)
        return provider

    async def switch_model(self, settings: Settings) -> ModelSwitch:
        """Talk to another provider or model, or with another effort, from the next turn on.
        `settings` are settings the front end resolved (its flags with the new provider or model,
        so the right API key is found); only their provider fields are taken. Not while a prompt
        is being worked on; the conversation carries over."""
        if not self._announced or self._closed:
            raise RuntimeError("the session is not running: start() it first")
        if self._submitting is not None or self.loop is None:
            raise RuntimeError("a prompt is still being worked on: switch when it has ended")
        self.settings = self.settings.model_copy(update={k: getattr(settings, k) for k in PROVIDER_FIELDS})
        self.provider = await self._make_provider()
        self.loop.provider = self.provider
        self.loop.context_window, self.loop.context_window_of = None, self._context_window  # the new model's, at its first need
        event = ModelSwitch(provider=self.provider.name, model=self.provider.model, effort=self.settings.effort)
        self.emit(event)
        return event

    @staticmethod
    def _takes_images(settings: Settings) -> bool:
        """Whether the model is sent tool results' images: not when the model catalog at hand (the
        cache, no network) says it takes none. Asked at the first request that holds one."""
        from ..catalog import takes_images

        return takes_images(settings.home, settings.provider, settings.base_url, settings.model)

    def _context_window(self) -> int | None:
        if self.options.context_window is not None:
            return self.options.context_window
        from ..catalog import load_cached

        settings = self.settings
        cached = load_cached(settings.home)  # no network at start
        found = cached.find(settings.provider, settings.model) if cached is not None else None
        return found.context_window if found is not None else None

    # ------------------------------------------------------------------ what the model sees

    @property
    def tool_service_kind(self) -> str:
        """`local` or `lane` (an attached lane is a lane to the model and to events)."""
        if self.home is None:
            return "lane" if self.settings.sandbox.enabled else "local"
        return "local" if self.home.kind == "local" else "lane"

    def tool_names(self) -> list[str]:
        return self.registry.names() if self.registry is not None else []

    def tool_specs(self) -> list[ToolSpec]:
        """The tool specs of the next turn (recomputed at every turn boundary)."""
        assert self.registry is not None
        return self.registry.specs()

    # Tools the loop itself needs, whatever a persona's allowlist says: its control tools, the
    # persona's own tools, memory and skills.
    LOOP_TOOLS = frozenset({"task_status", "question", "todo_write", "switch_persona", "memory", "load_skill"})

    def _allowed_tools(self) -> list[str] | None:
        """The tools the model may be offered: a child's subset, a chosen persona's allowlist (and
        the loop's own tools), both when both are set; None: every tool."""
        allowed = self.options.tools
        persona = self.persona
        if persona is not None and persona.tools is not None:
            from .personas import contract_of

            contract = contract_of(persona)
            keep = set(persona.tools) | self.LOOP_TOOLS | ({contract[0]} if contract is not None else set())
            allowed = [name for name in allowed if name in keep] if allowed is not None else sorted(keep)
        return allowed

    def _toolset(self) -> str | None:
        """`--toolset`, else the persona's named toolset (a child ignores the persona's)."""
        if self.options.toolset is not None:
            return self.options.toolset
        if self.persona is not None and self.options.parent_id is None:
            return self.persona.toolset
        return None

    def _submit(self, value: object) -> None:
        if self.loop is not None:
            self.loop.submit(value)

    def _switch_persona(self, name: str) -> str:
        """`switch_persona`: resolve `name`; one with an output contract is refused (ValueError)."""
        from ..events import PersonaSwitch
        from ..personas import resolve_persona

        try:
            found = resolve_persona(name, workspace_root=self.settings.workspace_root, home=self.settings.home)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        if found.terminal:
            raise ValueError(f"the persona {found.name!r} has an output contract ({found.terminal_tool or 'a schema'}); "
                             "it is chosen at launch (osprey agent --persona), not switched to.")
        self.persona = found
        self.emit(PersonaSwitch(persona=found.name))
        return f"From the next turn on, the persona is {found.name}."

    def switch_persona(self, name: str) -> str:
        """Switch the persona from the next turn (the TUI's /agents); a ValueError says why not."""
        return self._switch_persona(name)

    def system_prompt(self) -> str:
        """The system prompt of the next turn (recomputed at every turn boundary)."""
        base = compose_system_prompt(self.settings, self.tool_service_kind)
        if self.persona is not None:
            from .personas import persona_section

            base = f"{base}\n\n{persona_section(self.persona, self._dev_tooling)}"
        for part in (self.skills, self.memory, self._mcp_tools):
            block = part.prompt_block() if part is not None else ""
            if block:
                base = f"{base}\n\n{block}"
        return self.extensions.compose(base) if self.extensions is not None else base

    def request_reload(self) -> None:
        """Find the extensions and the skills again at the next turn boundary (`/reload`). A
        RuntimeError when this session has neither."""
        if self.extensions is None and self.skills is None:
            raise RuntimeError("this session loads no extensions and no skills, so there is nothing to reload")
        if self.extensions is not None:
            self.extensions.request_reload()
        if self.skills is not None:
            self.skills.request_reload()

    def _turn_boundary(self) -> None:
        if self.extensions is not None and self.registry is not None and self.extensions.turn_boundary(self.registry, self.interceptors):
            self.emit(Notice(message=f"extensions reloaded: {len(self.registry.names())} tools", level="info"))
        if self.skills is not None and self.skills.turn_boundary():
            self.emit(Notice(message=f"skills found again: {len(self.skills.registry.skills)}", level="info"))
        self._sync_mcp()

    def _start_mcp_after_first_request(self, mcp: McpTools) -> None:
        """Start the MCP servers as the first model request goes out: loading their SDK and
        starting them takes CPU time (the GIL, on a busy machine the cores) that the session's
        set-up and the request's making would otherwise share, so a headless run's first request
        waits for nothing; the SDK then loads while the model thinks (`load_sdk` waits until the
        broker is quiet). Their tools could not have been offered in that request anyway."""
        assert self._http is not None
        hooks = self._http.event_hooks["request"]
        fired = False

        async def begun(request: Any) -> None:
            nonlocal fired
            if not fired:
                fired = True
                asyncio.get_running_loop().call_soon(unhook)  # not while the client goes through its hooks
                await mcp.start()

        def unhook() -> None:
            if begun in hooks:
                hooks.remove(begun)

        hooks.append(begun)
        self._stack.callback(unhook)  # a borrowed client keeps no hook of a closed session

    def _sync_mcp(self) -> None:
        """Put the MCP servers' current tools in the catalogue when they changed (a server became
        ready, failed, restarted or changed its tools) or the catalogue was made again (a reload
        of the extensions): the old ones out, the current ones in, as far as the child's tools,
        the persona's list and the toolset offer them."""
        source, registry = self._mcp_tools, self.registry
        if source is None or registry is None:
            return
        generation = source.generation
        kept = all(registry.tools.get(name) is tool for name, tool in self._mcp_added.items())
        if generation == self._mcp_generation and kept:
            return
        self._mcp_generation = generation
        for name, tool in self._mcp_added.items():
            if registry.tools.get(name) is tool:
                registry.remove(name)
        self._mcp_added = {}
        from ..mcp.tools import PREFIX, offered_by, within_budget

        lists: list[Sequence[str]] = []
        if self.options.tools is not None:
            lists.append(self.options.tools)
        if self.persona is not None and self.persona.tools is not None:
            lists.append(self.persona.tools)
        if self.extensions is not None and self.extensions.wanted is not None:
            lists.append(sorted(self.extensions.wanted))
        entries = source.entries()
        names_of: dict[str, set[str]] = {}
        for server, tool in entries:
            if server is not None:
                names_of.setdefault(server, set()).add(tool.name)
        wanted = [(server, tool) for server, tool in entries if tool.name not in registry.tools  # a built-in or custom tool comes first
                  and all(offered_by(names, server, tool.name) if server is not None else tool.name in names for names in lists)]
        for _server, tool in within_budget(wanted, source.left_out):
            registry.add(tool)
            self._mcp_added[tool.name] = tool
        # The resource tools reach only the servers the tools lists offer: all of a server's tools,
        # or one of them, in every list; never a server whose `enabled_tools` is empty.
        reachable: set[str] = set()
        for name, server_state in source.servers.servers.items():
            enabled = server_state.spec.enabled_tools
            if enabled is not None and not enabled:
                continue
            mine = names_of.get(name, set())
            if all(f"{PREFIX}{name}" in names or f"{PREFIX}{name}__*" in names or not mine.isdisjoint(names) for names in lists):
                reachable.add(name)
        source.reachable = frozenset(reachable)

    @property
    def messages(self) -> list[Message]:
        return self.loop.messages if self.loop is not None else []

    @property
    def child_homes(self) -> Literal["shared", "own"]:
        """Where this session's children run their tools."""
        return self.options.child_homes or self.settings.agent.child_lanes

    @property
    def turns(self) -> int:
        """The model turns of the whole conversation so far."""
        return self.loop.turns if self.loop is not None else 0

    @property
    def usage(self) -> Usage:
        return self.loop.usage if self.loop is not None else Usage()

    @property
    def started(self) -> bool:
        """`session_start` has been emitted (start() finished building)."""
        return self._announced

    @property
    def busy(self) -> bool:
        """A prompt is being worked on."""
        return self._submitting is not None

    # ------------------------------------------------------------------ driving it

    async def submit(self, prompt: str) -> TaskEnd:
        """Work one prompt to an outcome (emits `user_message` ... `task_end`). One at a time."""
        if not self._announced or self._closed:
            raise RuntimeError("the session is not running: start() it first")
        if self._submitting is not None:
            raise RuntimeError("a prompt is still being worked on: cancel() it or wait for it")
        assert self.loop is not None
        self._submitting = asyncio.get_running_loop().create_future()
        self._cancel_signal = None
        self._cancelled_outside = False
        self.loop.stopping = False
        turns_before = self.loop.turns
        self._unrecorded_prompt = prompt  # until _work records it (or it is blocked)
        self._task = asyncio.ensure_future(self._work(prompt))
        if self._tools_failed is not None:
            self._task.cancel()
        budget_timer = None
        if self._budget_deadline is not None:
            budget_timer = asyncio.get_running_loop().call_at(self._budget_deadline, self._budget_expired)
        try:
            outcome, final, error = Outcome.ERROR, "", None
            try:
                result = await self._task
                outcome, final, error = result.outcome, result.final_text, result.error
                if outcome is Outcome.COMPLETED and self.schema_check is not None:
                    final = self.schema_check.final_json() or final  # the validated value, without fences
                if self.loop.stopping:
                    # Stopped as the task finished: the person asked to stop, so it stopped.
                    outcome = Outcome.CANCELLED if self._cancelled_outside else Outcome.STOPPED
            except asyncio.CancelledError:
                if self._unrecorded_prompt is not None:
                    # Stopped before the task first ran: the prompt is kept, as it is when a stop
                    # comes later.
                    self.loop.add_user_message(self._unrecorded_prompt)
                    self._unrecorded_prompt = None
                outcome = Outcome.CANCELLED if self._cancelled_outside else Outcome.STOPPED
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    # The caller itself is being cancelled: end the task in the record, then go.
                    self._end_task(outcome, turns_before, "", None)
                    raise
                if self._tools_failed is not None and not self._cancelled_outside:
                    outcome, error = Outcome.ERROR, str(self._tools_failed)
                elif self._budget_out and not self._cancelled_outside:
                    outcome, error = Outcome.BUDGET_EXPIRED, f"the session's time budget of {self.options.budget:g} s ran out"
            except Exception as exc:
                # A bug, not a model or tool problem: end the task in the event stream, then let it surface.
                self._end_task(Outcome.ERROR, turns_before, "", f"internal error: {type(exc).__name__}: {exc}")
                raise
            return self._end_task(outcome, turns_before, final, error)
        finally:
            if budget_timer is not None:
                budget_timer.cancel()
            self._task = None
            done, self._submitting = self._submitting, None
            done.set_result(None)

    async def _work(self, prompt: str) -> TaskResult:
        """The task of one prompt: the interceptors judge the prompt (they may block it or add
        context for the model), then the loop works it."""
        from .calls import with_context
        from .loop import TaskResult

        assert self.loop is not None
        context: list[str] = []
        submission = PromptSubmission(text=prompt, session_id=self.session_id)
        for interceptor in self.interceptors:
            try:
                said = await interceptor.prompt_submitted(submission)
            except Exception as exc:  # noqa: BLE001 - an interceptor's bug must not end the task
                self.warn(f"the interceptor {interceptor.name} failed on the prompt: {type(exc).__name__}: {exc}")
                continue
            if said is None:
                continue
            if said.context:
                context.append(said.context)
            if said.block:
                # The prompt never reaches the conversation, so the next one follows the last answer.
                reason = said.reason or "no reason given"
                why = f"the prompt was blocked by {said.source or interceptor.name}: {reason}"
                self._unrecorded_prompt = None
                self.emit(Notice(message=why, level="warning"))
                return TaskResult(Outcome.ERROR, 0, "", why)
        self._unrecorded_prompt = None
        self.loop.add_user_message(with_context(prompt, context))
        return await self.loop.run_task()

    def _end_task(self, outcome: Outcome, turns_before: int, final: str, error: str | None) -> TaskEnd:
        assert self.loop is not None
        self._last = TaskEnd(
            session_id=self.session_id, outcome=outcome.value, exit_status=exit_status(outcome, self._cancel_signal),
            turns=self.loop.turns - turns_before, usage=self.usage, final_text=final, error=error,
        )
        self.emit(self._last)
        return self._last

    async def compact(self, instructions: str = "") -> Compaction:
        """Replace the conversation with a summary the model writes (`/compact`). Not while a
        prompt is being worked on. Raises ProviderError or TurnTimeout when it cannot be written;
        the conversation is then unchanged."""
        if not self._announced or self._closed:
            raise RuntimeError("the session is not running: start() it first")
        if self._submitting is not None or self.loop is None:
            raise RuntimeError("a prompt is still being worked on: compact when it has ended")
        return await self.loop.compact("manual", instructions)

    async def moa(self, prompt: str, preset: str | None = None, *, presets: ResolvedMoa | None = None) -> TaskEnd:
        """Run `prompt` through a Mixture of Agents preset (`preset`, else the default one of
        `presets`, else of the settings' `[moa]`): the reference models answer in parallel, then
        the aggregator merges their answers (`agents.moa`). The prompt and the merged answer enter
        the conversation as a user turn and an assistant turn; notices say which preset and models
        ran and what each used, and their usage counts in the session's. The session's own model
        is never changed. Ends with `task_end` as `submit` does (Error when no answer came, Stopped
        on `cancel()`); a preset that cannot be found is a ConfigError, before anything is recorded."""
        if not self._announced or self._closed:
            raise RuntimeError("the session is not running: start() it first")
        if self._submitting is not None or self.loop is None:
            raise RuntimeError("a prompt is still being worked on: cancel() it or wait for it")
        from ..agents.moa import Mixture, MoaProviders, choose_preset

        config = presets if presets is not None else self.settings.moa
        name, chosen = choose_preset(config, preset)
        loop = self.loop
        self._submitting = asyncio.get_running_loop().create_future()
        self._cancel_signal, self._cancelled_outside, loop.stopping = None, False, False
        turns_before = loop.turns
        providers = MoaProviders(self.settings, config, http=self._http, http_plain=self._plain_http, limiter=self.limiter)
        mixture = Mixture(name, chosen, providers, retry=self.settings.retry, on_answer=lambda answer: self._moa_answered(mixture, answer))
        try:
            conversation = list(loop.messages)
            text = await self._judged_prompt(prompt)
            if text is None:
                return self._end_task(Outcome.ERROR, turns_before, "", "the prompt was blocked (see the notice before this)")
            loop.add_user_message(text)
            if loop.stopping:
                raise asyncio.CancelledError
            self.emit(Notice.model_validate({"message": f"mixture of agents ({name}): {', '.join(chosen.reference_models)} answer, "
                                                        f"{chosen.aggregator} merges", "moa": {"preset": name, "stage": "start"}}))
            self._task = asyncio.ensure_future(mixture.run(system=self.system_prompt(), conversation=conversation, prompt=text,
                                                         on_text=self.on_text))
            final = await self._task
            self._moa_record(mixture, final.text)
            return self._end_task(Outcome.COMPLETED, turns_before, final.text, None)
        except asyncio.CancelledError:
            outcome = Outcome.CANCELLED if self._cancelled_outside else Outcome.STOPPED
            self._moa_record(mixture, None)
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                self._end_task(outcome, turns_before, "", None)
                raise
            return self._end_task(outcome, turns_before, "", None)
        except OspreyError as exc:
            self._moa_record(mixture, None)
            return self._end_task(Outcome.ERROR, turns_before, "", str(exc))
        finally:
            self._task = None
            done, self._submitting = self._submitting, None
            if done is not None:
                done.set_result(None)
            await asyncio.shield(providers.aclose())  # the clients made for models the session's own cannot reach

    async def _judged_prompt(self, prompt: str) -> str | None:
        """`prompt` as the interceptors let it through (with the context they add), or None when
        one blocked it (said in a notice)."""
        from .calls import with_context

        context: list[str] = []
        for interceptor in self.interceptors:
            try:
                said = await interceptor.prompt_submitted(PromptSubmission(text=prompt, session_id=self.session_id))
            except Exception as exc:  # noqa: BLE001 - an interceptor's bug must not end the task
                self.warn(f"the interceptor {interceptor.name} failed on the prompt: {type(exc).__name__}: {exc}")
                continue
            if said is not None and said.block:
                self.emit(Notice(message=f"the prompt was blocked by {said.source or interceptor.name}: {said.reason or 'no reason given'}",
                                 level="warning"))
                return None
            if said is not None and said.context:
                context.append(said.context)
        return with_context(prompt, context)

    def _moa_answered(self, mixture: Any, answer: Any) -> None:
        """A model of a running mixture answered or failed: said as it happens."""
        if answer.role != "reference":
            return
        said = (f"moa: {answer.model} answered in {answer.seconds:.1f} s ({answer.usage.input_tokens:,} in, {answer.usage.output_tokens:,} out)"
                if answer.ok else f"moa: {answer.model} failed: {answer.error}")
        self.emit(Notice(message=said, level="info" if answer.ok else "warning"))
        references = [a for a in mixture.answers if a.role == "reference"]
        if len(references) == len(mixture.preset.reference_models) and any(a.ok for a in references):
            self.emit(Notice(message=f"moa: {mixture.preset.aggregator} merges {sum(a.ok for a in references)} of {len(references)} answers"))

    def _moa_record(self, mixture: Any, answer: str | None) -> None:
        """Count what a mixture used (one turn of the conversation) and put its answer, if any,
        into the conversation; a notice lists every model with its outcome and usage."""
        assert self.loop is not None
        loop = self.loop
        if mixture.answers:
            loop.turns += 1
            loop.usage = loop.usage + mixture.usage
            self.emit(UsageEvent(turn=loop.turns, usage=mixture.usage, total=loop.usage))
            lines = [f"{a.role} {a.provider} · {a.model}: " + (f"{a.usage.input_tokens:,} in, {a.usage.output_tokens:,} out, {a.seconds:.1f} s"
                                                               if a.ok else f"failed ({a.error})") for a in mixture.answers]
            self.emit(Notice.model_validate({"message": f"mixture of agents ({mixture.name}):\n" + "\n".join(lines),
                                             "moa": {"preset": mixture.name, "stage": "end",
                                                     "models": [a.model_dump(mode="json") for a in mixture.answers]}}))
        if answer is not None:
            self.emit(AssistantText(turn=loop.turns, text=answer))
            loop.messages.append(AssistantMessage(text=answer))

    async def sync_workspace(self) -> str:
        """Bring back to this machine what a lane on another machine changed in its copy of the
        workspace so far (`/sync`); what happened, as a person reads it."""
        report = await self.home.sync() if self.home is not None else None
        if report is None:
            return "the tools work on the workspace itself (not on a copy on another machine): there is nothing to bring back"
        from ..toolservice.remote_lanes import describe

        return describe(report)

    async def run_tool(self, name: str, arguments: dict[str, Any]) -> CallResult:
        """Run one tool call the person asked for from a front end (`/diff` runs `bash`). A
        built-in tool is found even when the model is not offered it (a toolset). The hardline
        floor and the interceptors (hooks) judge it as they judge the model's calls; the approval
        policy and the stall detectors do not, since the person asked. Its call and result are journaled with
        requested_by "user" and stay out of the conversation."""
        if not self._announced or self._closed:
            raise RuntimeError("the session is not running: start() it first")
        assert self.loop is not None
        from ..messages import ToolCall

        call = ToolCall(id=f"user-{uuid.uuid4().hex[:12]}", name=name, arguments=arguments)
        tools = self._person_tools if self._person_tools is not None and self._person_tools.get(name) is not None else None
        return await self.loop.calls.run_for_user(self.loop.turns, call, tools)

    def cancel(self, signal: int | None = None, *, outside: bool = False) -> bool:
        """Stop the running task, if any, and every child's. `signal` says it came from outside
        (Ctrl-C, SIGTERM): the task then ends Cancelled with exit status 128 + signal; `outside`
        without a signal (a parent stopping its child) ends it Cancelled too; otherwise Stopped.
        Children are always cancelled: their parent's stop comes from outside them."""
        running = self._submitting is not None and self.loop is not None
        if running:
            assert self.loop is not None
            if self._cancel_signal is None:
                self._cancel_signal = signal
            self._cancelled_outside = self._cancelled_outside or outside or signal is not None
            self.loop.stopping = True
        self._stop_task()
        return running

    async def spawn(self, request: ChildRequest) -> Child:
        """Start a child session on `request.task` (see `children.start_child`); it runs in the
        background until it ends, is cancelled, or this session closes."""
        from .children import start_child

        if not self._announced or self._closed:
            raise RuntimeError("the session is not running: start() it first")
        return await start_child(self, request)

    async def close(self) -> SessionEnd | None:
        """Stop any running task, close the children, emit `session_end` (the last task's outcome,
        the session's totals), and close the parts the session made, in reverse order (tool sources,
        processes, its lane or dispatcher, its HTTP client); borrowed parts are left open.
        Idempotent: a second call waits for the first."""
        if self._closing is not None:
            await asyncio.shield(self._closing)
            return self._end
        self._closing = asyncio.get_running_loop().create_future()
        self._closed = True
        try:
            await self._close()
        finally:
            self._closing.set_result(None)
        return self._end

    async def _close(self) -> None:
        interrupted: BaseException | None = None
        try:
            submitting = self._submitting
            if submitting is not None:
                self.cancel()
                while not submitting.done():  # until its task_end is written
                    try:
                        await asyncio.shield(submitting)
                    except asyncio.CancelledError as exc:
                        interrupted = exc  # our caller is being cancelled: finish the teardown first
            if self.workflows is not None:
                # Active runs end interrupted (journaled) before their agents, the children, close.
                stopping = asyncio.ensure_future(self.workflows.close())
                while not stopping.done():
                    try:
                        await asyncio.shield(stopping)
                    except asyncio.CancelledError as exc:
                        interrupted = exc  # our caller is being cancelled: finish the teardown first
            # Children borrow this session's home and client: they end first.
            if self.children:
                children = list(self.children)
                closing = asyncio.ensure_future(asyncio.gather(*(child.close() for child in children), return_exceptions=True))
                while not closing.done():
                    try:
                        await asyncio.shield(closing)
                    except asyncio.CancelledError as exc:
                        interrupted = exc  # our caller is being cancelled: finish the teardown first
                for child, result in zip(children, closing.result(), strict=True):
                    if isinstance(result, BaseException):
                        self.warn(f"the agent {child.agent_id} did not close cleanly: {type(result).__name__}: {result}")
            if self._announced:
                last = self._last
                self._end = SessionEnd(
                    session_id=self.session_id,
                    outcome=last.outcome if last else Outcome.COMPLETED.value,
                    exit_status=last.exit_status if last else 0,
                    turns=self.loop.turns if self.loop else 0, usage=self.usage,
                    final_text=last.final_text if last else "", error=last.error if last else None,
                )
                self.emit(self._end)
                for interceptor in self.interceptors:
                    await self._notify(interceptor, "session_end", interceptor.session_end(self._end))
        finally:
            try:
                await self._stack.aclose()
            finally:
                if self.journal is not None and self._close_journal:
                    await asyncio.shield(asyncio.to_thread(self.journal.close))
        if interrupted is not None:
            raise interrupted
