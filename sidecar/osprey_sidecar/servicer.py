"""The gRPC servicer: turns ToolService requests into tool calls and tool failures into statuses."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from . import errors as E
from ._proto import tools_pb2 as pb
from ._proto import tools_pb2_grpc as pb_grpc
from .errors import ToolFailure
from .files import edit_file, list_directory, read_file, tree, write_file
from .paths import Roots, cut
from .search import SEARCH_BUDGET_S, find_files, grep
from .shell import BashRun, Exit
from .strays import reap_strays

log = logging.getLogger("osprey_sidecar")

CATEGORY_KEY = "osprey-error-category"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

_CODES = {
    E.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    E.OUTSIDE_ROOT: grpc.StatusCode.PERMISSION_DENIED,
    E.PERMISSION_DENIED: grpc.StatusCode.PERMISSION_DENIED,
    E.INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
    E.UNAUTHENTICATED: grpc.StatusCode.UNAUTHENTICATED,
}

_KINDS = {
    "file": pb.DirEntry.FILE,
    "directory": pb.DirEntry.DIRECTORY,
    "symlink": pb.DirEntry.SYMLINK,
    "other": pb.DirEntry.OTHER,
}

F = TypeVar("F", bound=Callable[..., Any])


def _abort(context: grpc.ServicerContext, category: str, message: str) -> None:
    context.set_trailing_metadata(((CATEGORY_KEY, category),))
    context.abort(_CODES.get(category, grpc.StatusCode.FAILED_PRECONDITION), message)


def _mapped(method: F) -> F:
    """Report ToolFailure (and any crash) as a status carrying its category."""

    @functools.wraps(method)
    def wrapper(self: "ToolServicer", request: Any, context: grpc.ServicerContext) -> Any:
        self.calls.enter()
        try:
            return method(self, request, context)
        except ToolFailure as exc:
            _abort(context, exc.category, exc.message)
        except Exception as exc:  # noqa: BLE001 - reported to the caller, not swallowed
            log.exception("tool crashed")
            context.set_trailing_metadata(((CATEGORY_KEY, "internal"),))
            context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {cut(str(exc))}")
        finally:
            self.calls.leave()

    return wrapper  # type: ignore[return-value]


def _cancelled(context: grpc.ServicerContext) -> threading.Event:
    """Set when the call ends early (the client's deadline passed, or it went away), so a
    search stops then instead of at its budget."""
    event = threading.Event()
    context.add_callback(event.set)
    return event


class _ActiveCalls:
    """How many calls are being served; stray processes are reaped only between calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

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
            return reap_strays() if self.count == 1 else 0


class ToolServicer(pb_grpc.ToolServiceServicer):
    """The eight sandboxed tools over one set of allowed roots."""

    def __init__(self, roots: Roots, env: dict[str, str] | None = None, *, reap_strays: bool = False, search_budget_s: float = SEARCH_BUDGET_S) -> None:
        self.roots = roots
        # The environment commands run with; None means this process's own.
        self.env = env
        # In a lane: after a command, kill whatever it left running outside its process group.
        self.reap_strays = reap_strays
        self.calls = _ActiveCalls()
        # grep and find_files run without approval: each gets this long, then a timeout failure.
        self.search_budget_s = search_budget_s

    @_mapped
    def ReadFile(self, request: pb.ReadFileRequest, context: grpc.ServicerContext) -> pb.ReadFileResponse:
        r = read_file(self.roots, request.path, request.offset, request.limit)
        return pb.ReadFileResponse(
            content=r.content, start_line=r.start_line, end_line=r.end_line, total_lines=r.total_lines,
            more=r.more, long_lines_cut=r.long_lines_cut, resolved_path=r.resolved_path,
        )

    @_mapped
    def WriteFile(self, request: pb.WriteFileRequest, context: grpc.ServicerContext) -> pb.WriteFileResponse:
        r = write_file(self.roots, request.path, request.content)
        return pb.WriteFileResponse(resolved_path=r.resolved_path, bytes_written=r.bytes_written, created=r.created)

    @_mapped
    def EditFile(self, request: pb.EditFileRequest, context: grpc.ServicerContext) -> pb.EditFileResponse:
        r = edit_file(self.roots, request.path, request.old_string, request.new_string, request.replace_all)
        return pb.EditFileResponse(resolved_path=r.resolved_path, replacements=r.replacements, first_line=r.first_line)

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
                if isinstance(event, Exit):
                    strays = self.calls.reap_if_alone() if self.reap_strays else 0
                    yield pb.BashEvent(exit=pb.BashExit(
                        exit_code=event.exit_code, signal=event.signal, timed_out=event.timed_out,
                        tail=event.tail, dropped_bytes=event.dropped_bytes, duration_ms=event.duration_ms,
                        killed_background=event.killed_background or strays > 0,
                    ))
                else:
                    yield pb.BashEvent(output=pb.BashOutput(data=event.data))
        except ToolFailure as exc:
            _abort(context, exc.category, exc.message)
        finally:
            run.cancel()

    @_mapped
    def FindFiles(self, request: pb.FindFilesRequest, context: grpc.ServicerContext) -> pb.FindFilesResponse:
        r = find_files(self.roots, request.pattern, request.path, request.limit, budget_s=self.search_budget_s, cancelled=_cancelled(context))
        return pb.FindFilesResponse(paths=r.paths, truncated=r.truncated, total=r.total)

    @_mapped
    def Grep(self, request: pb.GrepRequest, context: grpc.ServicerContext) -> pb.GrepResponse:
        r = grep(self.roots, request.pattern, request.path, request.glob, request.ignore_case, request.max_matches, budget_s=self.search_budget_s, cancelled=_cancelled(context))
        return pb.GrepResponse(
            matches=[pb.GrepMatch(path=m.path, line=m.line, text=m.text) for m in r.matches],
            truncated=r.truncated, total=r.total, engine=r.engine,
        )

    @_mapped
    def ListDirectory(self, request: pb.ListDirectoryRequest, context: grpc.ServicerContext) -> pb.ListDirectoryResponse:
        r = list_directory(self.roots, request.path)
        return pb.ListDirectoryResponse(
            resolved_path=r.resolved_path,
            entries=[pb.DirEntry(name=e.name, kind=_KINDS[e.kind], size=e.size) for e in r.entries],
        )

    @_mapped
    def Tree(self, request: pb.TreeRequest, context: grpc.ServicerContext) -> pb.TreeResponse:
        r = tree(self.roots, request.path, request.max_depth, request.max_entries)
        return pb.TreeResponse(rendered=r.rendered, directories=r.directories, files=r.files, truncated=r.truncated)
