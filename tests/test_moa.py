"""Mixture of agents through the session core: several reference models and an aggregator, all
served by the scripted model server on loopback (the request's model field tells them apart)."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path
from typing import Any

import pytest

from osprey.config import RetrySettings, load_settings
from osprey.errors import ConfigError
from osprey.events import AssistantText, Event, Notice, TaskEnd, UsageEvent, UserMessageEvent
from osprey.session.core import Session, SessionOptions
from osprey.sessions.resume import rebuild_conversation
from osprey.testing.model_server import ModelServer, RecordedRequest, Reply

RETRY = RetrySettings(max_retries=1, delays=[0.0], turn_timeout=30)
PRESET = """
[moa]
default = "trio"

[moa.presets.trio]
reference_models = ["ref-a", "ref-b", "ref-c"]
aggregator = "agg"
instructions = "Prefer the shortest correct answer."
timeout = {timeout}
"""


class ByModel:
    """A model server's script kept per model: each request is answered from the replies of the
    model it names (the server records a request before it takes its reply)."""

    def __init__(self, server: ModelServer, replies: dict[str, list[Reply]]) -> None:
        self.server = server
        self.queues = {model: collections.deque(script) for model, script in replies.items()}

    def _queue(self) -> collections.deque[Reply] | None:
        body = self.server._requests[-1].body if self.server._requests else None
        return self.queues.get(body.get("model")) if isinstance(body, dict) else None

    def __bool__(self) -> bool:
        return bool(self._queue())

    def __len__(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def popleft(self) -> Reply:
        queue = self._queue()
        assert queue
        return queue.popleft()

    def extend(self, replies: Any) -> None:
        raise AssertionError("give the replies per model")


def models_server(replies: dict[str, list[Reply]]) -> ModelServer:
    server = ModelServer()
    server._script = ByModel(server, replies)  # type: ignore[assignment]
    return server.start()


def of_model(server: ModelServer, model: str) -> list[RecordedRequest]:
    return [r for r in server.requests if isinstance(r.body, dict) and r.body.get("model") == model]


def said(request: RecordedRequest) -> str:
    """Everything a chat-completions request holds as text."""
    parts = []
    for message in request.body["messages"]:
        content = message.get("content")
        parts.append(content if isinstance(content, str) else "".join(p.get("text", "") for p in content or []))
    return "\n".join(parts)


class Rig:
    def __init__(self, tmp_path: Path, *, timeout: float = 30) -> None:
        self.workspace, self.home = tmp_path / "ws", tmp_path / "home"
        self.workspace.mkdir()
        self.home.mkdir()
        (self.home / "config.toml").write_text(PRESET.format(timeout=timeout))
        self.events: list[Event] = []

    def session(self, server: ModelServer, **kw: Any) -> Session:
        settings = load_settings(self.workspace, {"base_url": server.base_url, "model": "main", "approval_policy": "never"},
                                 {"OSPREY_HOME": str(self.home), "OPENAI_API_KEY": "k"})
        options = SessionOptions(settings=settings.model_copy(update={"retry": RETRY}), extensions=False)
        return Session(options, emit=self.events.append, **kw)

    def of(self, kind: type[Event]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path)


def _unchanged(session: Session) -> None:
    assert session.settings.model == "main"
    assert session.provider is not None and session.provider.model == "main"
    assert session.loop is not None and session.loop.provider is session.provider


async def test_three_references_and_an_aggregator(rig: Rig) -> None:
    server = models_server({
        "main": [Reply.text("First answer.", usage=(100, 10)), Reply.text("Follow-up answer.")],
        "ref-a": [Reply.text("Answer A: use a dict.", usage=(20, 3))],
        "ref-b": [Reply.text("Answer B: use a set.", usage=(21, 4))],
        "ref-c": [Reply.text("Answer C: use a list.", usage=(22, 5))],
        "agg": [Reply.text("Merged: a set, as B says.", usage=(50, 7))],
    })
    try:
        async with rig.session(server) as session:
            await session.submit("First question.")
            end = await session.moa("Which container fits?")
            assert (end.outcome, end.final_text, end.error) == ("Completed", "Merged: a set, as B says.", None)
            _unchanged(session)
            # Every reference got the conversation so far plus the prompt, and no tools.
            for model in ("ref-a", "ref-b", "ref-c"):
                [request] = of_model(server, model)
                assert "tools" not in request.body
                text = said(request)
                assert "First question." in text and "First answer." in text and text.rstrip().endswith("Which container fits?")
            # The aggregator got every answer, labelled by its model, and the preset's instructions.
            [request] = of_model(server, "agg")
            assert "tools" not in request.body
            text = said(request)
            for model, answer in (("ref-a", "Answer A: use a dict."), ("ref-b", "Answer B: use a set."), ("ref-c", "Answer C: use a list.")):
                assert f'<answer model="{model}">\n{answer}\n</answer>' in text
            assert "Which container fits?" in text and "Prefer the shortest correct answer." in text
            assert "did not answer" not in text
            # The prompt and the answer are in the conversation: the next turn's request holds them.
            await session.submit("And now?")
            [_, follow_up] = of_model(server, "main")
            roles = [(m["role"], m.get("content")) for m in follow_up.body["messages"] if m["role"] != "system"]
            assert roles[-3:] == [("user", "Which container fits?"), ("assistant", "Merged: a set, as B says."), ("user", "And now?")]
            # Usage counts: every model of the mixture is in the session's usage.
            usage = session.usage
            assert (usage.input_tokens, usage.output_tokens) == (100 + 20 + 21 + 22 + 50 + 10, 10 + 3 + 4 + 5 + 7 + 5)
        server.assert_clean()
    finally:
        server.close()
    # The record: the prompt and the answer as a user and an assistant turn, and which models ran with their usage.
    conversation = rebuild_conversation(rig.events)
    assert [(m.role, getattr(m, "content", None) or getattr(m, "text", "")) for m in conversation][2:4] == [
        ("user", "Which container fits?"), ("assistant", "Merged: a set, as B says.")]
    [summary] = [e for e in rig.of(Notice) if (getattr(e, "moa", None) or {}).get("stage") == "end"]
    ran = {m["model"]: (m["role"], m["ok"], m["usage"]["input_tokens"]) for m in summary.moa["models"]}  # type: ignore[attr-defined]
    assert ran == {"ref-a": ("reference", True, 20), "ref-b": ("reference", True, 21), "ref-c": ("reference", True, 22), "agg": ("aggregator", True, 50)}
    assert summary.moa["preset"] == "trio"  # type: ignore[attr-defined]
    moa_usage = [e for e in rig.of(UsageEvent) if e.usage.input_tokens == 20 + 21 + 22 + 50]
    assert len(moa_usage) == 1 and moa_usage[0].turn == 2
    assert [e.turn for e in rig.of(AssistantText)] == [1, 2, 3]


async def test_a_mixture_is_journaled_and_resumed(rig: Rig) -> None:
    from osprey.events import Notice as RecordedNotice
    from osprey.sessions.journal import Journal, journal_path, read_events
    from osprey.sessions.resume import resume_point

    server = models_server({"ref-a": [Reply.text("A.")], "ref-b": [Reply.text("B.")], "ref-c": [Reply.text("C.")],
                            "agg": [Reply.text("Merged.", usage=(40, 4))]})
    try:
        session = rig.session(server, journal=Journal(journal_path(rig.home)))
        async with session:
            await session.moa("Journaled question?")
    finally:
        server.close()
    events = read_events(journal_path(rig.home), session.session_id)
    point = resume_point(events)
    assert [(m.role, getattr(m, "content", None) or getattr(m, "text", "")) for m in point.messages] == [
        ("user", "Journaled question?"), ("assistant", "Merged.")]
    assert point.turns == 1 and point.usage.input_tokens == 3 * 10 + 40
    [summary] = [e for e in events if isinstance(e, RecordedNotice) and (getattr(e, "moa", None) or {}).get("stage") == "end"]
    assert [m["model"] for m in summary.moa["models"]][-1] == "agg"  # type: ignore[attr-defined]
    assert [e.outcome for e in events if isinstance(e, TaskEnd)] == ["Completed"]


async def test_tool_calls_reach_the_mixture_as_text(rig: Rig) -> None:
    (rig.workspace / "notes.txt").write_text("hello")
    server = models_server({
        "main": [Reply.tool_call("list_directory", {"path": "."}), Reply.text("There is notes.txt.")],
        "ref-a": [Reply.text("A.")], "ref-b": [Reply.text("B.")], "ref-c": [Reply.text("C.")], "agg": [Reply.text("Merged.")],
    })
    try:
        async with rig.session(server) as session:
            await session.submit("What is here?")
            end = await session.moa("Summarise.")
            assert end.outcome == "Completed"
            for model in ("ref-a", "agg"):
                [request] = of_model(server, model)
                messages = request.body["messages"]
                assert all(m["role"] in ("system", "user", "assistant") and "tool_calls" not in m for m in messages)
                text = said(request)
                assert '[I called the tool list_directory with {"path": "."}]' in text and "[the tool list_directory returned:]" in text
                assert "notes.txt" in text and "There is notes.txt." in text
        server.assert_clean()
    finally:
        server.close()


async def test_a_failed_reference_is_tolerated_and_named_to_the_aggregator(tmp_path: Path) -> None:
    rig = Rig(tmp_path, timeout=1.0)
    server = models_server({
        "ref-a": [Reply.text("Answer A.")],
        "ref-b": [Reply.error(400, "no such model: ref-b")],
        "ref-c": [Reply.delay(5, Reply.text("too late"))],
        "agg": [Reply.text("Merged from A.")],
        "main": [Reply.text("next")],
    })
    try:
        async with rig.session(server) as session:
            end = await session.moa("Question?")
            assert (end.outcome, end.final_text) == ("Completed", "Merged from A.")
            _unchanged(session)
            text = said(of_model(server, "agg")[0])
            assert '<answer model="ref-a">\nAnswer A.\n</answer>' in text
            assert "ref-b" in text and "no such model: ref-b" in text and "ref-c" in text and "no answer within 1 s" in text
            assert '<answer model="ref-b">' not in text and "too late" not in text
            warned = [e.message for e in rig.of(Notice) if e.level == "warning"]
            assert any("moa: ref-b failed" in w for w in warned) and any("moa: ref-c failed" in w for w in warned)
            await session.submit("go on")
            assert of_model(server, "main")
    finally:
        server.close()


async def test_all_references_failing_is_a_clear_error_and_the_model_stays(rig: Rig) -> None:
    server = models_server({
        "ref-a": [Reply.error(404, "model ref-a not found")],
        "ref-b": [Reply.error(401, "bad key")],
        "ref-c": [Reply.error(400, "context too long")],
        "main": [Reply.text("Still here.")],
    })
    try:
        async with rig.session(server) as session:
            end = await session.moa("Question?")
            assert end.outcome == "Error" and end.final_text == ""
            assert end.error is not None and "no reference model of the preset 'trio' answered" in end.error
            assert "model ref-a not found" in end.error and "bad key" in end.error and "context too long" in end.error
            assert not of_model(server, "agg")
            _unchanged(session)
            end = await session.submit("Are you there?")
            assert end.final_text == "Still here."
            [request] = of_model(server, "main")
            assert not any(m["role"] == "assistant" for m in request.body["messages"])
    finally:
        server.close()


async def test_cancelling_a_mixture_restores_nothing_because_nothing_changed(rig: Rig) -> None:
    server = models_server({
        "ref-a": [Reply.hold(0)], "ref-b": [Reply.hold(0)], "ref-c": [Reply.text("Answer C.", usage=(30, 3))],
        "main": [Reply.text("Back to main.")],
    })
    try:
        async with rig.session(server) as session:
            running = asyncio.create_task(session.moa("Question?"))
            assert await asyncio.to_thread(server.wait_held, 2)
            while not any("moa: ref-c answered" in e.message for e in rig.of(Notice)):
                await asyncio.sleep(0.01)
            assert session.busy and session.cancel()
            end = await asyncio.wait_for(running, 10)
            assert end.outcome == "Stopped" and not session.busy
            server.release()
            _unchanged(session)
            # What answered before the stop still counts.
            assert session.usage.input_tokens == 30
            end = await session.submit("Hello?")
            assert end.final_text == "Back to main."
            assert not of_model(server, "agg")
    finally:
        server.release()
        server.close()


async def test_no_preset_says_how_to_add_one(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    (rig.home / "config.toml").write_text("")
    server = models_server({})
    try:
        async with rig.session(server) as session:
            with pytest.raises(ConfigError) as caught:
                await session.moa("Question?")
            assert "/moa-config" in str(caught.value) and "[moa.presets." in str(caught.value)
            assert not session.busy and not rig.of(UserMessageEvent) and not rig.of(TaskEnd)
    finally:
        server.close()


# ------------------------------------------------------------------ configuration


def _settings(tmp_path: Path, config: str, project: str | None = None) -> Any:
    home, ws = tmp_path / "home", tmp_path / "ws"
    home.mkdir(exist_ok=True)
    (ws / ".git").mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(config)
    if project is not None:
        (ws / ".osprey").mkdir(exist_ok=True)
        (ws / ".osprey" / "config.toml").write_text(project)
    return load_settings(ws, {}, {"OSPREY_HOME": str(home), "OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "ak"})


@pytest.mark.parametrize(("preset", "complaint"), [
    ('reference_models = ["a"]\naggregator = "z"', "at least 2 items"),
    (f"reference_models = {[f'm{i}' for i in range(9)]}\naggregator = \"z\"".replace("'", '"'), "at most 8 items"),
    ('reference_models = ["a", "a"]\naggregator = "z"', "lists 'a' twice"),
    ('reference_models = ["a", "b"]', "aggregator"),
    ('reference_models = ["a", "b"]\naggregator = "z"\nproviders = { q = "openai" }', "providers names 'q', which is neither"),
    ('reference_models = ["a", "b"]\naggregator = "z"\nproviders = { a = "replay" }', "moa.presets.p.providers.a"),
    ('reference_models = ["a b", "c"]\naggregator = "z"', "moa.presets.p.reference_models.0"),
    ('reference_models = ["a", "b"]\naggregator = "z"\ntimeout = 0', "moa.presets.p.timeout"),
    ('reference_models = ["a", "b"]\naggregator = "z"\nmodel = "x"', "unknown key 'moa.presets.p.model'"),
])
def test_bad_presets_are_rejected_with_clear_messages(tmp_path: Path, preset: str, complaint: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _settings(tmp_path, f"[moa.presets.p]\n{preset}\n")
    assert complaint in str(caught.value) and "config.toml" in str(caught.value)


def test_presets_resolve_with_their_providers_endpoints(tmp_path: Path) -> None:
    settings = _settings(tmp_path, '[providers.anthropic]\nbase_url = "http://127.0.0.1:9/v1"\n\n[moa]\ndefault = "p"\n\n'
                                   '[moa.presets.p]\nreference_models = ["a", "b"]\naggregator = "z"\nproviders = { b = "anthropic" }\n')
    assert settings.moa.default == "p" and settings.moa.presets["p"].providers == {"b": "anthropic"}
    endpoint = settings.moa.endpoints["anthropic"]
    assert endpoint.base_url == "http://127.0.0.1:9/v1" and endpoint.api_key is not None and endpoint.api_key.get_secret_value() == "ak"


def test_a_default_naming_no_preset_is_a_warning(tmp_path: Path) -> None:
    settings = _settings(tmp_path, '[moa]\ndefault = "gone"\n')
    assert settings.moa.default is None
    assert any("moa.default names the preset 'gone'" in w and "/moa-config" in w for w in settings.warnings)


PROJECT_PRESETS = """
[moa.presets.local]
reference_models = ["a", "b"]
aggregator = "z"

[moa.presets.elsewhere]
reference_models = ["a", "b"]
aggregator = "z"
providers = { b = "anthropic" }
"""


def test_a_project_preset_naming_another_provider_waits_for_trust(tmp_path: Path) -> None:
    from osprey.trust import digest, trust_project

    settings = _settings(tmp_path, "", PROJECT_PRESETS)
    assert set(settings.moa.presets) == {"local"}  # the session's own provider: no trust needed
    assert any("ignored moa.presets.elsewhere" in w and "change where requests and credentials go" in w for w in settings.warnings)
    project = tmp_path / "ws" / ".osprey" / "config.toml"
    trust_project(tmp_path / "home", tmp_path / "ws", {".osprey/config.toml": digest(project.read_bytes())})
    settings = _settings(tmp_path, "", PROJECT_PRESETS)
    assert set(settings.moa.presets) == {"local", "elsewhere"} and settings.moa.presets["elsewhere"].providers == {"b": "anthropic"}
    assert not any("moa" in w for w in settings.warnings)


def test_a_project_may_name_the_provider_the_user_already_gave_that_model(tmp_path: Path) -> None:
    user = '[moa.presets.elsewhere]\nreference_models = ["a", "b"]\naggregator = "z"\nproviders = { b = "anthropic" }\n'
    settings = _settings(tmp_path, user, PROJECT_PRESETS.replace('"a", "b"]\naggregator = "z"\nproviders', '"b", "c"]\naggregator = "z"\nproviders'))
    assert settings.moa.presets["elsewhere"].reference_models == ["b", "c"]
    assert not any("moa" in w for w in settings.warnings)


async def test_providers_share_the_sessions_client_and_limiter(tmp_path: Path) -> None:
    import httpx

    from osprey.agents.moa import MoaProviders
    from osprey.providers.limiter import LimitedProvider, RequestLimiter

    settings = _settings(tmp_path, '[moa.presets.p]\nreference_models = ["a", "b"]\naggregator = "z"\nproviders = { b = "anthropic" }\n')
    settings = settings.model_copy(update={"base_url": "http://127.0.0.1:9/v1"})
    limiter = RequestLimiter(10)
    async with httpx.AsyncClient() as client:
        made = MoaProviders(settings, settings.moa, http=client, http_plain=True, limiter=limiter)
        a, again, z = await made.get(None, "a"), await made.get("openai", "a"), await made.get(None, "z")
        b = await made.get("anthropic", "b")
        assert a is again and a is not z  # one provider per provider and model
        for provider in (a, z, b):
            assert isinstance(provider, LimitedProvider) and provider.limiter is limiter
        assert a.inner.client is client and z.inner.client is client  # type: ignore[attr-defined]
        # An https endpoint cannot go through the session's plain-http client: one of the mixture's own, closed with it.
        assert (b.name, b.model) == ("anthropic", "b") and b.inner.client is not client  # type: ignore[attr-defined]
        own = b.inner.client  # type: ignore[attr-defined]
        await made.aclose()
        assert own.is_closed and not client.is_closed
    no_key = settings.model_copy(update={"moa": settings.moa.model_copy(update={"endpoints": {
        "anthropic": settings.moa.endpoints["anthropic"].model_copy(update={"api_key": None})}})})
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY is not set"):
        await MoaProviders(no_key, no_key.moa).get("anthropic", "b")
