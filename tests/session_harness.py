"""A session-core harness for tests: a scripted provider and sessions on a real local ToolService."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from osprey.config import RetrySettings, load_settings
from osprey.events import Event, SessionEnd, SessionStart, TaskEnd, ToolCallEvent, ToolResultEvent, UsageEvent, UserMessageEvent
from osprey.messages import AssistantMessage, ModelRequest, ModelTurn, ToolCall, Usage
from osprey.session.core import Session, SessionOptions

FAST_RETRY = RetrySettings(max_retries=3, delays=[0.0], turn_timeout=30)


# ------------------------------------------------------------------ the fake provider

Step = ModelTurn | BaseException | Callable[[ModelRequest], Awaitable[ModelTurn]]


@dataclass
class FakeProvider:
    """Plays a script of turns (or exceptions, or coroutines) and records every request."""

    script: list[Step]
    name: str = "fake"
    model: str = "fake-1"
    requests: list[ModelRequest] = field(default_factory=list)

    async def complete(self, request: ModelRequest, on_text: Any = None) -> ModelTurn:
        self.requests.append(request.model_copy(deep=True))
        if not self.script:
            raise AssertionError(f"the loop asked for turn {len(self.requests)} but the script is exhausted")
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            return await step(request)
        if on_text and step.message.text:
            on_text(step.message.text)
        return step


_ids = iter(range(1, 1_000_000))


def text(t: str, usage: tuple[int, int] = (10, 5)) -> ModelTurn:
    return ModelTurn(message=AssistantMessage(text=t), usage=Usage(input_tokens=usage[0], output_tokens=usage[1]), stop_reason="stop")


def calls(*specs: tuple[str, dict[str, Any]] | ToolCall, say: str = "", usage: tuple[int, int] = (10, 5)) -> ModelTurn:
    tool_calls = [s if isinstance(s, ToolCall) else ToolCall(id=f"call_{next(_ids)}", name=s[0], arguments=s[1]) for s in specs]
    return ModelTurn(message=AssistantMessage(text=say, tool_calls=tool_calls), usage=Usage(input_tokens=usage[0], output_tokens=usage[1]), stop_reason="tool_calls")


def empty() -> ModelTurn:
    return ModelTurn(message=AssistantMessage(text=""), usage=Usage(input_tokens=3, output_tokens=0))


async def hang(request: ModelRequest) -> ModelTurn:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


# ------------------------------------------------------------------ fixtures


@dataclass
class Harness:
    """Runs sessions through the session core with a scripted provider and a real local ToolService."""

    workspace: Path
    home: Path
    max_result_chars: int = 50_000
    context_window: int | None = None
    events: list[Event] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    session: Session | None = None

    @classmethod
    def under(cls, tmp_path: Path, files: dict[str, str] | None = None, *, git: bool = False) -> Harness:
        """A harness with a workspace (`ws`, holding `files`; a git root with `git`) and a home
        (`home`) under `tmp_path`."""
        workspace, home = tmp_path / "ws", tmp_path / "home"
        workspace.mkdir()
        home.mkdir()
        if git:
            (workspace / ".git").mkdir()
        for name, text in (files or {}).items():
            (workspace / name).write_text(text)
        return cls(workspace=workspace, home=home)

    def options(self, policy: str, max_turns: int | None, retry: RetrySettings, allow: tuple[str, ...]) -> SessionOptions:
        flags: dict[str, Any] = {"approval_policy": policy}
        if max_turns is not None:
            flags["max_turns"] = max_turns
        settings = load_settings(self.workspace, flags, {"OSPREY_HOME": str(self.home), "OPENAI_API_KEY": "unused"})
        limits = settings.tool_results.model_copy(update={"max_chars": self.max_result_chars})
        return SessionOptions(settings=settings.model_copy(update={"retry": retry, "tool_results": limits}), allow=list(allow),
                              context_window=self.context_window)

    async def start(self, script: list[Step], *, policy: str = "never", max_turns: int | None = None, retry: RetrySettings = FAST_RETRY,
                    allow: tuple[str, ...] = (), approver: Any = None, interceptors: tuple[Any, ...] = (),
                    warn: Any = None, judgement: bool = True) -> tuple[Session, FakeProvider]:
        provider = FakeProvider(script)
        options = self.options(policy, max_turns, retry, allow).model_copy(update={"judgement": judgement})
        self.session = Session(options, emit=self.events.append, on_text=self.texts.append,
                               provider=provider, approver=approver, interceptors=interceptors, warn=warn or (lambda _: None))
        await self.session.start()
        return self.session, provider

    async def working(self) -> tuple[Session, asyncio.Event, asyncio.Task[Any]]:
        """A session working on a prompt whose model turn waits: set the event and it answers "ok";
        the task is the submit, to await."""
        gate = asyncio.Event()

        async def wait(request: Any) -> Any:
            await gate.wait()
            return text("ok")

        session, provider = await self.start([wait])
        task = asyncio.create_task(session.submit("first"))
        while not provider.requests:
            await asyncio.sleep(0.01)
        return session, gate, task

    async def run(self, script: list[Step], prompt: str = "Do the task.", **kw: Any) -> tuple[SessionEnd, FakeProvider]:
        session, provider = await self.start(script, **kw)
        try:
            await asyncio.wait_for(session.submit(prompt), 60)
        finally:
            end = await session.close()
        assert end is not None
        return end, provider

    def of(self, kind: type[Event]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def result(self, call_id: str) -> ToolResultEvent:
        [r] = [e for e in self.of(ToolResultEvent) if e.id == call_id]
        return r


def check_stream(events: list[Event]) -> None:
    """The invariants every session's event stream keeps."""
    assert isinstance(events[0], SessionStart)
    assert isinstance(events[-1], SessionEnd)
    assert isinstance(events[-2], TaskEnd) and events[-2].outcome == events[-1].outcome
    assert sum(isinstance(e, (SessionStart, SessionEnd)) for e in events) == 2
    assert isinstance(events[1], UserMessageEvent) and events[1].origin == "user"
    total = Usage()
    for e in events:
        if isinstance(e, UsageEvent):
            total = total + e.usage
            assert e.total == total
    assert events[-1].usage == total
    pending: dict[str, str] = {}
    for e in events:
        if isinstance(e, ToolCallEvent):
            assert e.id not in pending
            pending[e.id] = e.name
        elif isinstance(e, ToolResultEvent):
            assert pending.pop(e.id) == e.name
            assert (e.error_category is None) == e.ok
    assert not pending, "every tool call has a result"
