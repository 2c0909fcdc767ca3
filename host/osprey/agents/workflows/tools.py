"""The model's workflow tools: `run_workflow` runs a discovered workflow and waits for its result;
`propose_workflow` writes a new one into the project's `.osprey/workflows/` for the person to
review, and never runs it (a project workflow runs only once trusted). Offered when
`[workflows] enabled` (the default)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from pydantic import Field

from ...extensions.layers import PROJECT_DIR
from ...tools.base import Invocation, Tool, ToolContext, ToolInput, ToolOutcome, ToolSource
from .discovery import MAX_WORKFLOW_BYTES, NAME, WorkflowError, trust_command
from .runs import MAX_ARGS_CHARS, WorkflowRuns

RUN_TOOL = "run_workflow"
PROPOSE_TOOL = "propose_workflow"
TOOL_NAMES = (RUN_TOOL, PROPOSE_TOOL)
MAX_LISTED = 20
RUN_DESCRIPTION = (
    "Run a workflow: a JavaScript file whose `main` starts agents (in parallel where it says so) and returns a result. "
    "Give its name (or the path of a discovered workflow file) and its arguments as one string; this waits until the run "
    "ends and returns main's result as JSON, or the run's error. Only workflows the person has trusted run."
)
PROPOSE_DESCRIPTION = (
    "Write a new workflow for the person to review: a JavaScript file defining `async function main(osprey)`, where "
    "`await osprey.agent({prompt, persona, model, tools})` runs an agent and gives {outcome, text, usage, session_id}, "
    "`osprey.args` / `osprey.argv` are the run's arguments, `osprey.log(msg)` reports progress, `Promise.all` runs agents "
    "in parallel, and what main returns is the result. The file goes to .osprey/workflows/NAME.js; it never runs until the "
    "person reviews and trusts it. An existing file is never overwritten."
)


class RunWorkflowInput(ToolInput):
    name: str = Field(min_length=1, max_length=4096, description="The workflow's name (or the path of a discovered workflow's file).")
    args: str = Field("", max_length=MAX_ARGS_CHARS, description="Its arguments, one string (osprey.args; osprey.argv has the words).")


class ProposeWorkflowInput(ToolInput):
    name: str = Field(pattern=NAME.pattern, description="The workflow's name: its file's stem and its slash command (lowercase, digits, - and _).")
    description: str = Field(min_length=1, max_length=200, description="One line saying what it does (the file's first // comment).")
    source: str = Field(min_length=1, max_length=MAX_WORKFLOW_BYTES, description="The JavaScript source; it must define async function main(osprey).")


class WorkflowTools(ToolSource):
    """`run_workflow` and `propose_workflow` over one session's `WorkflowRuns`; closing it
    interrupts the active runs."""

    name = "workflows"

    def __init__(self, runs: WorkflowRuns) -> None:
        self.runs = runs
        self._listed: list[str] = []

    async def start(self) -> None:
        found = await asyncio.to_thread(self.runs.discover)
        self._listed = [f"{item.name}: {item.description}" if item.description else item.name for item in found if item.runnable][:MAX_LISTED]

    def tools(self) -> Sequence[Tool]:
        described = RUN_DESCRIPTION
        if self._listed:
            described += " Workflows found when the session started: " + "; ".join(self._listed)
        return [
            Tool.from_model(RUN_TOOL, described, RunWorkflowInput, self._run),
            Tool.from_model(PROPOSE_TOOL, PROPOSE_DESCRIPTION, ProposeWorkflowInput, self._propose),
        ]

    async def close(self) -> None:
        await self.runs.close()

    async def _run(self, call: Invocation, ctx: ToolContext) -> ToolOutcome:
        try:
            # Found off the event loop (discovery reads every workflow file), then started.
            workflow = await asyncio.to_thread(self.runs.resolve, call.input.name, by_model=True)
            run = self.runs.start(workflow, call.input.args, by_model=True)
        except WorkflowError as exc:
            return ToolOutcome(f"Error (not_runnable, not retryable): {exc}", True, "not_runnable")
        try:
            result = await run.result()
        except asyncio.CancelledError:
            run.interrupt()  # the call was stopped: so is its run
            raise
        agents = f"{len(run.agents)} agent{'s' if len(run.agents) != 1 else ''}"
        if result.status != "done":
            return ToolOutcome(f"Error (workflow_{result.status}): the workflow {run.name} {result.status} after starting {agents}: {result.error}",
                               True, f"workflow_{result.status}")
        value = result.value if isinstance(result.value, str) else json.dumps(result.value, indent=2, ensure_ascii=False)
        return ToolOutcome(f"The workflow {run.name} is done ({agents}). Its result:\n{value}")

    async def _propose(self, call: Invocation, ctx: ToolContext) -> ToolOutcome:
        name, description, source = call.input.name, call.input.description, call.input.source
        if "async function main" not in source:
            return ToolOutcome("Error (invalid_content): the source must define `async function main(osprey)`", True, "invalid_content")
        text = f"// {' '.join(description.split())}\n{source if source.endswith(chr(10)) else source + chr(10)}"
        data = text.encode("utf-8")
        if len(data) > MAX_WORKFLOW_BYTES:
            return ToolOutcome(f"Error (invalid_content): the workflow is {len(data)} bytes, more than {MAX_WORKFLOW_BYTES}", True, "invalid_content")
        try:
            path = await asyncio.to_thread(write_proposal, Path(self.runs.settings.workspace_root), name, data)
        except ProposalRefused as exc:
            return ToolOutcome(f"Error ({exc.category}): {exc}", True, exc.category)
        return ToolOutcome(
            f"Wrote {path} for the person to review. It does not run until they trust it: they can read it, then run "
            f"`{trust_command(name)}` (a later change to the file withdraws that trust). Once trusted it runs as /{name} in the "
            f"terminal UI or through {RUN_TOOL}. Tell the person it is there and what it does.")


class ProposalRefused(WorkflowError):
    """A proposal that was not written; `category` is the stable name of why."""

    def __init__(self, message: str, category: str) -> None:
        super().__init__(message)
        self.category = category


def _real_dir(path: Path) -> None:
    """Make `path` a directory (refusing a symbolic link or anything but a directory there)."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ProposalRefused(f"cannot make {path}: {exc.strerror or exc}", "storage_unavailable") from None
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise ProposalRefused(f"{path} is not a directory (a symbolic link or a file), so nothing is written there", "storage_unavailable")


def write_proposal(workspace_root: Path, name: str, data: bytes) -> Path:
    """Write `.osprey/workflows/NAME.js` under the workspace root, never over an existing file
    and never through a symbolic link."""
    osprey_dir = workspace_root / PROJECT_DIR
    _real_dir(osprey_dir)
    directory = osprey_dir / "workflows"
    _real_dir(directory)
    path = directory / f"{name}.js"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise ProposalRefused(f"{path} already exists; a proposal never overwrites a workflow: choose another name", "already_exists") from None
    except OSError as exc:
        raise ProposalRefused(f"cannot write {path}: {exc.strerror or exc}", "storage_unavailable") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path
