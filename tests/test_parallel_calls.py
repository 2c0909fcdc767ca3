"""Read-only calls of one turn run at the same time, end to end: the broker's batch, the client's
channel and the server's worker pool; a turn's read_file, list_directory and tree calls reach
the service together, as one ReadFiles, ListDirectories or Trees call.

A real gRPC server on a loopback unix socket (the sidecar's `build_server`, in this process,
with a servicer whose FindFiles waits at a barrier), the real client, and the real session
against the loopback model server. No bound here is a wall-clock time a loaded machine could
miss: the calls meet at a barrier that only calls running at the same time can pass.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from osprey.config import load_settings
from osprey.events import Event, ToolResultEvent
from osprey.session.core import Session, SessionOptions
from osprey.testing.model_server import ModelServer, Reply, ToolCall
from osprey.toolservice.homes import AttachedLane
from osprey_sidecar import server as sidecar_server
from osprey_sidecar.servicer import ToolServicer

CALLS = 16
# Only a hang reaches this: how long a call waits at the barrier for the others.
BARRIER_TIMEOUT_S = 30.0


def small_files(workspace: Path, count: int) -> None:
    for i in range(count):
        (workspace / f"f{i}.txt").write_text("".join(f"line {j} of file {i}\n" for j in range(20)))
        (workspace / f"d{i}").mkdir()


async def one_turn(tmp_path: Path, workspace: Path, calls: list[ToolCall], servicer: type[ToolServicer], monkeypatch: pytest.MonkeyPatch) -> list[ToolResultEvent]:
    """The results of a session's turn whose model asks for `calls`, served by `servicer`."""
    monkeypatch.setattr(sidecar_server, "ToolServicer", servicer)
    socket_path = str(tmp_path / "tools.sock")
    server = sidecar_server.build_server([str(workspace)], socket_path)
    results: list[ToolResultEvent] = []

    def emit(event: Event) -> None:
        if isinstance(event, ToolResultEvent):
            results.append(event)

    try:
        with ModelServer([Reply.tool_calls(calls), Reply.text("done")]) as model:
            flags = {"provider": "openai", "model": "test-model", "base_url": model.base_url, "approval_policy": "never"}
            settings = load_settings(workspace, flags, {"OSPREY_HOME": str(tmp_path / "home"), "OPENAI_API_KEY": "test"})
            async with AttachedLane([str(workspace)], socket_path) as home:
                session = Session(SessionOptions(settings=settings), emit=emit, home=home)
                await session.start()
                try:
                    end = await session.submit("Look at the sixteen of them.")
                finally:
                    await session.close()
    finally:
        server.stop(0)
    assert end.outcome == "Completed", end.error
    assert [r.ok for r in results] == [True] * len(calls), [r.output for r in results if not r.ok]
    assert len({r.id for r in results}) == len(calls)
    return results


async def test_a_turns_read_only_calls_meet_at_a_barrier_only_concurrent_calls_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    small_files(workspace, CALLS)
    barrier = threading.Barrier(CALLS, timeout=BARRIER_TIMEOUT_S)
    passed: list[int] = []

    class MeetingServicer(ToolServicer):
        def FindFiles(self, request: Any, context: Any) -> Any:
            passed.append(barrier.wait())  # BrokenBarrierError (a failed call) unless all 16 run at once
            return super().FindFiles(request, context)

    await one_turn(tmp_path, workspace, [ToolCall("find_files", {"pattern": f"f{i}.txt"}) for i in range(CALLS)], MeetingServicer, monkeypatch)
    assert sorted(passed) == list(range(CALLS))


async def test_a_turns_read_file_calls_reach_the_service_as_one_readfiles_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reads arrive together only if the broker made them in the same event-loop iteration."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    small_files(workspace, CALLS)
    received: list[tuple[str, int]] = []

    class CountingServicer(ToolServicer):
        def ReadFile(self, request: Any, context: Any) -> Any:
            received.append(("ReadFile", 1))
            return super().ReadFile(request, context)

        def ReadFiles(self, request: Any, context: Any) -> Any:
            received.append(("ReadFiles", len(request.reads)))
            return super().ReadFiles(request, context)

    results = await one_turn(tmp_path, workspace, [ToolCall("read_file", {"path": f"f{i}.txt"}) for i in range(CALLS)], CountingServicer, monkeypatch)
    assert received == [("ReadFiles", CALLS)]
    shown = [i for r in results for i in range(CALLS) if f"line 19 of file {i}\n" in r.output + "\n"]
    assert sorted(shown) == list(range(CALLS))  # each call its own file's lines


async def test_a_turns_listings_and_trees_reach_the_service_as_one_call_of_each_kind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    small_files(workspace, CALLS)
    for i in range(CALLS):
        (workspace / f"d{i}" / f"only-in-d{i}.txt").write_text("x\n")
    received: list[tuple[str, int]] = []

    class CountingServicer(ToolServicer):
        def ListDirectory(self, request: Any, context: Any) -> Any:
            received.append(("ListDirectory", 1))
            return super().ListDirectory(request, context)

        def ListDirectories(self, request: Any, context: Any) -> Any:
            received.append(("ListDirectories", len(request.calls)))
            return super().ListDirectories(request, context)

        def Tree(self, request: Any, context: Any) -> Any:
            received.append(("Tree", 1))
            return super().Tree(request, context)

        def Trees(self, request: Any, context: Any) -> Any:
            received.append(("Trees", len(request.calls)))
            return super().Trees(request, context)

    calls = [ToolCall("list_directory", {"path": f"d{i}"}) for i in range(CALLS)] + [ToolCall("tree", {"path": f"d{i}"}) for i in range(CALLS)]
    results = await one_turn(tmp_path, workspace, calls, CountingServicer, monkeypatch)
    assert sorted(received) == [("ListDirectories", CALLS), ("Trees", CALLS)]
    shown = [i for r in results for i in range(CALLS) if f"only-in-d{i}.txt" in r.output]
    assert shown == list(range(CALLS)) * 2  # each call its own directory, in the model's order
