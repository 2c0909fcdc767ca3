"""Workflows: JavaScript files whose `main(osprey)` starts agents (child sessions of the session)
and returns a result; run in V8 in a process of their own, within their limits (concurrent and
total agents, wall clock, heap), against the scripted model server on loopback."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from session_harness import FAST_RETRY, Harness

from osprey.agents.workflows.discovery import WorkflowError, discover_workflows
from osprey.agents.workflows.runs import WorkflowRuns
from osprey.config import load_settings
from osprey.config.schema import WorkflowsSettings
from osprey.events import Event, SessionStart, ToolResultEvent, WorkflowEnd, WorkflowProgress, WorkflowStart
from osprey.session.core import Session, SessionOptions
from osprey.sessions.journal import journal_path, read_events
from osprey.testing.model_server import ModelServer, Reply


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path, {"notes.txt": "alpha\n"}, git=True)


def options(harness: Harness, server: ModelServer, **workflows: Any) -> SessionOptions:
    settings = load_settings(harness.workspace, {"provider": "openai", "model": "m", "base_url": server.base_url, "approval_policy": "never"},
                             {"OSPREY_HOME": str(harness.home), "OPENAI_API_KEY": "unused"})
    limits = WorkflowsSettings(**workflows)
    return SessionOptions(settings=settings.model_copy(update={"retry": FAST_RETRY, "workflows": limits}))


def user_workflow(harness: Harness, name: str, source: str) -> Path:
    """A workflow of the person's own ($OSPREY_HOME/workflows): it runs without a pin."""
    directory = harness.home / "workflows"
    directory.mkdir(exist_ok=True)
    path = directory / f"{name}.js"
    path.write_text(source)
    return path


FAN_OUT = """// Ask every agent for a word and join the answers.
async function main(osprey) {
  const n = Number(osprey.argv[0] || "3");
  osprey.log("starting " + n + " agents");
  const answers = await Promise.all(Array.from({length: n}, (_, i) => osprey.agent({prompt: "word " + i, tools: []})));
  return {count: answers.length, outcomes: [...new Set(answers.map((a) => a.outcome))], texts: answers.map((a) => a.text).sort(),
          sessions: answers.map((a) => a.session_id), tokens: answers.reduce((t, a) => t + a.usage.output_tokens, 0)};
}
"""


async def test_a_workflow_fans_out_agents_and_returns_main_s_result(harness: Harness) -> None:
    user_workflow(harness, "fan", FAN_OUT)
    events: list[Event] = []
    with ModelServer([Reply.text(f"w{i}", usage=(10, 2)) for i in range(3)]) as server:
        session = Session(options(harness, server), emit=events.append)
        async with session:
            assert session.workflows is not None
            run = session.workflows.start("fan", "3")
            result = await run.result()
        server.assert_clean()
    assert result.status == "done", result.error
    assert result.value["count"] == 3 and result.value["outcomes"] == ["Completed"] and result.value["texts"] == ["w0", "w1", "w2"]
    assert result.value["tokens"] == 6
    assert len(set(result.value["sessions"])) == 3
    assert list(run.log) == ["starting 3 agents"]
    assert [a.status for a in run.agents] == ["done"] * 3 and all(a.usage.output_tokens == 2 for a in run.agents)
    [start] = [e for e in events if isinstance(e, WorkflowStart)]
    [end] = [e for e in events if isinstance(e, WorkflowEnd)]
    assert start.name == "fan" and end.status == "done" and end.agents == 3 and json.loads(end.result)["count"] == 3
    # Each agent is a child session of the lead.
    child_starts = [e for e in events if isinstance(e, SessionStart) and e.parent_id == session.session_id]
    assert len(child_starts) == 3


# ------------------------------------------------------------------ limits


class Ticker:
    """Measures the event loop's longest stall while it runs."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.worst = max(self.worst, now - last - 0.01)
            last = now

    def __enter__(self) -> Ticker:
        self._task = asyncio.ensure_future(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def test_forty_agents_never_run_more_than_sixteen_at_once(harness: Harness) -> None:
    user_workflow(harness, "fan", FAN_OUT)
    with ModelServer([Reply.hold(1, Reply.text(f"w{i}")) for i in range(40)]) as server:
        session = Session(options(harness, server), emit=lambda e: None)
        async with session:
            assert session.workflows is not None
            most = 0

            async def watch() -> None:
                nonlocal most
                while True:
                    most = max(most, server.held)
                    await asyncio.sleep(0.005)

            watcher = asyncio.ensure_future(watch())
            run = session.workflows.start("fan", "40")
            total = 0
            for batch in (16, 16, 8):
                total += batch
                deadline = time.monotonic() + 30
                while not (server.held == batch and server.request_count == total):
                    assert time.monotonic() < deadline, f"{server.held} held of {server.request_count}, waiting for {batch} of {total}"
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.3)  # time for a 17th to arrive, were it let through
                assert server.held == batch and server.request_count == total
                assert sum(a.status == "running" for a in run.agents) == batch
                server.release()
            result = await run.result()
            watcher.cancel()
        server.assert_clean()
    assert result.status == "done", result.error
    assert result.value["count"] == 40 and server.request_count == 40
    assert most == 16


def workflows_of(harness: Harness, **limits: Any) -> tuple[Any, WorkflowsSettings]:
    settings = load_settings(harness.workspace, {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1"},
                             {"OSPREY_HOME": str(harness.home), "OPENAI_API_KEY": "unused"})
    workflows = WorkflowsSettings(**limits)
    return settings.model_copy(update={"workflows": workflows}), workflows


class Ended:
    """A child agent that has already ended Completed (for limits that need many agents cheaply)."""

    def __init__(self, number: int) -> None:
        self.agent_id = f"a{number}"
        self.parent_id = "lead"
        self.name = "agent"
        self.running = False

    async def wait(self) -> Any:
        from osprey.events import TaskEnd
        from osprey.messages import Usage

        return TaskEnd(session_id=self.agent_id, outcome="Completed", exit_status=0, turns=1, usage=Usage(output_tokens=1), final_text="ok")

    async def send(self, prompt: str) -> None:
        raise RuntimeError("ended")

    def cancel(self) -> bool:
        return False

    async def close(self) -> None:
        return None


MANY = """// Start agents one after another, then one more than the run may start.
async function main(osprey) {
  const n = Number(osprey.args);
  const done = [];
  for (let i = 0; i < n; i++) {
    done.push((await osprey.agent({prompt: "go " + i})).outcome);
  }
  try {
    await osprey.agent({prompt: "one too many"});
    return {started: done.length, refused: null};
  } catch (error) {
    return {started: done.length, refused: error.message};
  }
}
"""


async def test_the_agent_past_the_default_thousand_is_refused_with_a_clear_error(harness: Harness) -> None:
    user_workflow(harness, "many", MANY)
    settings, _ = workflows_of(harness)
    assert settings.workflows.max_agents == 1000  # the default
    spawned: list[Any] = []

    async def spawn(request: Any) -> Any:
        spawned.append(request)
        return Ended(len(spawned))

    events: list[Event] = []
    runs = WorkflowRuns(spawn, settings, events.append)
    result = await runs.start("many", "1000").result()
    assert result.status == "done", result.error
    assert result.value["started"] == 1000 and len(spawned) == 1000
    refused = result.value["refused"]
    assert "already started 1000 agents" in refused and "[workflows] max_agents" in refused


async def test_a_lower_max_agents_refuses_the_next_agent_of_real_sessions(harness: Harness) -> None:
    user_workflow(harness, "many", MANY)
    with ModelServer([Reply.text(f"w{i}") for i in range(3)]) as server:
        session = Session(options(harness, server, max_agents=3), emit=lambda e: None)
        async with session:
            assert session.workflows is not None
            result = await session.workflows.start("many", "3").result()
        assert server.request_count == 3  # the fourth agent never reached the model
    assert result.status == "done", result.error
    assert result.value["started"] == 3 and "already started 3 agents" in result.value["refused"]


async def test_a_javascript_exception_names_the_file_and_line(harness: Harness) -> None:
    user_workflow(harness, "broken", "// Fails.\nasync function main(osprey) {\n  const x = null;\n  return x.field;\n}\n")
    user_workflow(harness, "unparsable", "// Does not parse.\nasync function main(osprey) {\n  return 1 +;\n}\n")
    user_workflow(harness, "thrower", "// Throws.\n\nasync function main(osprey) {\n  throw new Error('no ' + osprey.args);\n}\n")
    user_workflow(harness, "mainless", "// Has no main.\nconst x = 1;\n")
    user_workflow(harness, "toplevel", "// Fails as it loads.\nconst y = null;\ny.z;\nasync function main(osprey) {}\n")
    user_workflow(harness, "nested", "function helper() {\n  return undefined.q;\n}\nasync function main(osprey) {\n  await null;\n  return helper();\n}\n")
    user_workflow(harness, "plain", "async function main(osprey) {\n  throw 'a plain string';\n}\n")
    settings, _ = workflows_of(harness)
    runs = WorkflowRuns(_no_spawn, settings, lambda e: None)
    broken = await runs.start("broken").result()
    assert broken.status == "failed" and broken.error is not None
    assert broken.error.startswith("broken.js:4: TypeError: Cannot read properties of null"), broken.error
    unparsable = await runs.start("unparsable").result()
    assert unparsable.error is not None and unparsable.error.startswith("unparsable.js:3: SyntaxError"), unparsable.error
    thrower = await runs.start("thrower", "luck").result()
    assert thrower.error == "thrower.js:4: Error: no luck"
    mainless = await runs.start("mainless").result()
    assert mainless.error is not None and "defines no `async function main(osprey)`" in mainless.error
    assert (await runs.start("toplevel").result()).error == "toplevel.js:3: TypeError: Cannot read properties of null (reading 'z')"
    assert (await runs.start("nested").result()).error == "nested.js:2: TypeError: Cannot read properties of undefined (reading 'q')"
    assert (await runs.start("plain").result()).error == "plain.js: a plain string"  # no stack to name a line


async def _no_spawn(request: Any) -> Any:
    raise AssertionError("no agent should start")


LOOPS = """// Starts an agent, then never yields again.
async function main(osprey) {
  osprey.agent({prompt: "wait for me"});
  await new Promise((resolve) => setTimeout(resolve, 100));
  while (true) {}
}
"""

ALLOCATES = """// Starts an agent, then allocates without end.
async function main(osprey) {
  osprey.agent({prompt: "wait for me"});
  await new Promise((resolve) => setTimeout(resolve, 100));
  const kept = [];
  while (true) { kept.push("x".repeat(1024) + kept.length); }
}
"""


@pytest.mark.parametrize(("name", "source", "limits", "said"), [
    ("loops", LOOPS, {"timeout_s": 2.0}, "wall-clock limit of 2 s ([workflows] timeout_s)"),
    ("allocates", ALLOCATES, {"heap_mb": 32}, "heap limit of 32 MB"),
], ids=["endless-loop", "runaway-allocation"])
async def test_an_endless_loop_and_a_runaway_allocation_are_stopped_by_their_limits(
        harness: Harness, name: str, source: str, limits: dict[str, Any], said: str) -> None:
    user_workflow(harness, name, source)
    with ModelServer([Reply.hold(1, Reply.text("late"))]) as server:
        session = Session(options(harness, server, **limits), emit=lambda e: None)
        async with session:
            assert session.workflows is not None
            with Ticker() as ticker:
                started = time.monotonic()
                run = session.workflows.start(name)
                assert await asyncio.to_thread(server.wait_held, 1, 30)
                result = await run.result()
                took = time.monotonic() - started
            assert result.status == "failed" and result.error is not None and said in result.error, result.error
            assert took < 30
            assert ticker.worst < 1.0, f"the event loop stalled for {ticker.worst:.2f} s"
            # Its agent was cancelled and closed, and its script's process is gone.
            assert [a.status for a in run.agents] == ["cancelled"] and not session.children
            process = run._process
            assert process is not None and process.returncode is not None
            # The session goes on: another workflow runs.
            user_workflow(harness, "fan", FAN_OUT)
            server.add(Reply.text("again"))
            again = await session.workflows.start("fan", "1").result()
            assert again.status == "done", again.error
        server.release()


# ------------------------------------------------------------------ trust


def project_workflow(harness: Harness, name: str, source: str) -> Path:
    directory = harness.workspace / ".osprey" / "workflows"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.js"
    path.write_text(source)
    return path


def trust(harness: Harness, name: str) -> None:
    """What `osprey extensions trust NAME` records for a workflow."""
    from osprey.trust import pin_artifact

    [item] = [w for w in discover_workflows(harness.workspace, harness.home) if w.name == name and w.scope == "project"]
    assert item.digest is not None
    pin_artifact(harness.home, item.pin_scope, item.key, item.digest)


async def test_a_project_workflow_runs_only_once_trusted_and_a_change_withdraws_it(harness: Harness) -> None:
    path = project_workflow(harness, "fan", FAN_OUT)
    [found] = [w for w in discover_workflows(harness.workspace, harness.home) if w.name == "fan"]
    assert found.scope == "project" and not found.runnable and found.trust == "untrusted"
    assert found.description == "Ask every agent for a word and join the answers."
    assert found.why_not is not None and "osprey extensions trust fan" in found.why_not
    with ModelServer([Reply.text("w0"), Reply.text("w1")]) as server:
        session = Session(options(harness, server), emit=lambda e: None)
        async with session:
            runs = session.workflows
            assert runs is not None
            with pytest.raises(WorkflowError, match="not trusted"):
                runs.start("fan", "1")
            (harness.workspace / "elsewhere.js").write_text(FAN_OUT)
            with pytest.raises(WorkflowError, match="in the workspace, where workflows run from .osprey/workflows/ once trusted"):
                runs.start("elsewhere.js")  # a file elsewhere in the workspace follows the same rule
            assert server.request_count == 0 and not runs.runs  # nothing ran
            trust(harness, "fan")
            assert (await runs.start("fan", "1").result()).status == "done"
            path.write_text(FAN_OUT.replace("word", "name"))
            with pytest.raises(WorkflowError, match="changed since it was trusted"):
                runs.start("fan", "1")
            [changed] = [w for w in discover_workflows(harness.workspace, harness.home) if w.name == "fan"]
            assert changed.trust == "modified" and not changed.runnable
            trust(harness, "fan")
            assert (await runs.start(path, "1").result()).status == "done"  # by its path, once trusted again
        assert server.request_count == 2


async def test_a_nearer_workflow_shadows_a_farther_one_and_bundled_ones_run(harness: Harness) -> None:
    project_workflow(harness, "fan", FAN_OUT)
    trust(harness, "fan")
    user_workflow(harness, "fan", FAN_OUT)
    found = discover_workflows(harness.workspace, harness.home)
    fans = [w for w in found if w.name == "fan"]
    assert [(w.scope, w.status) for w in fans] == [("project", "active"), ("user", "shadowed")]
    bundled = [w for w in found if w.scope == "bundled"]
    assert bundled and all(w.runnable for w in bundled)


# ------------------------------------------------------------------ tools, config


async def test_enabled_false_removes_the_tools_and_the_runs(harness: Harness) -> None:
    with ModelServer([]) as server:
        on = Session(options(harness, server), emit=lambda e: None)
        async with on:
            assert {"run_workflow", "propose_workflow"} <= set(on.tool_names()) and on.workflows is not None
        off = Session(options(harness, server, enabled=False), emit=lambda e: None)
        async with off:
            assert not {"run_workflow", "propose_workflow"} & set(off.tool_names())
            assert off.workflows is None


async def test_enabled_false_in_config_toml_removes_the_tools(harness: Harness) -> None:
    (harness.home / "config.toml").write_text("[workflows]\nenabled = false\nmax_agents = 7\n")
    with ModelServer([]) as server:
        settings = load_settings(harness.workspace, {"provider": "openai", "model": "m", "base_url": server.base_url},
                                 {"OSPREY_HOME": str(harness.home), "OPENAI_API_KEY": "unused"})
        assert settings.workflows.enabled is False and settings.workflows.max_agents == 7
        session = Session(SessionOptions(settings=settings), emit=lambda e: None)
        async with session:
            assert not {"run_workflow", "propose_workflow"} & set(session.tool_names())


async def test_the_model_runs_a_workflow_and_gets_its_result(harness: Harness) -> None:
    user_workflow(harness, "fan", FAN_OUT)
    user_workflow(harness, "broken", "// Fails.\nasync function main(osprey) {\n  throw new Error('nope');\n}\n")
    events: list[Event] = []
    script = [Reply.tool_call("run_workflow", {"name": "fan", "args": "2"}), Reply.text("a"), Reply.text("b"),
              Reply.tool_call("run_workflow", {"name": "broken"}), Reply.tool_call("run_workflow", {"name": "/tmp/anything.js"}), Reply.text("done")]
    with ModelServer(script) as server:
        session = Session(options(harness, server), emit=events.append)
        async with session:
            end = await session.submit("Run the fan workflow.")
        server.assert_clean()
    assert end.outcome == "Completed"
    results = [e for e in events if isinstance(e, ToolResultEvent) and e.name == "run_workflow"]
    assert results[0].ok and "The workflow fan is done (2 agents)" in results[0].output and '"count": 2' in results[0].output
    assert not results[1].ok and "broken.js:3: Error: nope" in results[1].output
    assert not results[2].ok and "not a discovered workflow" in results[2].output


async def test_propose_workflow_writes_the_file_for_review_and_never_runs_it(harness: Harness) -> None:
    events: list[Event] = []
    source = "async function main(osprey) {\n  return (await osprey.agent({prompt: osprey.args})).text;\n}\n"
    proposal = {"name": "ask", "description": "Ask one agent.", "source": source}
    script = [Reply.tool_call("propose_workflow", proposal), Reply.tool_call("propose_workflow", {**proposal, "source": "// other\n" + source}),
              Reply.tool_call("run_workflow", {"name": "ask", "args": "hi"}), Reply.text("proposed")]
    with ModelServer(script) as server:
        session = Session(options(harness, server), emit=events.append)
        async with session:
            end = await session.submit("Write a workflow.")
        assert server.request_count == 4  # the lead's turns only: no agent ran
    assert end.outcome == "Completed"
    path = harness.workspace / ".osprey" / "workflows" / "ask.js"
    assert path.read_text() == "// Ask one agent.\n" + source
    first, second, ran = [e for e in events if isinstance(e, ToolResultEvent)]
    assert first.ok and "osprey extensions trust ask" in first.output and str(path) in first.output
    assert not second.ok and "already exists" in second.output
    assert not ran.ok and "not trusted" in ran.output
    assert not [e for e in events if isinstance(e, WorkflowStart)]
    [found] = [w for w in discover_workflows(harness.workspace, harness.home) if w.name == "ask"]
    assert found.scope == "project" and not found.runnable


# ------------------------------------------------------------------ interrupt


async def test_closing_the_session_interrupts_active_runs_and_the_journal_says_so(harness: Harness) -> None:
    from osprey.sessions.journal import Journal

    user_workflow(harness, "fan", FAN_OUT)
    journal = Journal(journal_path(harness.home))
    with ModelServer([Reply.hold(1, Reply.text("late")), Reply.hold(1, Reply.text("late"))]) as server:
        session = Session(options(harness, server), emit=lambda e: None, journal=journal)
        await session.start()
        assert session.workflows is not None
        run = session.workflows.start("fan", "2")
        assert await asyncio.to_thread(server.wait_held, 2, 30)
        assert [r.id for r in session.workflows.active()] == [run.id]
        await session.close()
        server.release()
    result = await run.result()
    assert result.status == "interrupted" and run.status == "interrupted"
    assert not session.children and [a.status for a in run.agents] == ["cancelled", "cancelled"]
    recorded = read_events(journal_path(harness.home), session.session_id)
    [end] = [e for e in recorded if isinstance(e, WorkflowEnd)]
    assert end.status == "interrupted" and end.run_id == run.id and end.agents == 2
    types = [e.type for e in recorded]
    assert types.index("workflow_end") < types.index("session_end")
    assert any(isinstance(e, WorkflowProgress) and e.status == "cancelled" for e in recorded)
    assert session.workflows.active() == []


def test_workflow_events_round_trip_through_the_journal(tmp_path: Path) -> None:
    from osprey.events import parse_event
    from osprey.messages import Usage
    from osprey.sessions.journal import Journal

    events: list[Event] = [
        WorkflowStart(run_id="r1", name="fan", path="/h/workflows/fan.js", scope="user", args="3"),
        WorkflowProgress(run_id="r1", message="starting"),
        WorkflowProgress(run_id="r1", label="agent #1", status="running", agent_session_id="c1"),
        WorkflowEnd(run_id="r1", name="fan", status="failed", error="fan.js:3: Error: x", agents=1, usage=Usage(output_tokens=2)),
    ]
    journal = Journal(tmp_path / "sessions.db")
    for event in events:
        journal.record(event, "s1", "/w")
    journal.close()
    assert read_events(tmp_path / "sessions.db", "s1") == events
    for event in events:
        assert parse_event(event.model_dump_json()) == event


def test_osprey_extensions_lists_workflows_and_trusts_one(harness: Harness) -> None:
    import os
    import subprocess
    import sys

    path = project_workflow(harness, "fan", FAN_OUT)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OSPREY_")}, "OSPREY_HOME": str(harness.home)}

    def osprey(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "osprey", "extensions", "-C", str(harness.workspace), *args], env=env,
                              capture_output=True, text=True, timeout=60)

    def listed() -> dict[tuple[str, str], Any]:
        report = json.loads(osprey("--json").stdout)
        return {(a["name"], a["layer"]): a for a in report["artifacts"] if a["kind"] == "workflow"}

    before = listed()
    assert before[("fan", "project")]["status"] == "inactive" and before[("fan", "project")]["trust"] == "untrusted"
    assert before[("deep-research", "bundled")]["status"] == "active"
    assert "to trust it once reviewed: osprey extensions trust fan" in osprey().stdout
    trusted = osprey("trust", "fan", "--yes")
    assert trusted.returncode == 0, trusted.stderr
    assert listed()[("fan", "project")]["trust"] == "trusted"
    [found] = [w for w in discover_workflows(harness.workspace, harness.home) if w.name == "fan"]
    assert found.runnable
    path.write_text(FAN_OUT + "\n// changed\n")
    after = listed()[("fan", "project")]
    assert after["trust"] == "modified" and after["status"] == "inactive"


# ------------------------------------------------------------------ the documented examples


def documented_examples() -> list[str]:
    text = (Path(__file__).resolve().parent.parent / "docs" / "workflows.md").read_text()
    return [block.split("\n", 1)[1] for block in text.split("```js")[1:] for block in [block.split("```")[0]]]


async def test_the_documented_examples_run_as_documented(harness: Harness) -> None:
    review, tests = documented_examples()
    personas = harness.workspace / ".osprey" / "personas"
    personas.mkdir(parents=True)
    (personas / "tester.md").write_text("---\nname: tester\nspawnable: true\ntools: [read_file, write_file]\n---\n\nWrite tests.\n")
    user_workflow(harness, "review", review)
    user_workflow(harness, "tests", tests)
    script = [Reply.text("- a bug", usage=(5, 3)), Reply.text("none", usage=(5, 4)), Reply.text("summary: one bug"), Reply.text("tests written")]
    with ModelServer(script) as server:
        session = Session(options(harness, server), emit=lambda e: None)
        async with session:
            assert session.workflows is not None
            [found] = [w for w in session.workflows.discover() if w.name == "review"]
            assert found.description == "Review each file named in the arguments in parallel, then summarise the reviews."
            reviewed = await session.workflows.start("review", "notes.txt 'other notes.txt'").result()
            usage = await session.workflows.start("review", "").result()
            tested = await session.workflows.start("tests", "osprey.config 2").result()
        server.assert_clean()
    assert reviewed.status == "done", reviewed.error
    assert reviewed.value["summary"] == "summary: one bug" and reviewed.value["tokens"] == 7
    assert reviewed.value["reviews"] == [{"file": "notes.txt", "outcome": "Completed"}, {"file": "other notes.txt", "outcome": "Completed"}]
    assert usage.status == "failed" and usage.error == "review.js:5: Error: name the files to review: /review FILE..."
    assert tested.status == "done", tested.error
    assert tested.value["written"] is True and tested.value["answer"] == "tests written"
    prompts = [str(r.body["messages"]) for r in server.requests]
    assert "Write tests." in prompts[3]  # the tester persona's prompt


async def test_a_file_outside_the_workspace_runs_when_the_person_names_it_never_for_the_model(harness: Harness, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "hello.js").write_text("// Says hello.\nasync function main(osprey) {\n  return 'hello ' + osprey.argv.join('+');\n}\n")
    settings, _ = workflows_of(harness)
    runs = WorkflowRuns(_no_spawn, settings, lambda e: None)
    result = await runs.start(elsewhere / "hello.js", "a 'b c'").result()
    assert result.status == "done" and result.value == "hello a+b c"
    with pytest.raises(WorkflowError, match="not a discovered workflow"):
        runs.start(str(elsewhere / "hello.js"), by_model=True)
    with pytest.raises(WorkflowError, match="not a discovered workflow"):
        runs.start(runs.resolve(elsewhere / "hello.js"), by_model=True)


async def test_an_untrusted_project_workflow_leaves_the_name_to_a_trusted_farther_one(harness: Harness) -> None:
    project_workflow(harness, "hello", "async function main(osprey) {\n  return 'project';\n}\n")
    user_workflow(harness, "hello", "async function main(osprey) {\n  return 'mine';\n}\n")
    settings, _ = workflows_of(harness)
    runs = WorkflowRuns(_no_spawn, settings, lambda e: None)
    assert (await runs.start("hello").result()).value == "mine"
    trust(harness, "hello")
    assert (await runs.start("hello").result()).value == "project"


async def test_an_agent_spec_that_cannot_run_is_a_clear_error_in_the_script(harness: Harness) -> None:
    user_workflow(harness, "specs", """// Asks for agents that cannot run.
async function main(osprey) {
  const said = [];
  for (const spec of [{prompt: "x", tools: ["teleport"]}, {tools: []}, {prompt: "x", colour: "red"}, {prompt: "x", persona: "architect"}]) {
    try {
      await osprey.agent(spec);
      said.push("ran");
    } catch (error) {
      said.push(error.message);
    }
  }
  return said;
}
""")
    with ModelServer([]) as server:
        session = Session(options(harness, server), emit=lambda e: None)
        async with session:
            assert session.workflows is not None
            result = await session.workflows.start("specs").result()
        assert server.request_count == 0
    assert result.status == "done", result.error
    teleport, no_prompt, colour, architect = result.value
    assert teleport == "osprey.agent: tools this session does not have: teleport"
    assert no_prompt.startswith("osprey.agent: prompt: Field required")
    assert "colour: Extra inputs are not permitted" in colour
    assert "osprey.agent:" in architect and "not spawnable" in architect


async def test_cancelling_the_session_interrupts_a_background_run_and_its_agents(harness: Harness) -> None:
    user_workflow(harness, "fan", FAN_OUT)
    with ModelServer([Reply.hold(1, Reply.text("late")), Reply.hold(1, Reply.text("late"))]) as server:
        async with Session(options(harness, server), emit=lambda e: None) as session:
            assert session.workflows is not None
            run = session.workflows.start("fan", "2")
            assert await asyncio.to_thread(server.wait_held, 2, 30)
            session.cancel()  # Esc with no task of the lead's own running: the run is stopped too
            result = await asyncio.wait_for(run.result(), 30)
            server.release()
            assert result.status == "interrupted" and session.workflows.active() == []
            assert [a.status for a in run.agents] == ["cancelled", "cancelled"]


# ------------------------------------------------------------------ memory, queues and the session's bounds


BUFFERS = """// Holds typed arrays, whose memory lies outside V8's heap.
async function main(osprey) {
  const kept = [];
  for (let i = 0; i < 12; i++) { const a = new Uint8Array(50 << 20); a.fill(1); kept.push(a); }
  return "ok";
}
"""


async def test_typed_arrays_are_held_to_the_memory_limit_too(harness: Harness) -> None:
    user_workflow(harness, "buffers", BUFFERS)
    settings, _ = workflows_of(harness, heap_mb=32)
    runs = WorkflowRuns(_no_spawn, settings, lambda e: None)
    with Ticker() as ticker:
        started = time.monotonic()
        result = await runs.start("buffers").result()
        took = time.monotonic() - started
    assert result.status == "failed" and result.error is not None and "heap limit of 32 MB" in result.error, result.error
    assert "[workflows] heap_mb" in result.error
    assert took < 20 and ticker.worst < 1.0
    # The broker goes on: another run works.
    user_workflow(harness, "small", "// Small.\nasync function main(osprey) { return new Uint8Array(1 << 20).length; }\n")
    small = await runs.start("small").result()
    assert small.status == "done" and small.value == 1 << 20, small.error


FLOOD = """// One prompt far too long, then many agents at once that wait for slots.
async function main(osprey) {
  let long = null;
  try { await osprey.agent({prompt: "x".repeat(999000)}); } catch (error) { long = error.message; }
  const refused = [];
  for (let i = 0; i < 200; i++) {
    osprey.agent({prompt: String(i) + "y".repeat(90000)}).catch((error) => refused.push(error.message));
  }
  await new Promise((resolve) => setTimeout(resolve, 1500));
  return {long, refused: refused.length, first: refused[0] || null};
}
"""


async def test_a_long_prompt_and_a_flood_of_waiting_agents_are_refused_with_clear_errors(harness: Harness) -> None:
    from osprey.agents.workflows.runs import MAX_WAITING_BYTES

    user_workflow(harness, "flood", FLOOD)
    settings, _ = workflows_of(harness)
    spawned: list[Any] = []

    async def spawn(request: Any) -> Any:
        spawned.append(request)
        await asyncio.Event().wait()  # the agents never end: the rest wait for slots

    runs = WorkflowRuns(spawn, settings, lambda e: None)
    run = runs.start("flood")
    result = await asyncio.wait_for(run.result(), 60)
    assert result.status == "done", result.error
    long = result.value["long"]
    assert long is not None and "999000 characters" in long and "100000" in long, long
    # 16 hold slots; specs up to MAX_WAITING_BYTES wait for one; the rest are refused at once.
    assert len(spawned) == 16
    accepted, fits = 200 - result.value["refused"], MAX_WAITING_BYTES // 90_020
    assert fits <= accepted <= fits + 17, accepted
    assert "waiting for a slot" in result.value["first"] and str(MAX_WAITING_BYTES) in result.value["first"]
    assert run._waiting == 0  # the run's end released every waiting agent


async def test_a_second_interrupt_still_journals_the_run_s_end(harness: Harness) -> None:
    user_workflow(harness, "fan", FAN_OUT)
    settings, _ = workflows_of(harness)
    spawned = asyncio.Event()

    async def spawn(request: Any) -> Any:
        spawned.set()
        await asyncio.Event().wait()

    events: list[Event] = []
    runs = WorkflowRuns(spawn, settings, events.append)
    run = runs.start("fan", "1")
    await asyncio.wait_for(spawned.wait(), 30)
    # Esc stops the session's task and the model's run_workflow call is cancelled with it: two interrupts.
    assert run.interrupt()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert run.interrupt()
    await asyncio.sleep(0)
    run.interrupt()
    result = await asyncio.wait_for(run.result(), 30)
    assert result.status == "interrupted"
    ends = [e for e in events if isinstance(e, WorkflowEnd)]
    assert [e.status for e in ends] == ["interrupted"]
    assert not run.interrupt()  # it has ended


async def test_two_runs_share_the_session_s_sixteen_agent_slots(harness: Harness) -> None:
    user_workflow(harness, "fan", FAN_OUT)
    with ModelServer([Reply.hold(1, Reply.text(f"w{i}")) for i in range(20)]) as server:
        session = Session(options(harness, server), emit=lambda e: None)
        async with session:
            assert session.workflows is not None
            first, second = session.workflows.start("fan", "10"), session.workflows.start("fan", "10")
            for batch, total in ((16, 16), (4, 20)):
                deadline = time.monotonic() + 30
                while not (server.held == batch and server.request_count == total):
                    assert time.monotonic() < deadline, f"{server.held} held of {server.request_count}, waiting for {batch} of {total}"
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.3)  # time for a 17th to arrive, were it let through
                assert server.held == batch and server.request_count == total
                server.release()
            results = [await first.result(), await second.result()]
        server.assert_clean()
    assert [r.status for r in results] == ["done", "done"], [r.error for r in results]
    assert [r.value["count"] for r in results] == [10, 10]


async def test_the_ninth_active_run_of_a_session_is_refused(harness: Harness) -> None:
    from osprey.agents.workflows.runs import MAX_ACTIVE_RUNS
    from osprey.agents.workflows.tools import RunWorkflowInput, WorkflowTools
    from osprey.tools.base import Invocation

    assert MAX_ACTIVE_RUNS == 8
    user_workflow(harness, "waits", "// Waits until stopped.\nasync function main(osprey) { await new Promise(() => {}); }\n")
    settings, _ = workflows_of(harness)
    events: list[Event] = []
    runs = WorkflowRuns(_no_spawn, settings, events.append)
    started = [runs.start("waits") for _ in range(8)]
    try:
        with pytest.raises(WorkflowError, match="8 workflows of this session are running"):
            runs.start("waits")
        # The model's run_workflow is refused the same way.
        tools = WorkflowTools(runs)
        call = Invocation(id="c1", name="run_workflow", arguments={"name": "waits"}, input=RunWorkflowInput(name="waits"))
        outcome = await asyncio.wait_for(tools._run(call, None), 5)  # type: ignore[arg-type]
        assert outcome.is_error and "8 workflows of this session are running" in outcome.text
    finally:
        await runs.close()
    assert [(await run.result()).status for run in started] == ["interrupted"] * 8


def test_bidi_overrides_in_a_description_are_dropped(harness: Harness) -> None:
    from osprey.agents.workflows.discovery import describe

    assert describe("// Review \u202egnp.exe\u2066 files\u2069\nasync function main() {}\n".encode()) == "Review gnp.exe files"
    user_workflow(harness, "sly", "// Looks \u202eharmless\u202c here\nasync function main(osprey) { return 1; }\n")
    [found] = [w for w in discover_workflows(harness.workspace, harness.home) if w.name == "sly"]
    assert found.description == "Looks harmless here"
    import os
    import subprocess
    import sys

    env = {**{k: v for k, v in os.environ.items() if not k.startswith("OSPREY_")}, "OSPREY_HOME": str(harness.home)}
    listed = subprocess.run([sys.executable, "-m", "osprey", "extensions", "-C", str(harness.workspace)], env=env,
                            capture_output=True, text=True, timeout=60)
    assert "does: Looks harmless here" in listed.stdout and "\u202e" not in listed.stdout and "\u202c" not in listed.stdout
