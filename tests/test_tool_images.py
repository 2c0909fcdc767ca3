"""Images in tool results: a tool's images reach the model in each provider's form (Anthropic:
image blocks in the `tool_result`; chat completions: one user message after the turn's tool
messages), stand as notes for a model that takes none, are dropped with a note when out of bounds,
and survive the journal and a resume; transcripts show a note, never the base64 text."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from session_harness import FAST_RETRY, Harness

from osprey.config import load_settings
from osprey.events import ToolCallEvent, ToolResultEvent
from osprey.messages import (
    IMAGE_TYPES,
    MAX_IMAGE_BASE64,
    MAX_IMAGE_BYTES,
    MAX_IMAGES,
    MAX_REQUEST_BASE64,
    MAX_REQUEST_IMAGES,
    NOT_SENT_AGAIN,
    AssistantMessage,
    ImageBlock,
    ModelRequest,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    held_images,
    image_or_note,
    kept_images,
)
from osprey.providers.anthropic import AnthropicProvider
from osprey.providers.openai import OpenAIProvider, to_wire_messages
from osprey.session.core import Session, SessionOptions
from osprey.sessions.journal import Journal, event_json, journal_path, load_events, read_events
from osprey.sessions.resume import resume_point
from osprey.testing.model_server import ModelServer, Reply
from osprey.testing.model_server import ToolCall as ScriptedCall
from osprey.tools.base import Invocation, StaticTools, Tool, ToolContext, ToolOutcome
from osprey.tui.transcript import image_lines

DIALECTS = ("openai", "anthropic")
NO_ARGS = {"type": "object", "properties": {}}


def png(width: int = 2, height: int = 2) -> bytes:
    """A real PNG of `width` x `height` grey pixels."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


PNG = base64.b64encode(png()).decode()
# About 12 KB, for the size in notes.
BIG_PNG = base64.b64encode(png() + b"\x00" * (12 * 1024 - len(png()))).decode()
# The first bytes of each type, as its magic number shows it.
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 2044).decode()
GIF = base64.b64encode(b"GIF89a" + b"\x00" * 2042).decode()
WEBP = base64.b64encode(b"RIFF\x00\x08\x00\x00WEBPVP8 " + b"\x00" * 2032).decode()


def image_tool(name: str, outcome: ToolOutcome) -> Tool:
    async def run(call: Invocation, ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome(outcome.text, outcome.is_error, images=list(outcome.images))

    return Tool(name, "Returns a picture.", NO_ARGS, run=run, read_only=True)


def screenshot(text: str = "the screen", *images: ImageBlock) -> ToolOutcome:
    return ToolOutcome(text, images=list(images) or [ImageBlock(media_type="image/png", data=PNG)])


def options(harness: Harness, server: ModelServer, dialect: str, **update: Any) -> SessionOptions:
    settings = load_settings(harness.workspace, {"provider": dialect, "model": "m", "base_url": server.base_url, "approval_policy": "never"},
                             {"OSPREY_HOME": str(harness.home), "OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})
    return SessionOptions(settings=settings.model_copy(update={"retry": FAST_RETRY}), **update)


async def run_session(harness: Harness, server: ModelServer, dialect: str, tools: list[Tool], *, journal: Journal | None = None,
                      provider: Any = None, **update: Any) -> Session:
    session = Session(options(harness, server, dialect, **update), emit=harness.events.append, tool_sources=[StaticTools("pictures", tools)],
                      journal=journal, provider=provider)
    async with session:
        end = await session.submit("Look at the screen.")
    assert end.outcome == "Completed", end
    server.assert_clean()
    return session


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


def anthropic_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result"]


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness.under(tmp_path, {"notes.txt": "alpha\n"}, git=True)


# ------------------------------------------------------------------ to the model, in each provider's form


async def test_chat_completions_send_a_turns_images_in_one_user_message_after_its_tool_messages(harness: Harness) -> None:
    tools = [image_tool("shot", screenshot()), image_tool("two_shots", screenshot("both", ImageBlock(media_type="image/png", data=PNG),
                                                                                   ImageBlock(media_type="image/jpeg", data=JPEG))),
             image_tool("plain", ToolOutcome("just text"))]
    calls = [ScriptedCall("shot", {}, "call_a"), ScriptedCall("plain", {}, "call_b"), ScriptedCall("two_shots", {}, "call_c")]
    with ModelServer([Reply.tool_calls(calls), Reply.text("I see it.")]) as server:
        await run_session(harness, server, "openai", tools)
        messages = server.requests[1].body["messages"]
    roles = [m["role"] for m in messages]
    assert roles[-5:] == ["assistant", "tool", "tool", "tool", "user"]
    assert [m["content"] for m in messages[-4:-1]] == ["the screen", "just text", "both"]  # a tool message stays text
    assert messages[-1]["content"] == [
        {"type": "text", "text": "Images returned by tool call call_a:"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "text", "text": "Images returned by tool call call_c:"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}},
    ]


async def test_anthropic_sends_images_as_blocks_of_the_tool_result(harness: Harness) -> None:
    tools = [image_tool("shot", screenshot()), image_tool("plain", ToolOutcome("just text")), image_tool("blank", screenshot(""))]
    calls = [ScriptedCall("shot", {}, "toolu_a"), ScriptedCall("plain", {}, "toolu_b"), ScriptedCall("blank", {}, "toolu_c")]
    with ModelServer([Reply.tool_calls(calls), Reply.text("I see it.")]) as server:
        await run_session(harness, server, "anthropic", tools)
        results = anthropic_results(server.requests[1].body)
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    assert [r["content"] for r in results] == [[{"type": "text", "text": "the screen"}, image], "just text", [image]]
    assert [r["tool_use_id"] for r in results] == ["toolu_a", "toolu_b", "toolu_c"]


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_model_that_takes_no_images_gets_a_note_instead(harness: Harness, dialect: str) -> None:
    tools = [image_tool("shot", screenshot("the screen", ImageBlock(media_type="image/png", data=BIG_PNG)))]
    with ModelServer([Reply.tool_call("shot", {}, id="c1"), Reply.text("ok")]) as server:
        async with httpx.AsyncClient() as http:
            kind = OpenAIProvider if dialect == "openai" else AnthropicProvider
            provider = kind(http, "m", server.base_url, "k", images=False)
            await run_session(harness, server, dialect, tools, provider=provider)
        body = server.requests[1].body
    expected = "the screen\n[image: image/png, 12 KB, not shown: the model takes no images]"
    if dialect == "openai":
        assert [m["content"] for m in tool_messages(body)] == [expected]
        assert body["messages"][-1]["role"] == "tool"  # no user message of images follows
    else:
        assert [r["content"] for r in anthropic_results(body)] == [expected]
    assert PNG[:40] not in json.dumps(body)


def test_the_chat_completions_body_built_turn_by_turn_matches_the_whole_conversation_converted() -> None:
    provider = OpenAIProvider(httpx.AsyncClient(), "m", "http://127.0.0.1:9/v1", None)
    image = ImageBlock(media_type="image/gif", data=PNG)
    messages: list[Any] = [UserMessage(content="go")]
    for n in range(4):
        calls = [ToolCall(id=f"c{n}a", name="shot"), ToolCall(id=f"c{n}b", name="shot")]
        messages.append(AssistantMessage(tool_calls=calls))
        messages += [ToolResultMessage(tool_call_id=c.id, name="shot", content="x", images=[image] if n % 2 and c.id.endswith("a") else [])
                     for c in calls]
        request = ModelRequest(system="s", messages=list(messages), tools=[])
        body = provider.body(request)["messages"]
        assert body == to_wire_messages(request)
        assert sum(m["role"] == "user" for m in body) == 1 + (n + 1) // 2  # the prompt and one message per turn with images
    # The image message of turn 1 sits after both of its tool messages, before the next assistant message.
    at = next(i for i, m in enumerate(body) if m["role"] == "user" and isinstance(m["content"], list))
    assert [m["role"] for m in body[at - 3:at + 2]] == ["assistant", "tool", "tool", "user", "assistant"]
    assert body[at]["content"][0] == {"type": "text", "text": "Images returned by tool call c1a:"}


# ------------------------------------------------------------------ bounds


def test_an_image_block_holds_a_supported_type_within_the_size_bound() -> None:
    with pytest.raises(ValidationError):
        ImageBlock(media_type="image/tiff", data=PNG)
    with pytest.raises(ValidationError, match="not base64"):
        ImageBlock(media_type="image/png", data="not base64!")
    # The bound is on the base64 text, as the Anthropic API counts it: 5 MiB of it, 3.75 MiB of bytes.
    assert MAX_IMAGE_BASE64 == 5_242_880 and MAX_IMAGE_BYTES == 3_932_160
    largest = base64.b64encode(png() + b"\x00" * (MAX_IMAGE_BYTES - len(png()))).decode()
    assert len(largest) == MAX_IMAGE_BASE64
    assert ImageBlock(media_type="image/png", data=largest).size == MAX_IMAGE_BYTES
    with pytest.raises(ValidationError, match="over 3.75 MiB"):
        ImageBlock(media_type="image/png", data=base64.b64encode(png() + b"\x00" * (MAX_IMAGE_BYTES + 1 - len(png()))).decode())
    with pytest.raises(ValidationError):
        ToolResultMessage(tool_call_id="c", name="t", content="", images=[ImageBlock(media_type="image/png", data=PNG)] * (MAX_IMAGES + 1))


def test_an_image_is_of_the_type_its_bytes_show_and_bytes_of_no_image_type_are_refused() -> None:
    for data, kind in ((PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"), (WEBP, "image/webp")):
        for declared in IMAGE_TYPES:
            assert ImageBlock(media_type=declared, data=data).media_type == kind
            assert image_or_note(declared, data) == ImageBlock(media_type=kind, data=data)
    assert image_or_note("image/gif", base64.b64encode(b"GIF87a" + b"\x00" * 10).decode()) == \
        ImageBlock(media_type="image/gif", data=base64.b64encode(b"GIF87a" + b"\x00" * 10).decode())
    fake = base64.b64encode(bytes(range(256)) * 40).decode()
    for data in (fake, base64.b64encode(b"RIFF\x00\x00\x00\x00WAVEfmt ").decode(), base64.b64encode(b"\x89PNG").decode()):
        assert image_or_note("image/png", data) == "[image dropped: image/png is not a PNG, JPEG, GIF or WebP image]"
        with pytest.raises(ValidationError, match="not a PNG, JPEG, GIF or WebP image"):
            ImageBlock(media_type="image/png", data=data)
    assert image_or_note("image/webp", bytes(range(256))) == "[image dropped: image/webp is not a PNG, JPEG, GIF or WebP image]"


def test_image_or_note_takes_bytes_or_wrapped_base64_and_names_what_it_drops() -> None:
    assert image_or_note("image/png", png()) == ImageBlock(media_type="image/png", data=PNG)
    wrapped = "\n".join(BIG_PNG[i:i + 76] for i in range(0, len(BIG_PNG), 76))
    assert image_or_note("IMAGE/JPG", wrapped) == ImageBlock(media_type="image/png", data=BIG_PNG)
    wrapped_jpeg = "\n".join(JPEG[i:i + 76] for i in range(0, len(JPEG), 76))
    assert image_or_note("IMAGE/JPG", wrapped_jpeg) == ImageBlock(media_type="image/jpeg", data=JPEG)
    assert image_or_note("image/tiff", PNG) == "[image dropped: image/tiff is not supported]"
    assert image_or_note("image/png\x1b[2J\nx", PNG) == "[image dropped: image/png[2Jx is not supported]"
    assert image_or_note("image/webp", "%%%") == "[image dropped: image/webp is not base64 text]"
    largest = png() + b"\x00" * (MAX_IMAGE_BYTES - len(png()))
    assert isinstance(image_or_note("image/png", largest), ImageBlock)
    assert image_or_note("image/png", largest + b"\x00") == "[image dropped: image/png is over 3.75 MiB (3.8 MiB)]"
    assert image_or_note("image/png", b"\x89PNG\r\n\x1a\n" + b"\x00" * (5 * 1024 * 1024 - 8)) == \
        "[image dropped: image/png is over 3.75 MiB (5.0 MiB)]"
    assert image_or_note("image/png", "A" * (8 * 1024 * 1024)) == "[image dropped: image/png is over 3.75 MiB (6.0 MiB)]"
    # Base64 text just over the bound, as a tool's source sends it.
    over = base64.b64encode(largest + b"\x00" * 3).decode()
    assert len(over) == MAX_IMAGE_BASE64 + 4
    assert image_or_note("image/png", over) == "[image dropped: image/png is over 3.75 MiB (3.8 MiB)]"


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_tool_image_whose_bytes_are_no_image_is_dropped_and_a_mistyped_one_takes_its_bytes_type(harness: Harness, dialect: str) -> None:
    # Built without their checks, as a tool could: the call path checks them again.
    fake = ImageBlock.model_construct(media_type="image/png", data=base64.b64encode(bytes(range(256)) * 40).decode())
    mistyped = ImageBlock.model_construct(media_type="image/png", data=JPEG)
    tools = [image_tool("shot", screenshot("pictures", fake, mistyped))]
    with ModelServer([Reply.tool_call("shot", {}, id="c1"), Reply.text("ok")]) as server:
        await run_session(harness, server, dialect, tools)
        body = server.requests[1].body
    expected = "pictures\n[image dropped: image/png is not a PNG, JPEG, GIF or WebP image]"
    if dialect == "openai":
        assert [m["content"] for m in tool_messages(body)] == [expected]
        assert body["messages"][-1]["content"][1:] == [{"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}}]
    else:
        [result] = anthropic_results(body)
        assert result["content"] == [{"type": "text", "text": expected},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": JPEG}}]
    assert fake.data[:40] not in json.dumps(body)


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_images_out_of_bounds_are_dropped_with_a_note_in_the_text(harness: Harness, dialect: str) -> None:
    good = ImageBlock(media_type="image/png", data=PNG)
    # Built without its checks, as a tool could: the call path checks it again.
    tiff = ImageBlock.model_construct(media_type="image/tiff", data=PNG)  # type: ignore[arg-type]
    huge = ImageBlock.model_construct(media_type="image/png", data="A" * (8 * 1024 * 1024))
    tools = [image_tool("many", screenshot("pictures", tiff, *[good] * (MAX_IMAGES + 1), huge))]
    with ModelServer([Reply.tool_call("many", {}, id="c1"), Reply.text("ok")]) as server:
        await run_session(harness, server, dialect, tools)
        body = server.requests[1].body
    expected = ("pictures\n[image dropped: image/tiff is not supported]\n[image dropped: a result holds at most 8 images]\n"
                "[image dropped: image/png is over 3.75 MiB (6.0 MiB)]")
    if dialect == "openai":
        assert [m["content"] for m in tool_messages(body)] == [expected]
        parts = body["messages"][-1]["content"]
        assert sum(p["type"] == "image_url" for p in parts) == MAX_IMAGES
    else:
        [result] = anthropic_results(body)
        assert result["content"][0] == {"type": "text", "text": expected}
        assert sum(b["type"] == "image" for b in result["content"]) == MAX_IMAGES
    [event] = [e for e in harness.events if isinstance(e, ToolResultEvent)]
    assert event.output == expected and len(event.images) == MAX_IMAGES


def test_kept_images_checks_recorded_images_again() -> None:
    images, notes = kept_images([{"media_type": "image/png", "data": PNG}, {"media_type": "image/png", "data": PNG[:-7]}, "junk",
                                 {"media_type": "image/bmp", "data": PNG}])
    assert images == [ImageBlock(media_type="image/png", data=PNG)]
    assert notes == ("\n[image dropped: image/png is not base64 text]\n[image dropped: not an image]"
                     "\n[image dropped: image/bmp is not supported]")


# ------------------------------------------------------------------ the journal, resume, transcripts


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_the_journal_keeps_a_results_images_and_a_resumed_session_sends_them_again(harness: Harness, dialect: str) -> None:
    path = journal_path(harness.home)
    tools = [image_tool("shot", screenshot("the screen", ImageBlock(media_type="image/png", data=BIG_PNG)))]
    with ModelServer([Reply.tool_call("shot", {}, id="c1"), Reply.text("I see it.")]) as server:
        session = await run_session(harness, server, dialect, tools, journal=Journal(path))
        first = server.requests[1].body
    events = read_events(path, session.session_id)
    point = resume_point(events)
    [result] = [m for m in point.messages if isinstance(m, ToolResultMessage)]
    assert result.images == [ImageBlock(media_type="image/png", data=BIG_PNG)] and result.content == "the screen"

    # `osprey sessions show --json` prints a note for the image, not its data.
    shown = json.dumps(load_events(path, session.session_id))
    assert BIG_PNG[:40] not in shown and "[image: image/png, 12 KB]" in shown

    with ModelServer([Reply.text("Still there.")]) as server:
        harness.events.clear()
        session = Session(options(harness, server, dialect, resume=point), emit=harness.events.append)
        async with session:
            end = await session.submit("And now?")
        assert end.outcome == "Completed"
        server.assert_clean()
        again = server.requests[0].body
    # The resumed conversation carries the image as the first one did, then the new prompt.
    assert again["messages"][:len(first["messages"])] == first["messages"]


def test_an_event_over_the_journals_bound_keeps_its_images_whole_or_drops_them_with_a_note() -> None:
    images = [{"media_type": "image/png", "data": BIG_PNG}, {"media_type": "image/jpeg", "data": BIG_PNG}]
    event = ToolResultEvent(turn=1, id="c1", name="shot", ok=True, output="the screen", images=images)
    whole = event_json(event)
    assert json.loads(whole)["images"] == images
    one_fits = json.loads(event_json(event, limit=len(whole) - 100))
    assert one_fits["images"] == images[:1]
    assert one_fits["output"] == "the screen\n[image: image/jpeg, 12 KB, not kept in the session journal]"
    none_fit = json.loads(event_json(event, limit=2000))
    assert "images" not in none_fit and none_fit["output"].count("not kept in the session journal") == 2
    # What is read back is a valid conversation: the notes, no images.
    point = resume_point([ToolCallEvent(turn=1, id="c1", name="shot", arguments={}), none_fit])
    [result] = [m for m in point.messages if isinstance(m, ToolResultMessage)]
    assert result.images == [] and result.content == none_fit["output"]


def test_a_resumed_result_whose_image_was_damaged_keeps_the_rest_and_says_so() -> None:
    recorded = {"type": "tool_result", "turn": 1, "id": "c1", "name": "shot", "ok": True, "output": "the screen",
                "images": [{"media_type": "image/png", "data": PNG}, {"media_type": "image/png", "data": PNG[:-3] + "\n[... cut]"}]}
    point = resume_point([ToolCallEvent(turn=1, id="c1", name="shot", arguments={}), recorded])
    [result] = [m for m in point.messages if isinstance(m, ToolResultMessage)]
    assert result.images == [ImageBlock(media_type="image/png", data=PNG)]
    assert result.content == "the screen\n[image dropped: image/png is not base64 text]"


async def test_the_tui_transcript_shows_a_line_for_each_image(tmp_path: Path) -> None:
    from test_tui import TuiRig, started

    workspace, home = tmp_path / "ws", tmp_path / "home"
    workspace.mkdir()
    home.mkdir()
    app = TuiRig(workspace, home, [], policy="never").app()
    images = [{"media_type": "image/png", "data": BIG_PNG}, {"media_type": "image/webp", "data": PNG}]
    async with app.run_test(size=(120, 40)) as pilot:
        await started(pilot, app)
        app.presenter.present(ToolCallEvent(turn=1, id="c1", name="shot", arguments={}))
        app.presenter.present(ToolResultEvent(turn=1, id="c1", name="shot", ok=True, output="the screen", images=images))
        await pilot.pause()
        exported = app.transcript.to_markdown()
    assert "the screen\n[image: image/png, 12 KB]\n[image: image/webp, 1 KB]" in exported
    assert PNG[:40] not in exported and BIG_PNG[:40] not in exported
    assert image_lines(ToolResultEvent(turn=1, id="c1", name="shot", ok=True, output="")) == ""


# ------------------------------------------------------------------ images per request


def numbered(n: int) -> ImageBlock:
    """A small PNG that is told apart from the others by its width."""
    return ImageBlock(media_type="image/png", data=base64.b64encode(png(width=n + 1)).decode())


def image_results(images: list[ImageBlock]) -> list[Any]:
    """A conversation of one call per image, each result returning its image."""
    messages: list[Any] = [UserMessage(content="go")]
    for n, image in enumerate(images):
        messages += [AssistantMessage(tool_calls=[ToolCall(id=f"c{n}", name="shot")]),
                     ToolResultMessage(tool_call_id=f"c{n}", name="shot", content=f"shot {n}", images=[image])]
    return messages


def sent_images(body: dict[str, Any]) -> list[str]:
    """The base64 text of each image a request carries, in order."""
    found = []
    for m in body["messages"]:
        for part in m["content"] if isinstance(m["content"], list) else []:
            if part.get("type") == "image_url":
                found.append(part["image_url"]["url"].split(",", 1)[1])
            for block in part.get("content") if part.get("type") == "tool_result" and isinstance(part.get("content"), list) else []:
                if block.get("type") == "image":
                    found.append(block["source"]["data"])
    return found


def test_a_request_holds_back_the_oldest_images_in_steps_and_within_its_bound() -> None:
    assert (MAX_REQUEST_IMAGES, MAX_REQUEST_BASE64) == (20, 20 * 1024 * 1024)
    for count, held in ((20, 0), (21, 10), (30, 10), (31, 20), (45, 30)):
        messages = image_results([numbered(n) for n in range(count)])
        places = [(i, 0) for i, m in enumerate(messages) if isinstance(m, ToolResultMessage)]
        assert held_images(messages) == dict.fromkeys(places[:held], NOT_SENT_AGAIN), count
    # Images as large as one may be: four fill a request's bound, so the older two are held back.
    largest = ImageBlock(media_type="image/png", data=base64.b64encode(png() + b"\x00" * (MAX_IMAGE_BYTES - len(png()))).decode())
    messages = image_results([largest] * 6)
    assert sorted(held_images(messages)) == [(2, 0), (4, 0)]
    two = [ToolResultMessage(tool_call_id="c", name="t", content="", images=[largest] * 5), UserMessage(content="x")]
    assert sorted(held_images(two)) == [(0, 0)]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_provider_sends_the_most_recent_images_and_notes_for_the_older(dialect: str) -> None:
    kind = OpenAIProvider if dialect == "openai" else AnthropicProvider
    provider = kind(httpx.AsyncClient(), "m", "http://127.0.0.1:9/v1", None)
    images = [numbered(n) for n in range(26)]
    body = provider.body(ModelRequest(system="s", messages=image_results(images), tools=[]))
    assert sent_images(body) == [i.data for i in images[10:]]
    text = json.dumps(body)
    assert text.count(NOT_SENT_AGAIN) == 10 and images[0].data not in text
    assert f"[image: image/png, 1 KB, {NOT_SENT_AGAIN}]" in text
    # Eight images as large as one may be, as two results return them: the last four are sent.
    largest = [ImageBlock(media_type="image/png", data=base64.b64encode(png(width=n + 1) + b"\x00" * (MAX_IMAGE_BYTES - 200)).decode())
               for n in range(8)]
    messages: list[Any] = [UserMessage(content="go"), AssistantMessage(tool_calls=[ToolCall(id="a", name="shot"), ToolCall(id="b", name="shot")]),
                           ToolResultMessage(tool_call_id="a", name="shot", content="", images=largest[:4]),
                           ToolResultMessage(tool_call_id="b", name="shot", content="", images=largest[4:])]
    body = provider.body(ModelRequest(system="s", messages=messages, tools=[]))
    assert sent_images(body) == [i.data for i in largest[4:]]
    assert len(json.dumps(body)) < MAX_REQUEST_BASE64 + 10_000


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_long_session_of_image_results_keeps_its_requests_bounded_and_so_does_its_resume(harness: Harness, dialect: str) -> None:
    path = journal_path(harness.home)
    images = [numbered(n) for n in range(26)]
    shots = iter(range(13))

    async def run(call: Invocation, ctx: ToolContext) -> ToolOutcome:
        n = next(shots)
        return ToolOutcome(f"shot {n}", images=images[2 * n:2 * n + 2])

    tools = [Tool("shot", "Returns two pictures.", {"type": "object", "properties": {"n": {"type": "integer"}}}, run=run, read_only=True)]
    script = [Reply.tool_call("shot", {"n": n}, id=f"c{n}") for n in range(13)] + [Reply.text("I saw them all.")]
    with ModelServer(script) as server:
        session = await run_session(harness, server, dialect, tools, journal=Journal(path))
        bodies = [r.body for r in server.requests]
    assert [len(sent_images(b)) for b in bodies] == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 12, 14, 16]
    assert sent_images(bodies[-1]) == [i.data for i in images[10:]]

    point = resume_point(read_events(path, session.session_id))
    with ModelServer([Reply.text("Still there.")]) as server:
        session = Session(options(harness, server, dialect, resume=point), emit=harness.events.append)
        async with session:
            assert (await session.submit("And now?")).outcome == "Completed"
        server.assert_clean()
        again = server.requests[0].body
    assert sent_images(again) == [i.data for i in images[10:]]
    assert json.dumps(again).count(NOT_SENT_AGAIN) == 10
