"""The one internal model of a conversation that every provider maps to and from."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Each model builds its validator at its first use, not at import.
_LAZY = ConfigDict(defer_build=True)


class Usage(BaseModel):
    """Tokens used by one model turn (or summed over a session)."""

    model_config = _LAZY

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{k: getattr(self, k) + getattr(other, k) for k in Usage.model_fields})


class ToolCall(BaseModel):
    model_config = _LAZY

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Set when the model's arguments were not a JSON object; the call then fails cleanly.
    arguments_error: str | None = None


class UserMessage(BaseModel):
    model_config = _LAZY

    role: Literal["user"] = "user"
    content: str


class AssistantMessage(BaseModel):
    model_config = _LAZY

    role: Literal["assistant"] = "assistant"
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    # Provider-specific blocks that must be sent back verbatim (e.g. Anthropic thinking).
    reasoning: list[dict[str, Any]] = Field(default_factory=list)


ImageType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
IMAGE_TYPES: tuple[str, ...] = get_args(ImageType)
# An image is bounded by the length of its base64 text (what the Anthropic API bounds), 5 MiB,
# which holds 3.75 MiB of bytes.
MAX_IMAGE_BASE64 = 5 * 1024 * 1024
MAX_IMAGE_BYTES = MAX_IMAGE_BASE64 // 4 * 3
MAX_IMAGES = 8  # of one tool result
# What one request to a model carries: the most recent images of the conversation, at most this
# many and this much base64 text; older ones stand as notes.
MAX_REQUEST_IMAGES = 20
MAX_REQUEST_BASE64 = 20 * 1024 * 1024
# Past the count bound, older images are left out in steps of this many, so that the start of
# a request (which providers cache) changes once every few images rather than with each one.
REQUEST_IMAGES_STEP = 10
_TYPE_ALIASES = {"image/jpg": "image/jpeg"}
# Why a result's image stands as a note for a model that takes no images.
NOT_SHOWN = "not shown: the model takes no images"
# Why an older image of the conversation stands as a note in a request.
NOT_SENT_AGAIN = f"not sent again: a request carries only the most recent images (at most {MAX_REQUEST_IMAGES}, {MAX_REQUEST_BASE64 // (1024 * 1024)} MiB)"
_NOT_AN_IMAGE = "is not a PNG, JPEG, GIF or WebP image"


def _sniffed(data: str) -> str | None:
    """The media type the first bytes of an image's base64 text show, or None."""
    try:
        head = base64.b64decode(data[:16], validate=True)
    except (binascii.Error, ValueError):
        return None
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def _data_problem(data: str) -> str | None:
    """What is wrong with an image's base64 text, or None."""
    if not data:
        return "holds no data"
    if len(data) > MAX_IMAGE_BASE64:
        return f"is over {MAX_IMAGE_BYTES / (1024 * 1024):g} MiB ({_size(_base64_bytes(data))})"
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return "is not base64 text"
    if _sniffed(data) is None:
        return _NOT_AN_IMAGE
    return None


def _size(size: int) -> str:
    return f"{max(1, round(size / 1024)):,} KB" if size < 1024 * 1024 else f"{size / (1024 * 1024):.1f} MiB"


def _base64_bytes(data: str) -> int:
    return len(data) * 3 // 4 - data[-2:].count("=")


def image_note(media_type: str, size: int, why: str = "") -> str:
    """How an image stands in a text: `[image: image/png, 12 KB]`, with `why` after."""
    return f"[image: {_shown(media_type)}, {_size(size)}{', ' + why if why else ''}]"


def _shown(media_type: str) -> str:
    """A media type from elsewhere, safe to put in a line of text."""
    cleaned = "".join(c for c in str(media_type)[:100] if c.isprintable() and not c.isspace())
    return cleaned[:60] or "(no type)"


class ImageBlock(BaseModel):
    """An image a tool returned: its media type and its bytes as base64 text, bounded by
    MAX_IMAGE_BASE64. The type is the one the bytes show, whatever was declared. A tool builds
    one from what it received with `image_or_note`."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    media_type: ImageType
    data: str

    @model_validator(mode="before")
    @classmethod
    def _typed_by_its_bytes(cls, values: Any) -> Any:
        if isinstance(values, dict) and values.get("media_type") in IMAGE_TYPES and isinstance(values.get("data"), str):
            shown = _sniffed(values["data"])
            if shown is not None and shown != values["media_type"]:
                return {**values, "media_type": shown}
        return values

    @field_validator("data")
    @classmethod
    def _bounded(cls, data: str) -> str:
        problem = _data_problem(data)
        if problem is not None:
            raise ValueError(f"the image {problem}")
        return data

    @property
    def size(self) -> int:
        """The image's size in bytes."""
        return _base64_bytes(self.data)

    def note(self, why: str = "") -> str:
        return image_note(self.media_type, self.size, why)


def image_or_note(media_type: str, data: str | bytes) -> ImageBlock | str:
    """An image from a tool's source (bytes, or base64 text, which may be wrapped over lines), or
    the one-line note that says why it is dropped: `[image dropped: image/tiff is not supported]`.
    Its type is the one its bytes show; bytes of no supported type are dropped."""
    kind = str(media_type).strip().lower()
    kind = _TYPE_ALIASES.get(kind, kind)
    if kind not in IMAGE_TYPES:
        return f"[image dropped: {_shown(media_type)} is not supported]"
    if isinstance(data, bytes):
        if 4 * -(-len(data) // 3) > MAX_IMAGE_BASE64:
            return f"[image dropped: {kind} is over {MAX_IMAGE_BYTES / (1024 * 1024):g} MiB ({_size(len(data))})]"
        data = base64.b64encode(data).decode("ascii")
    elif len(data) <= MAX_IMAGE_BASE64 + MAX_IMAGE_BASE64 // 38:  # room for a line break every 76 characters
        data = "".join(data.split())
    problem = _data_problem(data)
    if problem is not None:
        return f"[image dropped: {kind} {problem}]"
    shown = cast(ImageType, _sniffed(data))  # a supported type: checked above
    return ImageBlock.model_construct(media_type=shown, data=data)  # checked above


def kept_images(images: Iterable[Any]) -> tuple[list[ImageBlock], str]:
    """The images of a tool result that may go to a model (valid ones, at most MAX_IMAGES), and
    the notes, one line each, for those dropped. Takes ImageBlocks (checked again: one may have
    been built without its checks) or their recorded form (dicts)."""
    kept: list[ImageBlock] = []
    notes: list[str] = []
    for n, item in enumerate(images):
        if n >= 4 * MAX_IMAGES:
            notes.append("[images dropped: too many]")
            break
        raw = item.model_dump() if isinstance(item, ImageBlock) else item
        data = raw.get("data") if isinstance(raw, dict) else None
        block = image_or_note(str(raw.get("media_type", "")), data) if isinstance(raw, dict) and isinstance(data, str) else "[image dropped: not an image]"
        if isinstance(block, str):
            notes.append(block)
        elif len(kept) >= MAX_IMAGES:
            notes.append(f"[image dropped: a result holds at most {MAX_IMAGES} images]")
        else:
            kept.append(block)
    return kept, "".join(f"\n{note}" for note in notes)


def recorded_image_notes(images: Any, why: str = "") -> list[str]:
    """A note for each image of a recorded result (`[image: image/png, 12 KB]`), without reading
    its data; what is not an image is passed over."""
    if not isinstance(images, list):
        return []
    notes = []
    for item in images[:MAX_IMAGES * 4]:
        raw = item.model_dump() if isinstance(item, ImageBlock) else item
        if isinstance(raw, dict) and isinstance(raw.get("data"), str):
            notes.append(image_note(str(raw.get("media_type", "")), _base64_bytes(raw["data"]), why))
    return notes


class ToolResultMessage(BaseModel):
    model_config = _LAZY

    role: Literal["tool"] = "tool"
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False
    # Images the tool returned; a provider sends them where its model takes them.
    images: list[ImageBlock] = Field(default_factory=list, max_length=MAX_IMAGES)

    def image_notes(self, why: str = "") -> str:
        """The result's images as notes, one line each, to follow its text."""
        return "".join(f"\n{image.note(why)}" for image in self.images)


Message = Annotated[UserMessage | AssistantMessage | ToolResultMessage, Field(discriminator="role")]


def held_images(messages: Sequence[Message]) -> dict[tuple[int, int], str]:
    """The images of a request's tool results that are not sent again, as (index of the message,
    index of the image) with why, to stand as notes: all but the most recent MAX_REQUEST_IMAGES
    (older ones left out REQUEST_IMAGES_STEP at a time) within MAX_REQUEST_BASE64 of base64 text."""
    places = [(i, j) for i, m in enumerate(messages) if isinstance(m, ToolResultMessage) for j in range(len(m.images))]
    over = len(places) - MAX_REQUEST_IMAGES
    start = -(-over // REQUEST_IMAGES_STEP) * REQUEST_IMAGES_STEP if over > 0 else 0
    total = 0
    for n in range(len(places) - 1, start - 1, -1):
        i, j = places[n]
        total += len(cast(ToolResultMessage, messages[i]).images[j].data)
        if total > MAX_REQUEST_BASE64:
            start = n + 1
            break
    return dict.fromkeys(places[:start], NOT_SENT_AGAIN)


class ToolSpec(BaseModel):
    """A tool as a model sees it."""

    model_config = _LAZY

    name: str
    description: str
    parameters: dict[str, Any]


class ModelRequest(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    system: str
    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)


class ModelTurn(BaseModel):
    """What one model call produced."""

    model_config = _LAZY

    message: AssistantMessage
    usage: Usage = Field(default_factory=Usage)
    stop_reason: str = ""


COMPACTED_PREFIX = "[The conversation so far was compacted. Summary of it:]\n\n"
COMPACTED_ACK = "Understood. I will go on from this summary."


def compacted(summary: str) -> list[Message]:
    """The conversation that replaces a compacted one: the summary as the user's, and the
    assistant's acknowledgement."""
    return [UserMessage(content=COMPACTED_PREFIX + summary), AssistantMessage(text=COMPACTED_ACK)]


# A JSON string may escape half a surrogate pair ("\\ud83d", half an emoji), which models do
# send; such a str cannot be encoded as UTF-8, so nothing downstream could write it.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub(value: Any) -> Any:
    """`value` (parsed JSON) with every lone surrogate replaced by U+FFFD."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value
