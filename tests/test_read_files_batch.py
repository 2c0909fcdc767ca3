"""read_file calls made together reach the ToolService as one ReadFiles call (list_directory and
tree calls as one ListDirectories or Trees call), and each caller gets what a call of its own
would have given it: its result, or its error mapped the same way.

The servicer here is the real one, served by a real gRPC server on a loopback unix socket in
this process, with an interceptor counting the calls it gets; the homes (the local dispatcher
and a lane) are checked through `ToolClient` only.
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from helpers import CALL_BOUND_S, write

from osprey.errors import DispatcherError, OspreyError, ToolTimeout
from osprey.toolservice.client import ToolClient
from osprey_sidecar import servicer as sidecar_servicer
from osprey_sidecar._proto import tools_pb2_grpc as pb_grpc
from osprey_sidecar.paths import Roots
from osprey_sidecar.servicer import ToolServicer
from osprey_sidecar.wire import CHANNEL_OPTIONS, TOKEN_KEY

CALLS = 16
# Only a hang reaches this.
WAIT_S = 30.0


class Counting(grpc.ServerInterceptor):
    """Counts the calls of each method, and the reads each ReadFiles call holds."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()

    def intercept_service(self, continuation: Callable[[Any], Any], handler_call_details: Any) -> Any:
        self.calls[handler_call_details.method.rsplit("/", 1)[-1]] += 1
        return continuation(handler_call_details)


class Served:
    def __init__(self, server: grpc.Server, socket_path: str, counting: Counting) -> None:
        self.server = server
        self.socket_path = socket_path
        self.counting = counting

    @property
    def calls(self) -> dict[str, int]:
        return {name: n for name, n in self.counting.calls.items() if n}

    def client(self, **kwargs: Any) -> ToolClient:
        return ToolClient.for_socket(self.socket_path, **kwargs)


def serve(tmp_path: Path, servicer: ToolServicer, token: str | None = None) -> Served:
    counting = Counting()
    interceptors: list[grpc.ServerInterceptor] = [counting]
    if token is not None:
        class Token(grpc.ServerInterceptor):
            def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
                if (TOKEN_KEY, token) in tuple(details.invocation_metadata or ()):
                    return continuation(details)
                return grpc.unary_unary_rpc_method_handler(lambda request, context: context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong token"))
        interceptors.append(Token())
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32), interceptors=interceptors, options=list(CHANNEL_OPTIONS))
    pb_grpc.add_ToolServiceServicer_to_server(servicer, server)
    socket_path = str(tmp_path / "tools.sock")
    server.add_insecure_port(f"unix:{socket_path}")
    server.start()
    return Served(server, socket_path, counting)


@pytest.fixture
def files(workspace: Path) -> list[str]:
    for i in range(CALLS):
        write(workspace / f"f{i}.txt", "".join(f"line {j} of file {i}\n" for j in range(20 + i)))
    return [f"f{i}.txt" for i in range(CALLS)]


@pytest.fixture
def served(tmp_path: Path, workspace: Path) -> Iterator[Served]:
    s = serve(tmp_path, ToolServicer(Roots([str(workspace)])))
    yield s
    s.server.stop(0)


@pytest.fixture
async def client(served: Served) -> AsyncIterator[ToolClient]:
    c = served.client()
    yield c
    await c.close()


def failing_reads(workspace: Path) -> dict[str, dict[str, Any]]:
    """Reads that each fail in their own way, by the name of the way."""
    (workspace / "a-directory").mkdir()
    write(workspace / "binary.bin", b"\x00\x01\x02" * 100)
    with open(workspace / "huge-sparse.txt", "wb") as fh:  # 300 MB of zeros (sparse)
        fh.truncate(300 * 1024 * 1024)
    write(workspace.parent / "outside.txt", "secret\n")
    write(workspace / "short.txt", "one\ntwo\n")
    return {
        "missing": {"path": "no-such-file.txt"},
        "outside the roots": {"path": "../outside.txt"},
        "a directory": {"path": "a-directory"},
        "huge, of zeros": {"path": "huge-sparse.txt"},
        "binary": {"path": "binary.bin"},
        "past the end": {"path": "short.txt", "offset": 10},
        "negative limit": {"path": "short.txt", "limit": -1},
    }


def outcome(result: Any) -> tuple[str, Any]:
    """What a caller got: its result, or its error's type, category and message."""
    if isinstance(result, OspreyError):
        return type(result).__name__, (getattr(result, "category", None), str(result))
    assert not isinstance(result, BaseException), repr(result)
    return "result", result.model_dump()


async def singly(client: ToolClient, reads: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    out = []
    for read in reads:
        try:
            out.append(outcome(await asyncio.wait_for(client.read_file(**read), CALL_BOUND_S)))
        except OspreyError as exc:
            out.append(outcome(exc))
    return out


async def together(client: ToolClient, reads: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    results = await asyncio.wait_for(asyncio.gather(*(client.read_file(**read) for read in reads), return_exceptions=True), CALL_BOUND_S)
    return [outcome(r) for r in results]


async def test_reads_made_together_reach_the_service_as_one_readfiles_call(served: Served, client: ToolClient, files: list[str]) -> None:
    reads = [{"path": name} for name in files]
    batched = await together(client, reads)
    assert served.calls == {"ReadFiles": 1}
    alone = await singly(client, reads)
    assert served.calls == {"ReadFiles": 1, "ReadFile": CALLS}  # one at a time: plain ReadFile calls
    assert batched == alone
    assert [r[1]["content"].count("\n") + 1 for r in batched] == [20 + i for i in range(CALLS)]


async def test_each_read_gets_its_own_error_mapped_as_a_single_calls(served: Served, client: ToolClient, workspace: Path, files: list[str]) -> None:
    failing = failing_reads(workspace)
    reads = [{"path": files[0]}, *failing.values(), {"path": files[1], "offset": 3, "limit": 2}]
    batched = await together(client, reads)
    assert served.calls == {"ReadFiles": 1}
    alone = await singly(client, reads)
    assert batched == alone
    categories = dict(zip(failing, [b[1][0] for b in batched[1:-1]], strict=True))
    assert categories == {"missing": "not_found", "outside the roots": "outside_root", "a directory": "is_directory",
                          "huge, of zeros": "binary_file", "binary": "binary_file", "past the end": "invalid_argument",
                          "negative limit": "invalid_argument"}
    assert batched[0][0] == batched[-1][0] == "result"


async def test_a_read_alone_is_a_plain_readfile_call(served: Served, client: ToolClient, files: list[str]) -> None:
    await client.read_file(files[0])
    assert served.calls == {"ReadFile": 1}


async def test_more_reads_than_one_request_holds_go_in_several(served: Served, client: ToolClient, files: list[str]) -> None:
    reads = [{"path": files[i % CALLS]} for i in range(100)]
    batched = await together(client, reads)
    assert served.calls == {"ReadFiles": 2}  # 64 and 36
    assert batched == await singly(client, reads[:CALLS]) * 6 + (await singly(client, reads[:4]))


async def test_an_answer_over_the_size_bound_holds_the_first_reads_and_the_rest_are_asked_again(
        served: Served, client: ToolClient, files: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sidecar_servicer, "READ_FILES_MAX_BYTES", 2000)  # about three of these results
    reads = [{"path": name} for name in files]
    batched = await together(client, reads)
    assert served.calls["ReadFiles"] >= 4
    assert batched == await singly(client, reads)


async def test_a_service_without_readfiles_gets_single_calls(tmp_path: Path, workspace: Path, files: list[str]) -> None:
    class Older(ToolServicer):
        ReadFiles = pb_grpc.ToolServiceServicer.ReadFiles  # UNIMPLEMENTED, as before it existed

    older = serve(tmp_path, Older(Roots([str(workspace)])))
    client = older.client()
    try:
        failing = list(failing_reads(workspace).values())
        reads = [*({"path": name} for name in files), *failing]
        first = await together(client, reads)
        assert older.calls == {"ReadFiles": 1, "ReadFile": len(reads)}
        again = await together(client, reads)
        assert older.calls == {"ReadFiles": 1, "ReadFile": 2 * len(reads)}  # not asked again
        assert first == again == await singly(client, reads)
    finally:
        await client.close()
        older.server.stop(0)


class Held(ToolServicer):
    """ReadFiles waits until released, and notes when its call ends."""

    def __init__(self, roots: Roots) -> None:
        super().__init__(roots)
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.ended = threading.Event()
        self.sizes: list[int] = []

    def ReadFiles(self, request: Any, context: Any) -> Any:
        context.add_callback(self.ended.set)
        self.sizes.append(len(request.reads))
        self.arrived.set()
        self.release.wait(WAIT_S)
        return super().ReadFiles(request, context)


async def wait_for_event(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, WAIT_S)


async def test_cancelling_one_caller_leaves_the_others_their_results(tmp_path: Path, workspace: Path, files: list[str]) -> None:
    held = Held(Roots([str(workspace)]))
    s = serve(tmp_path, held)
    client = s.client()
    try:
        alone = await singly(client, [{"path": name} for name in files[:3]])
        tasks = [asyncio.create_task(client.read_file(name)) for name in files[:3]]
        await wait_for_event(held.arrived)
        tasks[1].cancel()
        await asyncio.sleep(0)
        held.release.set()
        done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), CALL_BOUND_S)
        assert isinstance(done[1], asyncio.CancelledError)
        assert [outcome(done[0]), outcome(done[2])] == [alone[0], alone[2]]
        assert held.sizes == [3]
    finally:
        held.release.set()
        await client.close()
        s.server.stop(0)


async def test_a_caller_cancelled_before_the_batch_is_sent_is_left_out(served: Served, client: ToolClient, files: list[str]) -> None:
    tasks = [asyncio.create_task(client.read_file(name)) for name in files[:3]]
    await asyncio.sleep(0)  # the three joined the batch; it is sent in the next iteration
    tasks[0].cancel()
    done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), CALL_BOUND_S)
    assert isinstance(done[0], asyncio.CancelledError)
    assert [outcome(d)[0] for d in done[1:]] == ["result", "result"]
    assert served.calls == {"ReadFiles": 1}


async def test_cancelling_every_caller_cancels_the_call(tmp_path: Path, workspace: Path, files: list[str]) -> None:
    held = Held(Roots([str(workspace)]))
    s = serve(tmp_path, held)
    client = s.client()
    try:
        tasks = [asyncio.create_task(client.read_file(name)) for name in files[:4]]
        await wait_for_event(held.arrived)
        for task in tasks:
            task.cancel()
        await wait_for_event(held.ended)  # the service saw the call end while it was held
        done = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(d, asyncio.CancelledError) for d in done)
    finally:
        held.release.set()
        await client.close()
        s.server.stop(0)


async def test_a_failed_call_fails_every_caller_as_a_single_call_would(tmp_path: Path, workspace: Path, files: list[str]) -> None:
    s = serve(tmp_path, ToolServicer(Roots([str(workspace)])), token="right")
    client = s.client(token="wrong")
    try:
        reads = [{"path": name} for name in files]
        batched = await together(client, reads)
        alone = await singly(client, reads[:1])
        assert batched == alone * CALLS
        assert batched[0][0] == DispatcherError.__name__
    finally:
        await client.close()
        s.server.stop(0)


async def test_a_batch_past_its_deadline_times_every_caller_out(tmp_path: Path, workspace: Path, files: list[str]) -> None:
    held = Held(Roots([str(workspace)]))
    s = serve(tmp_path, held)
    client = ToolClient.for_socket(s.socket_path)
    client.call_deadline_s = 0.5
    try:
        results = await asyncio.wait_for(asyncio.gather(*(client.read_file(name) for name in files[:5]), return_exceptions=True), CALL_BOUND_S)
        assert all(isinstance(r, ToolTimeout) for r in results), results
        assert len({id(r) for r in results}) == 5  # each caller its own error
        assert str(results[0]) == "the ToolService did not answer within 0.5 s, so the call was cancelled"
    finally:
        held.release.set()
        await client.close()
        s.server.stop(0)


async def test_the_servicer_refuses_more_reads_than_it_takes(served: Served, files: list[str]) -> None:
    from osprey_sidecar._proto import tools_pb2 as pb

    async with grpc.aio.insecure_channel(f"unix:{served.socket_path}") as channel:
        stub = pb_grpc.ToolServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ReadFiles(pb.ReadFilesRequest(reads=[pb.ReadFileRequest(path=files[0])] * 65), timeout=CALL_BOUND_S)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        reply = await stub.ReadFiles(pb.ReadFilesRequest(reads=[pb.ReadFileRequest(path=files[0])] * 64), timeout=CALL_BOUND_S)
        assert len(reply.items) == 64


# --- list_directory and tree ---------------------------------------------------------------------


@pytest.fixture
def folders(workspace: Path) -> list[str]:
    for i in range(CALLS):
        for j in range(3 + i):
            write(workspace / f"dir{i}" / f"file{j}.txt", "x" * j)
        (workspace / f"dir{i}" / "sub").mkdir()
        write(workspace / f"dir{i}" / "sub" / "deeper.txt", "y\n")
    return [f"dir{i}" for i in range(CALLS)]


def failing_folders(workspace: Path) -> list[dict[str, Any]]:
    write(workspace / "plain.txt", "not a directory\n")
    write(workspace.parent / "elsewhere" / "x.txt", "secret\n")
    return [{"path": "no-such-dir"}, {"path": "plain.txt"}, {"path": "../elsewhere"}]


async def each(call: Callable[..., Any], arguments: list[dict[str, Any]], *, together: bool) -> list[tuple[str, Any]]:
    """What each call of `call` with `arguments` got, made all at once or one after another."""
    if together:
        results = await asyncio.wait_for(asyncio.gather(*(call(**a) for a in arguments), return_exceptions=True), CALL_BOUND_S)
        return [outcome(r) for r in results]
    out = []
    for a in arguments:
        try:
            out.append(outcome(await asyncio.wait_for(call(**a), CALL_BOUND_S)))
        except OspreyError as exc:
            out.append(outcome(exc))
    return out


async def test_listings_made_together_reach_the_service_as_one_call_each_with_its_own_result(
        served: Served, client: ToolClient, workspace: Path, folders: list[str]) -> None:
    calls = [*({"path": name} for name in folders), *failing_folders(workspace)]
    batched = await each(client.list_directory, calls, together=True)
    assert served.calls == {"ListDirectories": 1}
    alone = await each(client.list_directory, calls, together=False)
    assert served.calls == {"ListDirectories": 1, "ListDirectory": len(calls)}
    assert batched == alone
    assert [len(b[1]["entries"]) for b in batched[:CALLS]] == [4 + i for i in range(CALLS)]
    assert [b[1][0] for b in batched[CALLS:]] == ["not_found", "not_a_directory", "outside_root"]


async def test_trees_made_together_reach_the_service_as_one_call_each_with_its_own_result(
        served: Served, client: ToolClient, workspace: Path, folders: list[str]) -> None:
    calls = [*({"path": name, "max_depth": 1 + i % 2} for i, name in enumerate(folders)), *failing_folders(workspace), {"path": "", "max_depth": -1}]
    batched = await each(client.tree, calls, together=True)
    assert served.calls == {"Trees": 1}
    alone = await each(client.tree, calls, together=False)
    assert served.calls == {"Trees": 1, "Tree": len(calls)}
    assert batched == alone
    assert "deeper.txt" not in batched[0][1]["rendered"] and "deeper.txt" in batched[1][1]["rendered"]
    assert [b[1][0] for b in batched[CALLS:]] == ["not_found", "not_a_directory", "outside_root", "invalid_argument"]


async def test_reads_listings_and_trees_made_together_go_as_one_call_of_each_kind(
        served: Served, client: ToolClient, files: list[str], folders: list[str]) -> None:
    calls = [client.read_file(files[0]), client.list_directory(folders[0]), client.tree(folders[0]),
             client.read_file(files[1]), client.list_directory(folders[1]), client.tree(folders[1])]
    await asyncio.wait_for(asyncio.gather(*calls), CALL_BOUND_S)
    assert served.calls == {"ReadFiles": 1, "ListDirectories": 1, "Trees": 1}


async def test_a_service_without_batched_listings_gets_single_calls(tmp_path: Path, workspace: Path, folders: list[str]) -> None:
    class Older(ToolServicer):
        ListDirectories = pb_grpc.ToolServiceServicer.ListDirectories  # UNIMPLEMENTED, as before they existed
        Trees = pb_grpc.ToolServiceServicer.Trees

    older = serve(tmp_path, Older(Roots([str(workspace)])))
    client = older.client()
    try:
        calls = [{"path": name} for name in folders[:4]]
        listings = await each(client.list_directory, calls, together=True)
        trees = await each(client.tree, calls, together=True)
        assert older.calls == {"ListDirectories": 1, "ListDirectory": 4, "Trees": 1, "Tree": 4}
        assert listings == await each(client.list_directory, calls, together=False)
        assert trees == await each(client.tree, calls, together=False)
        await each(client.list_directory, calls, together=True)
        assert older.calls["ListDirectories"] == 1  # not asked again
    finally:
        await client.close()
        older.server.stop(0)


async def test_the_servicer_refuses_more_listings_than_it_takes(served: Served, folders: list[str]) -> None:
    from osprey_sidecar._proto import tools_pb2 as pb

    async with grpc.aio.insecure_channel(f"unix:{served.socket_path}") as channel:
        stub = pb_grpc.ToolServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Trees(pb.TreesRequest(calls=[pb.TreeRequest(path=folders[0])] * 65), timeout=CALL_BOUND_S)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        reply = await stub.ListDirectories(pb.ListDirectoriesRequest(calls=[pb.ListDirectoryRequest(path=folders[0])] * 64), timeout=CALL_BOUND_S)
        assert len(reply.items) == 64


async def test_reads_and_listings_served_at_once_take_turns_in_the_servicer(
        served: Served, files: list[str], folders: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Concurrent calls reach the servicer in several workers, but their file work runs one at a
    time: in Python around many system calls, it would otherwise hand the interpreter lock from
    worker to worker at each of them."""
    from osprey_sidecar._proto import tools_pb2 as pb

    lock = threading.Lock()
    running = [0]
    most = [0]

    def counted(work: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            try:
                threading.Event().wait(0.02)  # long enough for the other workers to arrive
                return work(*args)
            finally:
                with lock:
                    running[0] -= 1
        return run

    for name in ("read_file", "list_directory", "tree"):
        monkeypatch.setattr(sidecar_servicer, name, counted(getattr(sidecar_servicer, name)))
    async with grpc.aio.insecure_channel(f"unix:{served.socket_path}") as channel:
        stub = pb_grpc.ToolServiceStub(channel)
        calls = [stub.ReadFile(pb.ReadFileRequest(path=files[0]), timeout=CALL_BOUND_S) for _ in range(3)]
        calls += [stub.ListDirectory(pb.ListDirectoryRequest(path=folders[0]), timeout=CALL_BOUND_S) for _ in range(3)]
        calls += [stub.Tree(pb.TreeRequest(path=folders[0]), timeout=CALL_BOUND_S) for _ in range(3)]
        calls.append(stub.ReadFiles(pb.ReadFilesRequest(reads=[pb.ReadFileRequest(path=f) for f in files[:3]]), timeout=CALL_BOUND_S))
        replies = await asyncio.gather(*calls)
    assert len(replies[-1].items) == 3 and all(item.HasField("file") for item in replies[-1].items)
    assert served.calls == {"ReadFile": 3, "ListDirectory": 3, "Tree": 3, "ReadFiles": 1}
    assert most[0] == 1


async def test_a_read_stuck_in_the_filesystem_holds_up_the_others_only_for_a_bounded_wait(
        served: Served, files: list[str], folders: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from osprey_sidecar._proto import tools_pb2 as pb

    monkeypatch.setattr(sidecar_servicer, "FILE_WORK_WAIT_S", 0.2)
    stuck, release = threading.Event(), threading.Event()
    read_file = sidecar_servicer.read_file

    def hung(*args: Any) -> Any:
        stuck.set()
        release.wait(WAIT_S)  # a read blocked in a hung filesystem
        return read_file(*args)

    monkeypatch.setattr(sidecar_servicer, "read_file", hung)
    async with grpc.aio.insecure_channel(f"unix:{served.socket_path}") as channel:
        stub = pb_grpc.ToolServiceStub(channel)
        held = asyncio.ensure_future(stub.ReadFile(pb.ReadFileRequest(path=files[0]), timeout=WAIT_S))
        try:
            await wait_for_event(stuck)
            listing = await stub.ListDirectory(pb.ListDirectoryRequest(path=folders[0]), timeout=CALL_BOUND_S)
            assert len(listing.entries) == 4
            assert not held.done()  # the read is still stuck; the listing went ahead of it
        finally:
            release.set()
        assert (await held).content.startswith("     1\tline 0 of file 0\n")


# --- both homes -----------------------------------------------------------------------------------


async def test_reads_made_together_match_single_reads_in_every_home(tools: ToolClient, workspace: Path, files: list[str]) -> None:
    failing = failing_reads(workspace)
    reads = [*({"path": name} for name in files), *failing.values()]
    batched = await together(tools, reads)
    assert tools._batchers["ReadFile"].unsupported is None  # the home's service answered ReadFiles itself
    alone = await singly(tools, reads)
    assert batched == alone
    assert [b[0] for b in batched[:CALLS]] == ["result"] * CALLS
    assert {b[0] for b in batched[CALLS:]} == {"ToolError"}
    assert os.path.basename(batched[0][1]["resolved_path"]) == files[0]


async def test_listings_and_trees_made_together_match_single_calls_in_every_home(
        tools: ToolClient, workspace: Path, folders: list[str]) -> None:
    calls = [*({"path": name} for name in folders), *failing_folders(workspace)]
    for kind, call in (("ListDirectory", tools.list_directory), ("Tree", tools.tree)):
        batched = await each(call, calls, together=True)
        assert tools._batchers[kind].unsupported is None  # the home's service answered the batched call itself
        assert batched == await each(call, calls, together=False)
        assert [b[0] for b in batched[:CALLS]] == ["result"] * CALLS
        assert {b[0] for b in batched[CALLS:]} == {"ToolError"}
