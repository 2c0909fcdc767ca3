"""A session's workflow runs: each runs its script in a process of its own (`worker.py`) and its
agents as child sessions of the session, within the run's limits.

`WorkflowRuns` belongs to one session, which gives it its `spawn` (a child session for each
`osprey.agent` call), its settings and its event sink. `start` begins a run in the background and
returns its `WorkflowRun`; `interrupt_all` (the session's close) stops every active run, which
ends `interrupted` in the journal. Limits: at most MAX_ACTIVE_RUNS runs of a session at once (the
next is refused), and at most `[workflows] max_concurrent_agents` agents at once across all of
them (more wait for a slot, holding at most MAX_WAITING_BYTES of specs per run: past that the
`osprey.agent` call is refused). Per run: at most `max_agents` agents in all (the next
`osprey.agent` call is refused with an error the script can catch), a wall-clock limit
(`timeout_s`) and the script's memory limit (`heap_mb`). Whatever ends a run (its end, an error, a
limit, an interrupt) kills the script's process and cancels and closes its agents.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import sys
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...events import Event, WorkflowEnd, WorkflowProgress, WorkflowStart
from ...extensions.layers import ArtifactError, inside, read_inside, real_path
from ...messages import Usage
from .discovery import MAX_WORKFLOW_BYTES, WorkflowError, WorkflowFile, describe, discover_workflows, find_workflow, load_source

if TYPE_CHECKING:
    from ...config import Settings
    from ...config.schema import WorkflowsSettings
    from ...tools.base import ChildAgent, ChildRequest

RunStatus = Literal["running", "done", "failed", "interrupted"]
AgentStatus = Literal["waiting", "running", "done", "failed", "cancelled"]
MAX_LOG_LINES = 200  # kept per run
MAX_LOG_EVENTS = 1000  # journaled per run; later lines are kept in the run's log only
MAX_LINE_CHARS = 4000
MAX_AGENT_TEXT = 200_000  # of an agent's final text, given to the script
MAX_ARGS_CHARS = 64 * 1024
MAX_ARGV = 1000
MAX_RESULT_PREVIEW = 4000  # of a result, in the `workflow_end` event
MAX_MESSAGE_BYTES = 8 * 1024 * 1024  # one line from the script's process
MAX_STDERR = 16 * 1024
KEEP_FINISHED = 50  # finished runs a session remembers
MAX_ACTIVE_RUNS = 8  # a session's runs at once
MAX_PROMPT_CHARS = 100_000  # an agent's prompt (worker.MAX_PROMPT_CHARS)
MAX_WAITING_BYTES = 8 * 1024 * 1024  # of a run's agent specs waiting for a slot
HEAP_EXIT = 3  # worker.HEAP_EXIT (not imported: the broker never loads V8)


class AgentSpec(BaseModel):
    """What `osprey.agent({...})` takes; anything else is refused, so a typo surfaces."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at the first agent: most sessions run no workflow

    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    persona: str | None = Field(None, min_length=1, max_length=80)
    model: str | None = Field(None, min_length=1, max_length=200)
    tools: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(None, max_length=200)


@dataclass
class WorkflowAgent:
    """One agent of a run, as the run's progress shows it."""

    label: str
    persona: str | None
    status: AgentStatus = "waiting"
    session_id: str | None = None
    outcome: str | None = None
    error: str | None = None
    _child: Any = field(default=None, repr=False)
    _turns: int = 0
    _usage: Usage = field(default_factory=Usage)

    @property
    def turns(self) -> int:
        """Its model turns so far."""
        session = getattr(self._child, "session", None)
        return int(getattr(session, "turns", self._turns)) if self.status == "running" and session is not None else self._turns

    @property
    def usage(self) -> Usage:
        """Its tokens so far."""
        session = getattr(self._child, "session", None)
        if self.status == "running" and session is not None:
            usage = getattr(session, "usage", None)
            if isinstance(usage, Usage):
                return usage
        return self._usage


@dataclass
class WorkflowResult:
    """How a run ended: its status, what `main` returned (JSON-able, bounded) and the error
    (`FILE:LINE: message` for a script's own error)."""

    status: RunStatus
    value: Any = None
    error: str | None = None


class WorkflowRun:
    """One run of a workflow: its agents, its log, and (once it ends) its result."""

    def __init__(self, workflow: WorkflowFile, args: str, limits: WorkflowsSettings, slots: asyncio.Semaphore | None = None) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.workflow = workflow
        self.name = workflow.name
        self.path = workflow.path
        self.args = args
        self.limits = limits
        self.status: RunStatus = "running"
        self.agents: list[WorkflowAgent] = []
        self.log: deque[str] = deque(maxlen=MAX_LOG_LINES)
        self.error: str | None = None
        self.value: Any = None
        self._logged = 0
        # The session's slots for agents at once, shared by all its runs.
        self._slots = slots if slots is not None else asyncio.Semaphore(limits.max_concurrent_agents)
        self._waiting = 0  # bytes of agent specs waiting for a slot
        self._interrupted = False
        self._task: asyncio.Task[WorkflowResult] | None = None
        self._agent_tasks: set[asyncio.Task[None]] = set()
        self._process: asyncio.subprocess.Process | None = None

    @property
    def active(self) -> bool:
        return self.status == "running"

    @property
    def usage(self) -> Usage:
        """The tokens of all its agents so far."""
        total = Usage()
        for agent in self.agents:
            total = total + agent.usage
        return total

    async def result(self) -> WorkflowResult:
        """Wait for the run's end. Cancelling the wait leaves the run running."""
        assert self._task is not None
        return await asyncio.shield(self._task)

    def interrupt(self) -> bool:
        """Stop the run: its script's process is killed and its agents are cancelled; it ends
        `interrupted`. False when it had already ended."""
        if self._task is None or self._task.done():
            return False
        if not self._interrupted:  # once: a second cancel would land in the run's teardown
            self._interrupted = True
            self._task.cancel()
        return True


async def _tail(stream: asyncio.StreamReader) -> bytes:
    """The last MAX_STDERR bytes of a stream, read to its end (so the writer never blocks on it)."""
    kept = b""
    while chunk := await stream.read(64 * 1024):
        kept = (kept + chunk)[-MAX_STDERR:]
    return kept


def split_args(args: str) -> list[str]:
    """`osprey.argv`: the arguments split as a shell would split words (quotes group, no
    expansion); unbalanced quotes fall back to splitting at spaces."""
    try:
        words = shlex.split(args)
    except ValueError:
        words = args.split()
    return words[:MAX_ARGV]


class WorkflowRuns:
    """The workflow runs of one session (see the module's docstring)."""

    def __init__(self, spawn: Callable[[ChildRequest], Awaitable[ChildAgent]], settings: Settings, emit: Callable[[Event], None], *,
                 on_change: Callable[[WorkflowRun], None] | None = None, limits: WorkflowsSettings | None = None,
                 offered: Callable[[], list[str]] | None = None) -> None:
        self._spawn = spawn
        self._offered = offered  # the session's tools, which an agent's `tools` must be among (None: not checked)
        self.settings = settings
        self.limits = limits if limits is not None else settings.workflows
        self._emit = emit
        # Called whenever a run changes (an agent starts or ends, a log line, its end): a front end's refresh.
        self.on_change = on_change
        self.runs: list[WorkflowRun] = []
        self._slots = asyncio.Semaphore(self.limits.max_concurrent_agents)  # shared by all the session's runs
        self._closed = False

    # ------------------------------------------------------------------ finding

    def discover(self) -> list[WorkflowFile]:
        """The workflows of this session's layers (found again at each call)."""
        settings = self.settings
        return discover_workflows(settings.workspace_root, settings.home, cwd=settings.cwd)

    def resolve(self, target: str | Path | WorkflowFile, *, by_model: bool = False) -> WorkflowFile:
        """The workflow `target` names: a discovered workflow's name, or a path to a .js file. A
        path in the workspace or in $OSPREY_HOME must be a discovered workflow (so the trust rules
        apply); a file elsewhere runs when the person asks for it, never when the model does. A
        WorkflowError says why not."""
        if isinstance(target, WorkflowFile):
            return target
        text = str(target).strip()
        found = self.discover()
        if isinstance(target, str) and "/" not in text and not text.endswith(".js"):
            return find_workflow(found, text)
        if not text:
            raise WorkflowError("name a workflow or the path of a .js file")
        path = Path(os.path.expanduser(text))
        path = path if path.is_absolute() else Path(self.settings.cwd) / path
        real = real_path(path)
        for item in found:
            if real_path(item.path) == real:
                return item
        if by_model:
            raise WorkflowError(f"{text} is not a discovered workflow; the model may run only those (see `osprey extensions`)")
        if not real.endswith(".js"):
            raise WorkflowError(f"{text}: a workflow is a .js file")
        if not os.path.isfile(real):
            raise WorkflowError(f"{text}: no such file")
        if inside(real, self.settings.workspace_root):
            raise WorkflowError(f"{text} is in the workspace, where workflows run from .osprey/workflows/ once trusted: "
                                f"move it there, review it, then run `osprey extensions trust {path.stem}`")
        if inside(real, self.settings.home):
            raise WorkflowError(f"{text} is in Osprey's home, where workflows run from {Path(self.settings.home) / 'workflows'}/")
        try:
            data = read_inside(Path(real), Path(real).parent, MAX_WORKFLOW_BYTES)
        except ArtifactError as exc:
            raise WorkflowError(f"{text}: {exc}") from None
        return WorkflowFile(Path(real).stem, Path(real), "user", describe(data or b""), True, key=real, external=True)

    # ------------------------------------------------------------------ running

    def start(self, target: str | Path | WorkflowFile, args: str = "", *, by_model: bool = False) -> WorkflowRun:
        """Start a run of `target` (see `resolve`) with `args`, in the background; its source is
        read and its trust checked now. A WorkflowError says why it cannot start."""
        if self._closed:
            raise WorkflowError("this session is closing: no workflow starts now")
        if len(self.active()) >= MAX_ACTIVE_RUNS:
            raise WorkflowError(f"{MAX_ACTIVE_RUNS} workflows of this session are running, the most at once: "
                                "wait for one to end (or stop one) and start this again")
        if len(args) > MAX_ARGS_CHARS:
            raise WorkflowError(f"the arguments are {len(args)} characters long, more than {MAX_ARGS_CHARS}; shorten them")
        workflow = self.resolve(target, by_model=by_model)
        if workflow.external:
            if by_model:
                raise WorkflowError(f"{workflow.path} is not a discovered workflow; the model may run only those (see `osprey extensions`)")
            source = self._read_external(workflow)
        else:
            source = load_source(workflow, self.settings.workspace_root, self.settings.home)
        run = WorkflowRun(workflow, args, self.limits, self._slots)
        self.runs.append(run)
        finished = [r for r in self.runs if not r.active]
        for old in finished[:-KEEP_FINISHED]:
            self.runs.remove(old)
        run._task = asyncio.ensure_future(self._run(run, source))
        return run

    def _read_external(self, workflow: WorkflowFile) -> str:
        try:
            data = read_inside(workflow.path, workflow.path.parent, MAX_WORKFLOW_BYTES)
        except ArtifactError as exc:
            raise WorkflowError(f"{workflow.path}: {exc}") from None
        if data is None:
            raise WorkflowError(f"{workflow.path}: no such file")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise WorkflowError(f"{workflow.path} is not UTF-8 text") from None

    def active(self) -> list[WorkflowRun]:
        """The runs still running."""
        return [run for run in self.runs if run.active]

    def get(self, run_id: str) -> WorkflowRun | None:
        return next((run for run in self.runs if run.id == run_id), None)

    async def interrupt_all(self) -> None:
        """Stop every active run; each ends `interrupted` (journaled) once its agents are closed."""
        runs = self.active()
        for run in runs:
            run.interrupt()
        for run in runs:
            if run._task is not None:
                try:
                    await asyncio.shield(run._task)
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise

    async def close(self) -> None:
        """The session closes: no new run starts, and the active ones are interrupted."""
        self._closed = True
        await self.interrupt_all()

    def _changed(self, run: WorkflowRun) -> None:
        if self.on_change is not None:
            try:
                self.on_change(run)
            except Exception:  # noqa: BLE001 - a front end's refresh must not end a run
                pass

    def _progress(self, run: WorkflowRun, agent: WorkflowAgent | None = None, message: str = "") -> None:
        if agent is not None:
            self._emit(WorkflowProgress(run_id=run.id, message=message, label=agent.label, status=agent.status, agent_session_id=agent.session_id))
        elif run._logged < MAX_LOG_EVENTS:
            run._logged += 1
            self._emit(WorkflowProgress(run_id=run.id, message=message))
        self._changed(run)

    async def _run(self, run: WorkflowRun, source: str) -> WorkflowResult:
        workflow = run.workflow
        self._emit(WorkflowStart(run_id=run.id, name=run.name, path=str(run.path), scope=workflow.scope, args=run.args[:MAX_LINE_CHARS]))
        self._changed(run)
        try:
            try:
                async with asyncio.timeout(self.limits.timeout_s):
                    run.value = await self._script(run, source)
                run.status = "done"
            except TimeoutError:
                run.status = "failed"
                run.error = (f"{run.path.name}: the run took longer than its wall-clock limit of {self.limits.timeout_s:g} s "
                             "([workflows] timeout_s); its script and agents were stopped")
            except WorkflowError as exc:
                run.status, run.error = "failed", str(exc)
            except asyncio.CancelledError:
                run.status = "interrupted"
                run.error = "the run was interrupted; its script and agents were stopped"
            except Exception as exc:  # noqa: BLE001 - a bug of ours: the run still ends, and says why
                run.status, run.error = "failed", f"internal error: {type(exc).__name__}: {exc}"
        finally:
            # Finished even when cancelled again meanwhile: the run's end is always journaled.
            stopping = asyncio.ensure_future(self._stop(run))
            while not stopping.done():
                try:
                    await asyncio.shield(stopping)
                except asyncio.CancelledError:
                    pass
            if run.status == "running":  # a bug of ours: still a run that ended
                run.status, run.error = "failed", "the run ended unexpectedly"
            preview = "" if run.value is None else json.dumps(run.value)[:MAX_RESULT_PREVIEW]
            self._emit(WorkflowEnd(run_id=run.id, name=run.name, status=run.status, result=preview, error=run.error,
                                   agents=len(run.agents), usage=run.usage))
            self._changed(run)
        return WorkflowResult(run.status, run.value, run.error)

    async def _stop(self, run: WorkflowRun) -> None:
        """Kill the script's process and cancel its agents (closing their sessions)."""
        process = run._process
        if process is not None and process.returncode is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            await process.wait()
        tasks = list(run._agent_tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _script(self, run: WorkflowRun, source: str) -> Any:
        """Run the script's process and answer it until it ends; what `main` returned."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}  # no credentials reach it
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-m", "osprey.agents.workflows.worker", stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd="/", start_new_session=True, limit=MAX_MESSAGE_BYTES,
            )
        except OSError as exc:
            raise WorkflowError(f"the workflow engine could not be started ({sys.executable}): {exc.strerror or exc}") from None
        run._process = process
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        stderr = asyncio.ensure_future(_tail(process.stderr))
        filename = re.sub(r"[^A-Za-z0-9._-]", "_", run.path.name)[:100]  # also the script's sourceURL
        start = {"op": "start", "source": source, "filename": filename, "args": run.args, "argv": split_args(run.args),
                 "tools": sorted(self._offered()) if self._offered is not None else [], "heap_mb": self.limits.heap_mb}
        await self._send(process, start)
        try:
            while True:
                try:
                    line = await process.stdout.readline()
                except ValueError:
                    raise WorkflowError(f"{filename}: the script sent a message longer than {MAX_MESSAGE_BYTES} bytes") from None
                if not line:
                    await process.wait()
                    raise WorkflowError(self._died(filename, process.returncode, await stderr))
                try:
                    message = json.loads(line)
                except ValueError:
                    raise WorkflowError(f"{filename}: the workflow engine sent something that is not JSON") from None
                op = message.get("op") if isinstance(message, dict) else None
                if op == "agent":
                    spec = str(message.get("spec", ""))
                    size = len(spec.encode("utf-8", "replace"))
                    if run._waiting + size > MAX_WAITING_BYTES:
                        await self._send(process, {"op": "agent_result", "id": message.get("id"), "error": (
                            f"osprey.agent: this run's agents waiting for a slot already hold {run._waiting} bytes of specs, the most "
                            f"one run may queue is {MAX_WAITING_BYTES}; this agent was not started: await some agents before starting more")})
                        continue
                    run._waiting += size
                    task = asyncio.ensure_future(self._agent(run, process, message.get("id"), spec, size))
                    run._agent_tasks.add(task)
                    task.add_done_callback(run._agent_tasks.discard)
                elif op == "log":
                    text = str(message.get("message", ""))[:MAX_LINE_CHARS]
                    run.log.append(text)
                    self._progress(run, message=text)
                elif op == "done":
                    try:
                        return json.loads(str(message.get("value", "null")))
                    except ValueError:
                        raise WorkflowError(f"{filename}: main returned something that is not JSON") from None
                elif op == "error":
                    error = str(message.get("error", "the script failed"))[:MAX_LINE_CHARS]
                    if message.get("kind") == "heap":
                        error += " ([workflows] heap_mb); its script and agents were stopped"
                    raise WorkflowError(error)
        finally:
            if not stderr.done():
                stderr.cancel()

    @staticmethod
    def _died(filename: str, code: int | None, stderr: bytes) -> str:
        text = stderr.decode("utf-8", "replace")
        if code == HEAP_EXIT or "out of memory" in text.lower() or "heap limit" in text.lower():
            return f"{filename}: the script ran out of memory (its heap limit, [workflows] heap_mb); its agents were stopped"
        last = text.strip().splitlines()[-1][:500] if text.strip() else ""
        return f"{filename}: the workflow engine stopped unexpectedly (exit status {code})" + (f": {last}" if last else "")

    async def _send(self, process: asyncio.subprocess.Process, message: dict[str, Any]) -> None:
        assert process.stdin is not None
        try:
            process.stdin.write((json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8"))
            await process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the process ended: its end is read from its output

    async def _agent(self, run: WorkflowRun, process: asyncio.subprocess.Process, ident: Any, spec_text: str, size: int) -> None:
        """One `osprey.agent` call: within the run's limits, a child session on the prompt; the
        script gets `{outcome, text, usage, session_id}` or an error."""
        held = [size]  # bytes counted in run._waiting until a slot is had
        try:
            await self._agent_call(run, process, ident, spec_text, held)
        finally:
            run._waiting -= held[0]

    async def _agent_call(self, run: WorkflowRun, process: asyncio.subprocess.Process, ident: Any, spec_text: str, held: list[int]) -> None:
        limits = self.limits
        try:
            spec = AgentSpec.model_validate_json(spec_text)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in exc.errors()[:5])
            await self._send(process, {"op": "agent_result", "id": ident, "error": f"osprey.agent: {problems} "
                                       "(it takes {prompt, persona, model, tools}; prompt is required)"})
            return
        unknown = [name for name in spec.tools or () if self._offered is not None and name not in self._offered()]
        if unknown:
            await self._send(process, {"op": "agent_result", "id": ident, "error": (
                f"osprey.agent: tools this session does not have: {', '.join(sorted(set(unknown)))[:500]}")})
            return
        if len(run.agents) >= limits.max_agents:
            await self._send(process, {"op": "agent_result", "id": ident, "error": (
                f"osprey.agent: this run has already started {limits.max_agents} agents, the most one run may start "
                "([workflows] max_agents); this agent was not started")})
            return
        agent = WorkflowAgent(label=f"{spec.persona or 'agent'} #{len(run.agents) + 1}", persona=spec.persona)
        run.agents.append(agent)
        self._progress(run, agent)
        try:
            answer = await self._agent_run(run, agent, spec, held)
        except asyncio.CancelledError:
            agent.status = "cancelled"
            self._progress(run, agent)
            raise
        await self._send(process, {"op": "agent_result", "id": ident, **answer})

    async def _agent_run(self, run: WorkflowRun, agent: WorkflowAgent, spec: AgentSpec, held: list[int]) -> dict[str, Any]:
        from ...errors import OspreyError
        from ...tools.base import ChildRequest

        async with run._slots:
            run._waiting -= held[0]
            held[0] = 0
            agent.status = "running"
            try:
                child = await self._spawn(ChildRequest(task=spec.prompt, name=agent.label, persona=spec.persona, model=spec.model, tools=spec.tools))
            except (OspreyError, RuntimeError, ValueError) as exc:
                agent.status, agent.error = "failed", str(exc)
                self._progress(run, agent)
                return {"error": f"osprey.agent: {exc}"}
            agent._child, agent.session_id = child, child.agent_id
            self._progress(run, agent)
            try:
                end = await child.wait()
                agent._turns, agent._usage = end.turns, end.usage
            finally:
                session = getattr(child, "session", None)
                if session is not None:
                    agent._turns, agent._usage = int(session.turns), session.usage
                await asyncio.shield(child.close())
                agent._child = None  # a closed session is not kept for the run's progress
        agent.outcome = end.outcome
        agent.error = end.error
        agent.status = "done" if end.outcome == "Completed" else "cancelled" if end.outcome == "Cancelled" else "failed"
        self._progress(run, agent)
        result: dict[str, Any] = {"outcome": end.outcome, "text": end.final_text[:MAX_AGENT_TEXT], "usage": agent._usage.model_dump(),
                                  "session_id": child.agent_id}
        if end.error:
            result["error"] = end.error[:MAX_LINE_CHARS]
        return {"result": result}
