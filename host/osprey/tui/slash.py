"""What the slash commands do (`commands.py` lists them): each reaches the session through the
driver and the session's public API, and shows what it found through the presenter."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import workspace_diff
from ..choices import EFFORTS, MODEL_PROVIDERS
from ..config import Settings
from ..errors import OspreyError
from ..numbers import counted, grouped
from ..sessions.journal import find_session, list_sessions
from ..terminal_text import clean
from . import commands
from .presenter import DIFF_COMMAND

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..session.core import Session
    from .app import OspreyApp

DIFF_TIMEOUT_MS = workspace_diff.TIMEOUT_MS
REDISCOVER_SECONDS = 5.0  # how long a discovery of the workflows answers for the commands and the menu
MAX_ENDED_SHOWN = 10  # ended runs /workflows still shows
MAX_RESULT_CHARS = 40_000  # of a run's result, sent to the model
MAX_MCP_TOOLS_SHOWN = 12  # of a server's tool names /extensions lists
NO_SEARCH_SERVICE = (
    "/deep-research searches the web, and no search service is configured. Configure one, then restart osprey:\n"
    "  Exa: put an API key in EXA_API_KEY (the environment or a .env file)\n"
    "  Brave Search: put an API key in BRAVE_API_KEY\n"
    "  SearXNG: in config.toml, [web_search] searxng_url = \"http://localhost:8888\" (its JSON format enabled)\n"
    "`osprey docs web-tools` has the details."
)


def shadowed(name: str) -> bool:
    """A built-in command's name: a workflow of that name is not a command."""
    return name in commands.BY_NAME


def workflow_command(workflow: Any) -> commands.Command:
    """The slash command of a discovered workflow."""
    about = " ".join(str(workflow.description or "").split())[:160] or f"Run the {workflow.scope} workflow {workflow.name}."
    return commands.Command(workflow.name, f"/{workflow.name} [ARGS]", about)


def first_word(argument: str) -> tuple[str, str]:
    """`("my flows/a.js", "x y")` for `'"my flows/a.js" x y'`: the first word (quoted when it holds spaces) and the rest as typed."""
    text = argument.strip()
    if text[:1] in ("'", '"'):
        end = text.find(text[0], 1)
        if end < 0:
            raise ValueError(f"no closing quotation mark in {text[:200]!r}")
        return text[1:end], text[end + 1:].strip()
    parts = text.split(maxsplit=1)
    return (parts[0] if parts else ""), (parts[1] if len(parts) > 1 else "")


def result_text(value: Any) -> str:
    """A run's result for the model: a string as it is, anything else as JSON; bounded."""
    import json

    text = "(the workflow returned nothing)" if value is None else value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[cut: {len(text) - MAX_RESULT_CHARS:,} more characters]"
    return text


class SlashCommands:
    """The commands of one app; `cmd_NAME` runs `/NAME ARGUMENT`."""

    def __init__(self, app: OspreyApp) -> None:
        self.app = app
        self.driver = app.driver
        self.presenter = app.presenter
        self._found: tuple[Any, float, list[Any]] | None = None  # the session, when, and the workflows discovered for it
        self._discovering = False

    def note(self, text: str, level: str = "info") -> None:
        self.presenter.note(text, level)

    async def run(self, name: str, argument: str) -> None:
        if name in commands.WORKFLOW_COMMANDS and self._workflows_off():
            self.app.notify(clean(f"unknown command /{name}: /help lists them"), severity="error", markup=False)
            return
        handler = getattr(self, f"cmd_{name.replace('-', '_')}", None) if name in commands.BY_NAME else None
        if handler is None and (prompt := self._mcp_prompt(name)) is not None:
            await self.run_mcp_prompt(prompt, argument)
            return
        if handler is None and (workflow := await self._workflow_command(name)) is not None:
            await self.start_workflow(workflow, argument, f"/{name}")
            return
        if handler is None and self._skill_command(name) is not None:
            await self.run_skill(name, argument)
            return
        if handler is None:
            why = self._why_not(name)
            self.app.notify(clean(f"unknown command /{name}: /help lists them" + (f" (the workflow {name} does not run: {why})" if why else "")),
                            severity="error", markup=False)
            return
        await handler(argument)

    async def cmd_help(self, argument: str) -> None:
        topic = argument.strip().lower()
        if topic == "tools":
            await self._tool_catalogue()
            return
        if topic:
            self.note(f"/help: no help topic {argument.strip()!r}; /help lists the commands, /help tools the tools", "warning")
            return
        await self.workflow_files()
        extra, hidden = self._workflow_scope()
        text = commands.help_text(extra=extra, hidden=hidden)
        if prompts := self.mcp_commands():
            width = max(len(c.usage) for c in prompts)
            text += "\n\nMCP prompts:\n" + "\n".join(f"{c.usage.ljust(width)}  {c.help}" for c in prompts)
        self.note(text)

    async def _tool_catalogue(self) -> None:
        session = self.driver.session
        if session is None or not session.started:
            self.note("the session has not started yet")
            return
        specs = session.tool_specs()
        self.note("\n".join([f"{len(specs)} tools the model has:",
                             *(f"{spec.name}: {spec.description.splitlines()[0] if spec.description else ''}" for spec in specs)]))

    async def cmd_quit(self, argument: str) -> None:
        await self.app.action_quit()

    async def cmd_new(self, argument: str) -> None:
        await self.driver.renew()

    # ------------------------------------------------------------------ skills

    def _skills(self) -> Any:
        session = self.driver.session
        return session.skills if session is not None else None

    def _skill_command(self, name: str) -> Any:
        """The project or user skill `/NAME` runs (built-in commands win; bundled skills have their own)."""
        skills = self._skills()
        found = skills.registry.find(name) if skills is not None else None
        return found if found is not None and found.scope != "bundled" else None

    async def cmd_skills(self, argument: str) -> None:
        skills = self._skills()
        if skills is None or not skills.registry.skills:
            self.note("no skills were found (see `osprey docs skills` for where they are looked for)")
            return
        lines = [f"{len(skills.registry.skills)} skills (load_skill NAME; project and user skills are also /NAME):"]
        for skill in skills.registry.skills:
            lines.append(f"  {skill.name} ({skill.scope}): {' '.join(skill.description.split())[:160]}")
        self.note("\n".join(lines))

    async def cmd_skill(self, argument: str) -> None:
        skills = self._skills()
        name = argument.strip()
        if not name:
            self.note("/skill NAME: which skill? /skills lists them", "warning")
            return
        found = skills.registry.find(name) if skills is not None else None
        if found is None:
            known = ", ".join(skills.registry.names()) if skills is not None else ""
            self.note(f"/skill: no skill is named {name!r}" + (f"; there are: {known}" if known else ""), "error")
            return
        self.note("\n".join([f"name: {found.name}", f"scope: {found.scope}", f"description: {found.description}", f"path: {found.path}"]))

    async def cmd_bug_report(self, argument: str) -> None:
        await self.run_skill("bug-report", argument)

    async def run_skill(self, name: str, argument: str) -> None:
        """Send a prompt that has the model follow skill `name` for `argument`."""
        skills = self._skills()
        if skills is None:
            self.note(f"/{name}: the session has not started yet", "warning")
            return
        from ..skills import SkillError

        try:
            instructions = await asyncio.to_thread(skills.registry.load, name)
        except SkillError as exc:
            self.note(f"/{name}: {exc.message}", "error")
            return
        request = argument.strip() or "(no details given yet: ask me for what you need)"
        self.app.send(f"/{name} {argument}".rstrip() + f"\n\nFollow the skill {name} for this request: {request}\n\n"
                      f"<skill name=\"{name}\">\n{instructions}\n</skill>")

    # ------------------------------------------------------------------ MCP prompts

    def _mcp_prompts(self) -> list[Any]:
        """The prompt commands of the session's ready MCP servers (`PromptCommand`s), but those a
        built-in command's name hides."""
        session = self.driver.session
        if session is None or not session.started or session.mcp is None:
            return []
        from ..mcp.prompts import prompt_commands

        return [c for c in prompt_commands(session.mcp) if not shadowed(c.name)]

    def mcp_commands(self) -> list[commands.Command]:
        """The MCP prompt commands as the menu and /help show them."""
        return [commands.Command(c.name, c.usage, c.about) for c in self._mcp_prompts()]

    def _mcp_prompt(self, name: str) -> Any:
        from ..mcp.prompts import find

        return find(self._mcp_prompts(), name)

    async def run_mcp_prompt(self, command: Any, argument: str) -> None:
        """Get the prompt with the typed arguments from its server and send it as the person's message."""
        from ..mcp.prompts import McpPromptError, run_prompt

        session = self.driver.session
        try:
            text = await run_prompt(session.mcp if session is not None else None, command, argument)
        except McpPromptError as exc:
            self.note(str(exc), "error")
            return
        self.app.send(text)

    # ------------------------------------------------------------------ workflows

    def _workflow_runs(self) -> Any:
        """The session's workflow runs (`WorkflowRuns`); None before it has started or when workflows are disabled."""
        session = self.driver.session
        return session.workflows if session is not None and session.started else None

    def _workflows_off(self) -> bool:
        """The session has started without workflows (`[workflows] enabled = false`)."""
        session = self.driver.session
        return session is not None and session.started and session.workflows is None

    def scope(self) -> tuple[list[commands.Command], frozenset[str]]:
        """The session's workflow commands (as last discovered) and MCP prompt commands, and the
        built-in commands it does not have."""
        extra, hidden = self._workflow_scope()
        return extra + self.mcp_commands(), hidden

    def _workflow_scope(self) -> tuple[list[commands.Command], frozenset[str]]:
        if self._workflows_off():
            return [], commands.WORKFLOW_COMMANDS
        session = self.driver.session
        if session is None or not session.started:
            return [], frozenset()
        found = self._found
        if (found is None or found[0] is not session or time.monotonic() - found[1] > REDISCOVER_SECONDS) and not self._discovering:
            self._discovering = True
            self.app.run_worker(self._rediscover(), group="workflow-discovery")
        files = found[2] if found is not None and found[0] is session else []
        return [workflow_command(w) for w in files if w.runnable and not shadowed(w.name)], frozenset()

    async def workflow_files(self) -> list[Any]:
        """The session's discovered workflows (`WorkflowFile`s), found again when the last look is a few seconds old."""
        session, runs = self.driver.session, self._workflow_runs()
        if session is None or runs is None:
            return []
        found = self._found
        if found is not None and found[0] is session and time.monotonic() - found[1] <= REDISCOVER_SECONDS:
            return found[2]
        try:
            files = await asyncio.to_thread(runs.discover)
        except (OspreyError, OSError) as exc:
            self.note(f"warning: the workflows could not be found: {exc}", "warning")
            files = []
        self._found = (session, time.monotonic(), files)
        return files

    async def _rediscover(self) -> None:
        try:
            await self.workflow_files()
        finally:
            self._discovering = False

    async def _workflow_command(self, name: str) -> Any:
        """The runnable discovered workflow `/NAME` starts: built-in commands win, and it wins over a skill."""
        if shadowed(name) or self._workflow_runs() is None:
            return None
        return next((w for w in await self.workflow_files() if w.name == name and w.runnable), None)

    def _why_not(self, name: str) -> str | None:
        """Why the discovered workflow `name` does not run (not trusted, say), from the last discovery."""
        found = self._found
        if found is None or found[0] is not self.driver.session:
            return None
        return next((w.why_not or "it cannot run" for w in found[2] if w.name == name and not w.runnable), None)

    async def cmd_run(self, argument: str) -> None:
        """`/run PATH [ARGS]`: start the workflow in a .js file (relative to the working directory)."""
        session = self.driver.session
        if self._workflow_runs() is None or session is None:
            self.note("/run: the session has not started yet", "warning")
            return
        try:
            path_text, args = first_word(argument)
        except ValueError as exc:
            self.note(f"/run: {exc}", "error")
            return
        if not path_text:
            self.note("/run PATH [ARGS]: which workflow file? /workflows lists the running ones", "warning")
            return
        path = (session.settings.cwd / Path(path_text).expanduser()).resolve()
        if path.suffix != ".js":
            self.note(f"/run: {path} is not a workflow: give a .js file that defines `async function main(osprey)`", "error")
            return
        if not await asyncio.to_thread(path.is_file):
            self.note(f"/run: there is no file {path}", "error")
            return
        await self.start_workflow(path, args, f"/run {path_text}")

    async def cmd_workflows(self, argument: str) -> None:
        """The progress view of this session's workflow runs."""
        runs = self._workflow_runs()
        if runs is None:
            self.note("/workflows: the session has not started yet", "warning")
            return
        from .workflows_view import WorkflowsView

        await self.app.push_screen_wait(WorkflowsView(lambda: self._shown_runs(runs)))

    @staticmethod
    def _shown_runs(runs: Any) -> list[Any]:
        """The active runs, then the latest that have ended (newest first)."""
        active = list(runs.active())
        ended = [run for run in reversed(runs.runs) if not run.active]
        return active + ended[:MAX_ENDED_SHOWN]

    async def cmd_deep_research(self, argument: str) -> None:
        """`/deep-research QUESTION`: the bundled deep-research workflow; without a search service it says how to configure one."""
        session = self.driver.session
        if self._workflow_runs() is None or session is None:
            self.note("/deep-research: the session has not started yet", "warning")
            return
        question = argument.strip()
        if not question:
            self.note("/deep-research QUESTION: what should be researched?", "warning")
            return
        if session.settings.web_search is None:
            self.note(NO_SEARCH_SERVICE, "error")
            return
        from ..agents.workflows.discovery import bundled_workflow

        # A built-in command: the bundled file runs, whatever nearer workflow shares its name.
        try:
            bundled = await asyncio.to_thread(bundled_workflow, "deep-research")
        except OspreyError as exc:
            self.note(f"/deep-research: {exc}", "error")
            return
        await self.start_workflow(bundled, question, "/deep-research")

    async def start_workflow(self, target: Any, args: str, label: str) -> None:
        """Start a workflow run; when it ends, its result enters the conversation (`_deliver`)."""
        runs, session = self._workflow_runs(), self.driver.session
        if runs is None or session is None:
            self.note(f"{label}: the session has not started yet", "warning")
            return
        try:
            run = runs.start(target, args)
        except (OspreyError, ValueError, RuntimeError) as exc:
            self.note(f"{label}: {exc}", "error")
            return
        self.note(f"workflow {run.name} started ({run.id}); /workflows shows its progress")
        self.app.run_worker(self._deliver(session, run, label, args), group="workflow-results")

    async def _deliver(self, session: Any, run: Any, label: str, args: str) -> None:
        """When `run` ends, say so; a finished run's result is then sent to the model as the command's
        prompt (as a skill command's instructions are), so the transcript and the conversation hold it."""
        try:
            result = await run.result()
        except Exception as exc:  # noqa: BLE001 - the run's own failure is said, never the app's end
            self.note(f"workflow {run.name} ({run.id}) failed: {type(exc).__name__}: {exc}", "error")
            return
        if self.driver.quitting or self.driver.session is not session:
            return  # it ended with its session (interrupted, and journaled as such)
        if result.status != "done":
            self.note(f"workflow {run.name} ({run.id}) {result.status}" + (f": {result.error}" if result.error else ""),
                      "error" if result.status == "failed" else "warning")
            return
        self.note(f"workflow {run.name} ({run.id}) done; its result goes to the model")
        self.app.send(f"{label} {args}".rstrip() + f"\n\nThe workflow {run.name} I ran has finished; this is its result:\n\n"
                      f"<workflow-result name=\"{run.name}\">\n{result_text(result.value)}\n</workflow-result>\n\n"
                      "I can read it here. Take it into account from now on, and reply with a short summary of it; do not redo its work.")

    # ------------------------------------------------------------------ the persona

    async def cmd_agents(self, argument: str) -> None:
        """`/agents NAME` switches the persona from the next turn; `/agents` opens the picker."""
        session = self.driver.session
        if session is None or not session.started:
            self.note("/agents: the session has not started yet", "warning")
            return
        name = argument.strip()
        if not name:
            from ..personas import list_personas

            found = await asyncio.to_thread(list_personas, workspace_root=session.settings.workspace_root, home=session.settings.home,
                                            warn=lambda line: self.app.post_note(f"warning: {line}", "warning"))
            current = session.persona.name if session.persona is not None else None
            from .screens import PersonaPicker  # its widgets load when a command opens it
            chosen = await self.app.push_screen_wait(PersonaPicker([(p.name, p.source, p.description) for p in found], current))
            if not chosen:
                return
            name = chosen
        try:
            said = session.switch_persona(name)  # a few bounded file reads; its event is shown on this thread
        except ValueError as exc:
            self.note(f"/agents: {exc}", "error")
            return
        self.note(said)

    # ------------------------------------------------------------------ the model

    async def cmd_model(self, argument: str) -> None:
        if argument:
            await self.driver.switch(f"/model {argument}", {"model": argument})
            return
        session = self.driver.idle("/model")
        if session is None:
            return
        settings = session.settings
        from .screens import ModelPicker
        picker = ModelPicker(settings.provider, settings.model, lambda: self.catalogs(settings))
        chosen = await self.app.push_screen_wait(picker)
        if chosen:
            await self.driver.switch(f"/model {chosen}", {"model": chosen})

    async def catalogs(self, settings: Settings) -> AsyncIterator[Catalog]:
        """The model catalogs for the picker: the cached one, then the refreshed one."""
        import httpx

        from ..catalog import catalog_for_picker

        async with httpx.AsyncClient() as client:
            async for catalog in catalog_for_picker(client, settings.home, settings.provider, settings.base_url, settings.api_key,
                                                    current_model=settings.model):
                yield catalog

    async def cmd_provider(self, argument: str) -> None:
        name = argument.strip().lower()
        if name not in MODEL_PROVIDERS:
            self.note(f"/provider: give one of {', '.join(MODEL_PROVIDERS)}", "error")
            return
        # Another provider: its default model and base URL, unless configured for it.
        await self.driver.switch(f"/provider {name}", {"provider": name, "model": None, "base_url": None})

    async def cmd_effort(self, argument: str) -> None:
        level = argument.strip().lower()
        if level not in (*EFFORTS, "off"):
            self.note(f"/effort: unknown level {argument!r}; give one of {', '.join(EFFORTS)} or off", "error")
            return
        await self.driver.switch(f"/effort {level}", {"effort": level})

    # ------------------------------------------------------------------ mixture of agents

    async def cmd_moa(self, argument: str) -> None:
        """`/moa PROMPT`: several models answer, one merges (`moa_dialog.run_moa`)."""
        from .moa_dialog import run_moa

        await run_moa(self.app, argument)

    async def cmd_moa_config(self, argument: str) -> None:
        """`/moa-config`: the preset manager."""
        from .moa_dialog import manage_presets

        await manage_presets(self.app)

    # ------------------------------------------------------------------ the task and the conversation

    async def cmd_verify(self, argument: str) -> None:
        from ..session.verification import VERIFY_AUDIT_PROMPT

        session = self.driver.idle("/verify")
        if session is None:
            return
        try:
            session.arm_verification()
        except RuntimeError as exc:
            self.note(f"/verify: {exc}", "warning")
            return
        self.app.submit(VERIFY_AUDIT_PROMPT)

    async def cmd_compact(self, argument: str) -> None:
        driver = self.driver
        session = driver.idle("/compact")
        if session is None:
            return
        driver.working = True
        driver.set_state("compacting the conversation")
        try:
            await session.compact(argument)
        except (OspreyError, RuntimeError) as exc:
            self.note(f"/compact: {exc}", "error")
        finally:
            driver.working = False
            driver.set_state("ready")
            driver.send_queued()

    async def cmd_diff(self, argument: str) -> None:
        """The workspace's changes, tracked and new files (`workspace_diff`), run through the session
        as a call the person asked for: the floor and the hooks judge it, the journal records it,
        and the presenter shows its result."""
        session = self.driver.session
        if session is None or not session.started:
            self.note("/diff: the session has not started yet")
            return
        try:
            await session.run_tool("bash", {"command": DIFF_COMMAND, "timeout_ms": DIFF_TIMEOUT_MS})
        except (OspreyError, RuntimeError) as exc:
            self.note(f"/diff: {exc}", "error")

    async def cmd_sync(self, argument: str) -> None:
        """What a lane on another machine changed so far, brought back into the workspace (and your
        changes sent to it); only between turns, so that no tool call writes meanwhile."""
        session = self.driver.idle("/sync")
        if session is None:
            return
        try:
            self.note(f"/sync: {await session.sync_workspace()}")
        except (OspreyError, RuntimeError) as exc:
            self.note(f"/sync: {exc}", "error")

    # ------------------------------------------------------------------ sessions

    async def cmd_session(self, argument: str) -> None:
        """This session's id, title, journal, turns and usage, in a dialog that renames, forks or deletes it."""
        driver = self.driver
        session, journal = driver.session, driver.journal
        if session is None or self.presenter.start is None:
            self.note("the session has not started yet")
            return
        if journal is not None and session.journal is not None:
            await asyncio.to_thread(session.journal.flush, 5.0)  # the session's row and title as they stand
        title, children = "", 0
        if journal is not None:
            from ..sessions.manage import session_and_children

            try:
                title = (await asyncio.to_thread(find_session, journal, session.session_id)).title
                children = len(await asyncio.to_thread(session_and_children, journal, session.session_id)) - 1
            except OspreyError:
                pass
        usage = session.usage
        lines = [f"session: {session.session_id}", f"title: {title or '(no prompt yet)'}", f"journal: {journal or '(not journaled)'}",
                 f"turns: {self.presenter.turns}", f"usage: {usage.input_tokens:,} in, {usage.output_tokens:,} out"]
        if session.busy or driver.working:
            self.note("\n".join(lines))
            self.note("/session: a task is running; rename, fork and delete wait until it ends (Esc stops it)", "warning")
            return
        from ..sessions.manage import check_title
        from .dialogs import SessionDialog

        chosen = await self.app.push_screen_wait(SessionDialog(lines, title, session_id=session.session_id, children=children,
                                                               journaled=journal is not None and session.journal is not None,
                                                               check_title=check_title))
        if chosen is None or journal is None:
            return
        if driver.session is not session or session.busy or driver.working:
            self.note("/session: the session changed or a task started meanwhile; nothing was done", "warning")
            return
        action, value = chosen
        if action == "rename":
            await self._rename(journal, session, value)
        elif action == "fork":
            await self._fork(journal, session)
        elif action == "delete":
            await self._delete(journal, session)

    async def _rename(self, journal: Path, session: Any, title: str) -> None:
        from ..sessions.manage import rename_session

        try:
            await asyncio.to_thread(session.journal.flush, 5.0)
            row = await asyncio.to_thread(rename_session, journal, session.session_id, title)
        except OspreyError as exc:
            self.note(f"/session: {exc}", "error")
            return
        self.note(f"session {row.id} is now titled: {row.title}")

    async def _fork(self, journal: Path, session: Any) -> None:
        from ..sessions.manage import fork_session

        if not await asyncio.to_thread(session.journal.flush, 10.0):
            self.note("/session: the journal could not save this session's latest events; nothing was forked", "error")
            return
        try:
            row = await asyncio.to_thread(fork_session, journal, session.session_id)
        except OspreyError as exc:
            self.note(f"/session: {exc}", "error")
            return
        await self.driver.resume(row.id)  # the old session is closed as it was; the fork goes on

    async def _delete(self, journal: Path, session: Any) -> None:
        from ..sessions.manage import delete_session, results_root

        session_id, results = session.session_id, results_root(session.settings.home)
        await self.driver.close()  # its journal drained and closed: nothing more is written for it
        try:
            gone = await asyncio.to_thread(delete_session, journal, session_id, results=results, missing_ok=True)
        except OspreyError as exc:
            said, level = f"/session: {exc}", "error"
        else:
            said, level = (f"deleted session {session_id}" + (f" and {len(gone) - 1} child sessions" if len(gone) > 1 else "")
                           + "; this is a fresh session"), "info"
        await self.driver.renew()  # as /new does (the screen is cleared, then the note is shown)
        self.note(said, level)

    async def cmd_sessions(self, argument: str) -> None:
        driver = self.driver
        if driver.journal is None:
            self.note("/sessions: this session is not journaled", "error")
            return
        session = driver.session
        if session is not None and (session.busy or driver.working):
            self.note("/sessions: a task is running; wait for it to end (Esc stops it)", "warning")
            return
        try:
            rows = await asyncio.to_thread(list_sessions, driver.journal)
        except OspreyError as exc:
            self.note(f"/sessions: {exc}", "error")
            return
        cwd = str(session.settings.cwd) if session is not None else str(Path.cwd())
        from .screens import SessionsScreen
        chosen = await self.app.push_screen_wait(SessionsScreen(rows, cwd, session.session_id if session else None))
        if chosen is not None:
            await driver.resume(chosen.id)

    # ------------------------------------------------------------------ what the session is made of

    async def cmd_status(self, argument: str) -> None:
        session, start = self.driver.session, self.presenter.start
        if session is None or start is None:
            self.note("the session has not started yet")
            return
        usage = session.usage
        self.note("\n".join([
            f"provider: {start.provider}", f"model: {start.model}", f"approval policy: {start.approval_policy}",
            f"home: {session.tool_service_kind}", f"session: {session.session_id}", f"cwd: {session.settings.cwd}",
            f"usage: {grouped(usage.input_tokens)} in, {grouped(usage.output_tokens)} out",
            f"tools: {len(session.tool_specs()) if session.started else 0} (/help tools lists them)",
            *self.mcp_status(session),
        ]))

    @staticmethod
    def mcp_status(session: Session) -> list[str]:
        """The session's MCP servers, one a line: name, state, number of tools, and why a failed one failed."""
        mcp, declared = session.mcp, session.settings.mcp
        servers = list(mcp.servers.values()) if mcp is not None else []
        if not servers and not declared.skipped:
            return []
        lines = ["MCP servers:" if servers else "MCP servers: none runs"]
        for server in servers:
            state = f"{server.state}, {counted(len(server.tools), 'tool')}" if server.state == "ready" else server.state
            error = f": {' '.join(str(server.error).split())[:300]}" if server.error and server.state != "ready" else ""
            lines.append(f"  {server.spec.name}: {state}{error}")
        if declared.skipped:
            lines.append(f"  {counted(len(declared.skipped), 'declared server')} not started (/extensions says why)")
        return lines

    async def cmd_tools(self, argument: str) -> None:
        """Hide or show the finished tool rows; running ones and those waiting for an approval stay."""
        if self.app.conversation.toggle_finished_tools():
            self.note("finished tool rows are hidden; running ones stay (/tools shows them again)")
        else:
            self.note("finished tool rows are shown (/tools hides them)")

    async def cmd_extensions(self, argument: str) -> None:
        session = self.driver.session
        if session is None or not session.started:
            self.note("the session has not started yet")
            return
        found = session.extensions.found if session.extensions is not None else None
        if found is None:
            self.note("\n".join([*self.mcp_extensions(session), "this session does not load extensions"]))
            return
        lines = [f"{item.manifest.name}: {item.path} ({item.layer.kind})" for item in found.tools] or ["no custom tools are loaded"]
        for artifact in (a for a in found.artifacts if a.kind == "tool" and a.status != "active"):
            lines.append(f"not loaded: {artifact.name} ({artifact.status}): {artifact.reason or ''}")
            if (command := found.trust_hint(artifact)) is not None:
                lines.append(f"  to trust it once reviewed: {command}")
        lines += [f"hooks: {path}" for path in found.hooks_paths]
        for artifact in (a for a in found.artifacts if a.kind == "hooks" and a.status != "active"):
            lines.append(f"hooks not running: {artifact.path} ({artifact.status}, {artifact.trust}): {artifact.reason or ''}")
            if (command := found.trust_hint(artifact)) is not None:
                lines.append(f"  to trust it once reviewed: {command}")
        if session.extensions is not None and session.extensions.reload_pending:
            lines.append("a reload is pending: it happens at the next turn boundary")
        if (runs := getattr(session, "workflows", None)) is not None:
            for workflow in await asyncio.to_thread(runs.discover):
                state = "runs" if workflow.runnable else f"does not run ({workflow.status}, {workflow.trust}): {workflow.why_not or ''}"
                lines.append(f"workflow {workflow.name}: {workflow.path} ({workflow.scope}) {state}")
        lines += self.mcp_extensions(session)
        lines.append("`osprey extensions` shows every artifact and why it is or is not used")
        self.note("\n".join(lines))

    @staticmethod
    def mcp_extensions(session: Session) -> list[str]:
        """The session's MCP servers (origin, trusted or not, state, tools) and the declared ones that do not run, with why."""
        mcp, declared = session.mcp, session.settings.mcp
        lines: list[str] = []
        for server in mcp.servers.values() if mcp is not None else ():
            spec = server.spec
            trust = "trusted" if spec.trusted else "not trusted: its readOnlyHint is ignored"
            state: str = server.state
            if server.error and state != "ready":
                state += f": {' '.join(str(server.error).split())[:300]}"
            lines.append(f"MCP server {spec.name} ({spec.origin}, {spec.transport}, {trust}): {state}")
            if server.tools:
                names = [tool.name[:64] for tool in server.tools]
                shown = ", ".join(names[:MAX_MCP_TOOLS_SHOWN]) + (f" and {len(names) - MAX_MCP_TOOLS_SHOWN} more" if len(names) > MAX_MCP_TOOLS_SHOWN else "")
                lines.append(f"  {counted(len(names), 'tool')}: {shown}")
        for skipped in declared.skipped:
            lines.append(f"MCP server {skipped.name} ({skipped.origin}) does not run: {skipped.reason}")
        return lines

    async def cmd_reload(self, argument: str) -> None:
        session = self.driver.session
        if session is None or not session.started:
            self.note("the session has not started yet")
            return
        try:
            session.request_reload()
        except RuntimeError as exc:
            self.note(f"error: {exc}", "error")
            return
        self.note("the extensions will be found again at the next turn boundary")

    async def cmd_approvals(self, argument: str) -> None:
        from ..policy.store import ApprovalStore
        from .dialogs import ApprovalsDialog

        session = self.driver.session
        if session is None:
            self.note("the session has not started yet")
            return
        store = ApprovalStore.for_home(session.settings.home, warn=lambda m: self.app.post_note(f"warning: {m}", "warning"))
        await self.app.push_screen_wait(ApprovalsDialog(store, str(session.settings.workspace_root)))

    def debug_text(self) -> str:
        """Version, date, system, terminal, session and model, one a line (the /debug dialog's text)."""
        import os
        import platform

        from .. import __version__

        app, session, start = self.app, self.driver.session, self.presenter.start
        lines = [
            f"osprey {__version__}",
            f"date: {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC",
            f"system: {platform.system()} {platform.release()} ({platform.machine()}), Python {platform.python_version()}",
            f"terminal: TERM={os.environ.get('TERM', '?')}, TERM_PROGRAM={os.environ.get('TERM_PROGRAM', '?')}, "
            f"size {app.size.width}x{app.size.height}",
            f"session: {session.session_id if session else '(none)'}",
            f"model: {start.provider} · {start.model}" if start else "model: (the session has not started)",
        ]
        summary = getattr(app.trace, "summary", None)
        if callable(summary):
            lines.append(f"launch: {summary()}")
        return "\n".join(lines)

    async def cmd_debug(self, argument: str) -> None:
        from .dialogs import DebugDialog

        def raw_events(shown: bool) -> None:
            self.presenter.debug = shown

        await self.app.push_screen_wait(DebugDialog(self.debug_text(), raw_events=self.presenter.debug, on_raw_events=raw_events))
        self.note("raw events are shown (/debug hides them)" if self.presenter.debug else "raw events are hidden")

    # ------------------------------------------------------------------ the screen and the transcript

    async def cmd_timestamps(self, argument: str) -> None:
        self.app.screen.toggle_class("-timestamps")

    async def cmd_export(self, argument: str) -> None:
        """`/export PATH` writes the transcript (with tool output) at once; `/export` opens the dialog."""
        session = self.driver.session
        base = session.settings.cwd if session is not None else Path.cwd()
        if argument:
            path = (base / Path(argument).expanduser()).resolve()
            try:
                await self.write_transcript(path, True)
            except OSError as exc:
                self.note(f"could not write {path}: {exc.strerror or exc}", "error")
                return
            self.note(f"transcript written to {path}")
            return
        from .dialogs import ExportDialog

        name = f"osprey-{session.session_id if session else datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}.md"
        written = await self.app.push_screen_wait(ExportDialog(name, base, self.write_transcript))
        if written is not None:
            self.note(f"transcript written to {written}")

    async def write_transcript(self, path: Path, tool_output: bool) -> None:
        """Write the transcript as Markdown to `path` (raises OSError)."""
        text = self.presenter.transcript.to_markdown(tool_output=tool_output)
        await asyncio.to_thread(path.write_text, text, "utf-8")

    async def cmd_copy(self, argument: str) -> None:
        transcript = self.presenter.transcript
        if argument == "all":
            self.app.copy_to_clipboard(transcript.to_markdown())
            self.note("transcript copied to the clipboard")
            return
        answer = transcript.last_answer()
        if answer is None:
            self.note("no answer to copy yet")
            return
        self.app.copy_to_clipboard(answer)
        self.note("last answer copied to the clipboard")
