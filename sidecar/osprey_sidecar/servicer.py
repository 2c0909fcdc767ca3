"""The gRPC servicer: turns ToolService requests into tool calls and tool failures into statuses.

The tools build their proto responses themselves, so a result is defined once, in the proto."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import grpc

from . import errors as E
from ._proto import tools_pb2 as pb
from ._proto import tools_pb2_grpc as pb_grpc
from .errors import ToolFailure
from .files import edit_file, list_directory, read_file, tree, write_file, write_file_chunks
from .paths import Roots, cut
from .program import ProgramRun, ProgramTable
from .search import SEARCH_BUDGET_S, find_files, grep
from .shell import BashRun, ExecRun
from .strays import reap_strays
from .wire import CATEGORY_KEY, MAX_MESSAGE_BYTES, READ_FILES_MAX_ITEMS, WRITE_MAX_BYTES

log = logging.getLogger("osprey_sidecar")

_CODES = {
    E.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    E.OUTSIDE_ROOT: grpc.StatusCode.PERMISSION_DENIED,
    E.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    E.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    E.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
}

F = TypeVar("F", bound=Callable[..., Any])


# The longest a read, listing or tree waits for its turn before it runs beside the one before it.
FILE_WORK_WAIT_S = 1.0

# ReadFiles: the most reads in one request, and the most bytes of results in one answer (the
# message limit, less room for the items' framing); an answer stops before the result that
# would pass it, and the client asks again for the rest.
READ_FILES_MAX_BYTES = MAX_MESSAGE_BYTES - 64 * 1024


def _status(exc: Exception) -> tuple[grpc.StatusCode, str, str]:
    """(status code, category, message) a call that raised `exc` ends with."""
    if isinstance(exc, ToolFailure):
        return _CODES.get(exc.category, grpc.StatusCode.FAILED_PRECONDITION), exc.category, exc.message
    log.error("tool crashed", exc_info=exc)
    return grpc.StatusCode.INTERNAL, "internal", f"{type(exc).__name__}: {cut(str(exc))}"


def _abort(context: grpc.ServicerContext, category: str, message: str) -> None:
    context.set_trailing_metadata(((CATEGORY_KEY, category),))
    context.abort(_CODES.get(category, grpc.StatusCode.FAILED_PRECONDITION), message)


def _mapped(method: F) -> F:
    """Report ToolFailure (and any crash) as a status carrying its category."""

    @functools.wraps(method)
    def wrapper(self: ToolServicer, request: Any, context: grpc.ServicerContext) -> Any:
        self.calls.enter()
        try:
            return method(self, request, context)
        except Exception as exc:  # noqa: BLE001 - reported to the caller, not swallowed
            code, category, message = _status(exc)
            context.set_trailing_metadata(((CATEGORY_KEY, category),))
            context.abort(code, message)
        finally:
            self.calls.leave()

    return wrapper  # type: ignore[return-value]


class WriteChunk:
    """One WriteFileChunk as `parse_write_chunk` reads it: `data` is a view into the received
    message, not a copy of it."""

    __slots__ = ("path", "data", "last")

    def __init__(self, path: str, data: memoryview, last: bool) -> None:
        self.path = path
        self.data = data
        self.last = last


def _varint(view: memoryview, at: int) -> tuple[int, int]:
    """The varint at `at` and the offset after it."""
    value = shift = 0
    while True:
        if at >= len(view) or shift > 63:
            raise ValueError("a WriteFileChunk holds a cut or overlong varint")
        byte = view[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _skip(view: memoryview, at: int, kind: int, field: int, depth: int = 0) -> int:
    """The offset after the value of an unknown field (groups included) that starts at `at`."""
    if kind == 0:
        return _varint(view, at)[1]
    if kind == 1:
        at += 8
    elif kind == 5:
        at += 4
    elif kind == 2:
        size, at = _varint(view, at)
        at += size
    elif kind == 3 and depth < _MAX_GROUP_DEPTH:
        while True:
            key, at = _varint(view, at)
            if key & 7 == 4:
                if key >> 3 != field:
                    raise ValueError("a WriteFileChunk closes a group it did not open")
                return at
            if key >> 3 > _MAX_FIELD_NUMBER:  # (the generated parser lets field 0 pass inside a group)
                raise ValueError(f"a WriteFileChunk holds field number {key >> 3}")
            at = _skip(view, at, key & 7, key >> 3, depth + 1)
    else:
        raise ValueError(f"a WriteFileChunk holds wire type {kind} where it cannot be")
    if at > len(view):
        raise ValueError("a WriteFileChunk ends inside a field")
    return at


_MAX_GROUP_DEPTH = 100
_MAX_FIELD_NUMBER = 2**29 - 1


def parse_write_chunk(raw: bytes) -> WriteChunk:
    """WriteFileChunk from its wire bytes, as the generated parser reads it (the last
    occurrence of a field wins, unknown fields are skipped, a path must be UTF-8), but its data
    left in place: the generated parser copies a chunk's data twice (into the message, then
    out of it again), about a third of a large write's time in this process."""
    view = memoryview(raw)
    end = len(view)
    path, data, last = "", view[0:0], False
    at = 0
    while at < end:
        key, at = _varint(view, at)
        field, kind = key >> 3, key & 7
        if not 0 < field <= _MAX_FIELD_NUMBER:
            raise ValueError(f"a WriteFileChunk holds field number {field}")
        if field == 3 and kind == 0:
            value, at = _varint(view, at)
            last = value != 0
        elif field in (1, 2) and kind == 2:
            size, at = _varint(view, at)
            if size > end - at:
                raise ValueError("a WriteFileChunk field runs past the end of the message")
            piece = view[at : at + size]
            at += size
            if field == 1:
                path = str(piece, "utf-8")
            else:
                data = piece
        else:
            at = _skip(view, at, kind, field)
    return WriteChunk(path, data, last)


def _cancelled(context: grpc.ServicerContext) -> threading.Event:
    """Set when the call ends early (the client's deadline passed, or it went away), so a
    search stops then instead of at its budget."""
    event = threading.Event()
    context.add_callback(event.set)
    return event


class _ActiveCalls:
    """How many calls are being served; stray processes are reaped only between calls."""

    def __init__(self, programs: ProgramTable | None = None) -> None:
        self._lock = threading.Lock()
        self.count = 0
        # Running programs' process groups are no strays.
        self.programs = programs

    def enter(self) -> None:
        with self._lock:
            self.count += 1

    def leave(self) -> None:
        with self._lock:
            self.count -= 1

    def reap_if_alone(self) -> int:
        """From inside a call: kill stray processes unless another call is running (whose
        commands they could be). Calls starting meanwhile wait for the lock."""
        with self._lock:
            if self.count != 1:
                return 0
            return reap_strays(self.programs.groups() if self.programs is not None else ())


class ToolServicer(pb_grpc.ToolServiceServicer):
    """The eight sandboxed tools, and `Exec` for programs run from an argv, over one set of allowed roots."""

    def __init__(self, roots: Roots, env: dict[str, str] | None = None, *, reap_strays: bool = False, search_budget_s: float = SEARCH_BUDGET_S) -> None:
        self.roots = roots
        # The environment commands run with; None means this process's own.
        self.env = env
        # In a lane: after a command, kill whatever it left running outside its process group.
        self.reap_strays = reap_strays
        # Programs of Program streams: bounded in number, each ended with its stream.
        self.programs = ProgramTable()
        self.calls = _ActiveCalls(self.programs)
        # grep and find_files run without approval: each gets this long, then a timeout failure.
        self.search_budget_s = search_budget_s
        # Reads, listings and trees are Python around many short system calls, each of which lets
        # go of the interpreter lock: run at once in several workers, they pass it to each other at
        # every call, and sixteen listings at once cost twice the CPU of sixteen one by one. They
        # take turns instead (see `_turn`); their RPCs' own work still overlaps.
        self._file_work = threading.Lock()

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """Run a read, listing or tree when the one before it is done, or after FILE_WORK_WAIT_S
        at the latest: one stuck on a hung filesystem does not hold up the others."""
        taken = self._file_work.acquire(timeout=FILE_WORK_WAIT_S)
        try:
            yield
        finally:
            if taken:
                self._file_work.release()

    @_mapped
    def ReadFile(self, request: pb.ReadFileRequest, context: grpc.ServicerContext) -> pb.ReadFileResponse:
        with self._turn():
            return read_file(self.roots, request.path, request.offset, request.limit)

    @_mapped
    def ReadFiles(self, request: pb.ReadFilesRequest, context: grpc.ServicerContext) -> pb.ReadFilesResponse:
        """Each read as ReadFile does it, in order, in this one worker: its result, or the status
        ReadFile would have ended with. Stops early when the answer would pass the message limit
        (or the call has ended): the answer then holds the first reads only."""
        return self._batch(request.reads, context, pb.ReadFilesResponse(), pb.ReadFilesItem, "file",
                           lambda read: read_file(self.roots, read.path, read.offset, read.limit), "reading", "read it in parts (offset and limit)")

    def _batch(self, calls: Sequence[Any], context: grpc.ServicerContext, response: Any, item_type: Callable[..., Any], field: str,
               run: Callable[[Any], Any], doing: str, advice: str) -> Any:
        """The calls of a batched call (ReadFiles, ListDirectories, Trees), each run as the call
        alone would be, in order, into `response`: an `item_type` item with its result in `field`,
        or with the status the call alone would have ended with."""
        if len(calls) > READ_FILES_MAX_ITEMS:
            raise ToolFailure(E.INVALID_ARGUMENT, f"a batched call holds {len(calls)} calls; at most {READ_FILES_MAX_ITEMS} are allowed (send the rest in another call)")
        size = 0
        for call in calls:
            try:
                with self._turn():
                    item = item_type(**{field: run(call)})
            except Exception as exc:  # noqa: BLE001 - reported to the caller in its item
                code, category, message = _status(exc)
                item = item_type(error=pb.ReadFileError(code=code.value[0], message=message, category=category))
            item_size = item.ByteSize() + 8  # with the item's tag and length
            if item_size > READ_FILES_MAX_BYTES:  # alone: the call alone could not send it either
                item = item_type(error=pb.ReadFileError(
                    code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], message=f"the result of {doing} {cut(call.path)} is {item_size} bytes, over the "
                    f"{MAX_MESSAGE_BYTES}-byte message limit; {advice}"))
                item_size = item.ByteSize() + 8
            size += item_size
            if response.items and (size > READ_FILES_MAX_BYTES or not context.is_active()):
                break
            response.items.append(item)
        return response

    @_mapped
    def WriteFile(self, request: pb.WriteFileRequest, context: grpc.ServicerContext) -> pb.WriteFileResponse:
        return write_file(self.roots, request.path, request.content)

    @_mapped
    def WriteFileStream(self, request_iterator: Iterator[WriteChunk | pb.WriteFileChunk], context: grpc.ServicerContext) -> pb.WriteFileResponse:
        """The chunks arrive as `WriteChunk`s where the server is built with `build_server` (it
        parses them with `parse_write_chunk`), as generated messages otherwise."""
        first = next(request_iterator, None)

        def chunks() -> Iterator[bytes | memoryview]:
            chunk: WriteChunk | pb.WriteFileChunk | None = first
            while chunk is not None:
                yield chunk.data
                if chunk.last:
                    return
                chunk = next(request_iterator, None)
            raise ToolFailure(E.INVALID_ARGUMENT, "the content stream ended before its last chunk; the file was left as it was")

        try:
            if first is None or not first.path:
                raise ToolFailure(E.INVALID_ARGUMENT, "a streamed write_file must name its path in the first chunk")
            return write_file_chunks(self.roots, first.path, chunks(), max_bytes=WRITE_MAX_BYTES)
        except ToolFailure:
            # Refused early (a directory in the way, over the limit, ...): take in the rest of the
            # stream first, or the client, still sending, sees a failed write, not this status.
            for chunk in request_iterator:
                if chunk.last:
                    break
            raise

    @_mapped
    def EditFile(self, request: pb.EditFileRequest, context: grpc.ServicerContext) -> pb.EditFileResponse:
        return edit_file(self.roots, request.path, request.old_string, request.new_string, request.replace_all)

    def Bash(self, request: pb.BashRequest, context: grpc.ServicerContext) -> Iterator[pb.BashEvent]:
        self.calls.enter()
        try:
            yield from self._bash(request, context)
        finally:
            self.calls.leave()

    def _bash(self, request: pb.BashRequest, context: grpc.ServicerContext) -> Iterator[pb.BashEvent]:
        try:
            run = BashRun(self.roots, request.command, request.timeout_ms, request.workdir, request.max_output_bytes, env=self.env)
        except ToolFailure as exc:
            _abort(context, exc.category, exc.message)
            return
        # Fires when the call ends for any reason, including a client cancel.
        context.add_callback(run.cancel)
        try:
            for event in run.events():
                if event.HasField("exit") and self.reap_strays and self.calls.reap_if_alone():
                    event.exit.killed_background = True
                yield event
        except ToolFailure as exc:
            _abort(context, exc.category, exc.message)
        finally:
            run.cancel()

    @_mapped
    def Exec(self, request: pb.ExecRequest, context: grpc.ServicerContext) -> pb.ExecResponse:
        run = ExecRun(self.roots, request.argv, request.stdin, request.workdir, request.timeout_ms, request.max_output_bytes, env=self.env)
        # Fires when the call ends for any reason, including a client cancel.
        context.add_callback(run.cancel)
        response = run.run()
        if self.reap_strays and self.calls.reap_if_alone():
            response.killed_background = True
        return response

    @_mapped
    def FindFiles(self, request: pb.FindFilesRequest, context: grpc.ServicerContext) -> pb.FindFilesResponse:
        return find_files(self.roots, request.pattern, request.path, request.limit, budget_s=self.search_budget_s, cancelled=_cancelled(context))

    @_mapped
    def Grep(self, request: pb.GrepRequest, context: grpc.ServicerContext) -> pb.GrepResponse:
        return grep(self.roots, request.pattern, request.path, request.glob, request.ignore_case, request.max_matches, budget_s=self.search_budget_s, cancelled=_cancelled(context))

    @_mapped
    def ListDirectory(self, request: pb.ListDirectoryRequest, context: grpc.ServicerContext) -> pb.ListDirectoryResponse:
        with self._turn():
            return list_directory(self.roots, request.path)

    @_mapped
    def ListDirectories(self, request: pb.ListDirectoriesRequest, context: grpc.ServicerContext) -> pb.ListDirectoriesResponse:
        """Each listing as ListDirectory does it, answered as ReadFiles answers its reads."""
        return self._batch(request.calls, context, pb.ListDirectoriesResponse(), pb.ListDirectoriesItem, "listing",
                           lambda call: list_directory(self.roots, call.path), "listing", "list its subdirectories, or find files by pattern")

    @_mapped
    def Tree(self, request: pb.TreeRequest, context: grpc.ServicerContext) -> pb.TreeResponse:
        with self._turn():
            return tree(self.roots, request.path, request.max_depth, request.max_entries)

    @_mapped
    def Trees(self, request: pb.TreesRequest, context: grpc.ServicerContext) -> pb.TreesResponse:
        """Each drawing as Tree does it, answered as ReadFiles answers its reads."""
        return self._batch(request.calls, context, pb.TreesResponse(), pb.TreesItem, "tree",
                           lambda call: tree(self.roots, call.path, call.max_depth, call.max_entries), "drawing", "ask for fewer entries or less depth")

    def Program(self, request_iterator: Iterator[pb.ProgramInput], context: grpc.ServicerContext) -> Iterator[pb.ProgramEvent]:
        """A long-lived program driven both ways (see `program.py`); it holds this worker for
        its life, and its process group dies with the stream."""
        # The start is taken in first, even when it will be refused: a client still writing it
        # when the call ends would see its write fail, not the status saying why.
        first = next(request_iterator, None)
        if first is None or first.WhichOneof("kind") != "start":
            _abort(context, E.INVALID_ARGUMENT, "a Program stream must start with a start input (the argv to run)")
            return
        try:
            self.programs.take_slot()
        except ToolFailure as exc:
            context.set_trailing_metadata(((CATEGORY_KEY, exc.category),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, exc.message)
        try:
            yield from self._program(first, request_iterator, context)
        finally:
            self.programs.give_slot()

    def _program(self, first: pb.ProgramInput, request_iterator: Iterator[pb.ProgramInput], context: grpc.ServicerContext) -> Iterator[pb.ProgramEvent]:
        # Counted as a call while it starts, so no stray reaping kills it before it is known.
        self.calls.enter()
        try:
            run = ProgramRun(self.roots, first.start, self.env)
        except ToolFailure as exc:
            self.calls.leave()
            _abort(context, exc.category, exc.message)
            return
        except BaseException:
            self.calls.leave()
            raise
        # Fires when the call ends for any reason: the client's close or cancel, its deadline,
        # the connection dropping, the server stopping.
        context.add_callback(lambda: threading.Thread(target=run.end, name="osprey-program-end", daemon=True).start())
        events = run.events(request_iterator)
        try:
            try:
                started = next(events)
            finally:
                self.programs.add(run)  # (its group is known, or it never started)
                self.calls.leave()
            yield started
            yield from events
        except ToolFailure as exc:
            _abort(context, exc.category, exc.message)
        finally:
            events.close()
            run.end()
            self.programs.discard(run)
