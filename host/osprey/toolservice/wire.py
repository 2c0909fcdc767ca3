"""The ToolService's results as the broker sees them: pydantic models read from the protobuf
messages, in this one place.

The proto is the one definition of every result. The sidecar's tools build those messages
themselves (no result type between a tool and the wire), and each model here is a typed view
of one message: it names its message (`wire_message`), pydantic reads the message's fields by
name (`from_attributes`, inside pydantic-core, so there is no per-field Python copy), and a
model whose fields differ from its message's fails when this module is imported. The models are
declared rather than built from the descriptors at run time so that callers and type checkers
see real attributes; the import-time check keeps the two from drifting apart.

Only this module and `client.py` (requests, the stub) import the generated code on the host.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, ClassVar, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict

from osprey.errors import ToolError
from osprey_sidecar._proto import tools_pb2 as pb

__all__ = [
    "BashResult", "CapturedOutput", "DirEntry", "EditFileResult", "ExecResult", "FindFilesResult", "GrepMatch",
    "GrepResult", "ListDirectoryResult", "ProgramEvent", "ProgramExit", "ProgramStarted", "ReadFileResult", "TreeResult", "WireModel",
    "WriteFileResult", "dropped_marker",
]


def dropped_marker(count: int) -> str:
    """What stands between the head and the tail of an output that was over its budget."""
    return f"\n[... {count} bytes of output dropped ...]\n"


def enum_names(enum: Any) -> BeforeValidator:
    """Validator turning a proto enum's numbers into its value names in lower case (FILE -> "file")."""
    names = {value.number: value.name.lower() for value in enum.DESCRIPTOR.values}
    return BeforeValidator(lambda v: names.get(v, "unknown") if isinstance(v, int) else v)


def _python_type(field: Any) -> type:
    """The type a model gives a scalar field (enums are shown by name, see `enum_names`)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.type == F.TYPE_BYTES:
        return bytes
    if field.cpp_type in (F.CPPTYPE_STRING, F.CPPTYPE_ENUM):
        return str
    if field.cpp_type == F.CPPTYPE_BOOL:
        return bool
    if field.cpp_type in (F.CPPTYPE_DOUBLE, F.CPPTYPE_FLOAT):
        return float
    return int


class WireModel(BaseModel):
    """A typed view of one ToolService message (`wire_message`).

    `wire_omit` names message fields the model leaves out; `wire_extra` names fields the host
    adds (given to `from_wire` as keywords). Everything else must match the message field for
    field, or the class cannot be defined."""

    model_config = ConfigDict(from_attributes=True)

    wire_message: ClassVar[Any] = None
    wire_omit: ClassVar[frozenset[str]] = frozenset()
    wire_extra: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if cls.wire_message is not None:
            problems = wire_mismatches(cls)
            if problems:
                raise TypeError(f"{cls.__name__} does not match {cls.wire_message.DESCRIPTOR.full_name}: {'; '.join(problems)}")

    @classmethod
    def from_wire(cls, message: Any, **extra: Any) -> Self:
        """The model of `message`, with the host's own fields from `extra`."""
        return cls.model_validate(_With(message, extra) if extra else message, from_attributes=True)


class _With:
    """A message's attributes plus a few more, for `from_attributes` validation."""

    def __init__(self, message: Any, extra: dict[str, Any]) -> None:
        self.__dict__.update(extra)
        self._message = message

    def __getattr__(self, name: str) -> Any:
        return getattr(self._message, name)


def wire_mismatches(model: type[WireModel]) -> list[str]:
    """How `model` differs from its message: missing or unknown fields, or fields of another type."""
    descriptor = model.wire_message.DESCRIPTOR
    fields = {f.name: f for f in descriptor.fields if f.name not in model.wire_omit}
    declared = set(model.model_fields) - model.wire_extra
    problems = []
    if missing := sorted(fields.keys() - declared):
        problems.append(f"missing fields {missing}")
    if unknown := sorted(declared - fields.keys()):
        problems.append(f"fields not in the message {unknown}")
    for name in sorted(fields.keys() & declared):
        field = fields[name]
        annotation = model.model_fields[name].annotation
        if field.is_repeated:
            if typing.get_origin(annotation) is not list:
                problems.append(f"{name} is repeated, so it must be a list")
                continue
            [annotation] = typing.get_args(annotation)
        if typing.get_origin(annotation) is Annotated:
            annotation = typing.get_args(annotation)[0]
        if field.message_type is not None:
            nested = getattr(annotation, "wire_message", None)
            if nested is None or nested.DESCRIPTOR is not field.message_type:
                problems.append(f"{name} must be the model of {field.message_type.full_name}")
        elif annotation is not _python_type(field):
            problems.append(f"{name} must be {_python_type(field).__name__}")
    return problems


class ReadFileResult(WireModel):
    wire_message = pb.ReadFileResponse

    content: str
    start_line: int
    end_line: int
    total_lines: int
    more: bool
    long_lines_cut: int
    resolved_path: str
    total_lines_is_lower_bound: bool


class WriteFileResult(WireModel):
    wire_message = pb.WriteFileResponse

    resolved_path: str
    bytes_written: int
    created: bool


class EditFileResult(WireModel):
    wire_message = pb.EditFileResponse

    resolved_path: str
    replacements: int
    first_line: int


class BashResult(WireModel):
    """A finished bash call: its output (head, a dropped marker when over budget, tail) and exit."""

    wire_message = pb.BashExit
    wire_omit = frozenset({"tail"})
    wire_extra = frozenset({"output"})

    output: str
    exit_code: int
    signal: int
    timed_out: bool
    dropped_bytes: int
    duration_ms: int
    killed_background: bool


class FindFilesResult(WireModel):
    wire_message = pb.FindFilesResponse

    paths: list[str]
    truncated: bool
    total: int


class GrepMatch(WireModel):
    wire_message = pb.GrepMatch

    path: str
    line: int
    text: str


class GrepResult(WireModel):
    """A grep answer. The servicer sends the matches as columns (`paths`, `match_paths`,
    `match_lines`, `match_texts`), which `from_wire` joins into `matches`; an answer with
    `matches` filled (an older servicer's) is read as it is."""

    wire_message = pb.GrepResponse
    wire_omit = frozenset({"matches", "paths", "match_paths", "match_lines", "match_texts"})
    wire_extra = frozenset({"matches"})

    matches: list[GrepMatch]
    truncated: bool
    total: int
    engine: str

    @classmethod
    def from_wire(cls, message: Any, **extra: Any) -> Self:
        if message.matches:
            return super().from_wire(message, **extra)
        paths = list(message.paths)
        lines, texts, at = message.match_lines, message.match_texts, message.match_paths
        if not len(at) == len(lines) == len(texts) or (len(at) and not 0 <= min(at) <= max(at) < len(paths)):
            raise ToolError(
                "io_error",
                f"the ToolService's grep answer is malformed ({len(at)} match paths, {len(lines)} lines, {len(texts)} texts, "
                f"{len(paths)} paths); the service may be of another version: restart the session",
            )
        matches = [{"path": paths[i], "line": line, "text": text} for i, line, text in zip(at, lines, texts, strict=True)]
        return cls.model_validate({"matches": matches, "truncated": message.truncated, "total": message.total, "engine": message.engine, **extra})


class DirEntry(WireModel):
    wire_message = pb.DirEntry

    name: str
    kind: Annotated[str, enum_names(pb.DirEntry.Kind)]  # file | directory | symlink | other
    size: int


class ListDirectoryResult(WireModel):
    wire_message = pb.ListDirectoryResponse

    resolved_path: str
    entries: list[DirEntry]


class TreeResult(WireModel):
    wire_message = pb.TreeResponse

    rendered: str
    directories: int
    files: int
    truncated: bool


class CapturedOutput(WireModel):
    """One output stream of a program: `head`, a gap of `dropped_bytes`, `tail`."""

    wire_message = pb.CapturedOutput

    head: bytes
    tail: bytes
    dropped_bytes: int

    def text(self) -> str:
        """The stream as text (invalid UTF-8 replaced), with a marker where bytes were dropped."""
        marker = dropped_marker(self.dropped_bytes).encode() if self.dropped_bytes else b""
        return (self.head + marker + self.tail).decode("utf-8", "replace")


class ExecResult(WireModel):
    """A finished program run from an argv: stdout and stderr apart, and how it ended."""

    wire_message = pb.ExecResponse

    stdout: CapturedOutput
    stderr: CapturedOutput
    exit_code: int
    signal: int
    timed_out: bool
    duration_ms: int
    killed_background: bool


class ProgramStarted(WireModel):
    wire_message = pb.ProgramStarted

    pid: int


class ProgramExit(WireModel):
    """How a program of a Program stream ended: `signal` 0 when it exited with `exit_code`."""

    wire_message = pb.ProgramExit

    exit_code: int
    signal: int
    timed_out: bool


class ProgramEvent(WireModel):
    """One event of a Program stream; `kind` names the field it holds (started, stdout, stderr, exit)."""

    wire_message = pb.ProgramEvent
    wire_extra = frozenset({"kind"})

    kind: str
    started: ProgramStarted
    stdout: bytes
    stderr: bytes
    exit: ProgramExit

    @classmethod
    def read(cls, message: Any) -> ProgramEvent:
        return cls.from_wire(message, kind=message.WhichOneof("kind") or "")
