"""The servicer's fast path for a large write_file: WriteFileStream's chunks read in place by
`parse_write_chunk` (the same result as the generated parser, checked against it), disk writes
started while the stream still arrives, and a large replaced file freed after the call.

The figures are in bench/file_scaling.py; these tests check only that nothing changed what a
write does.
"""

from __future__ import annotations

import os
import random
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from osprey_sidecar import files
from osprey_sidecar._proto import tools_pb2 as pb
from osprey_sidecar._proto import tools_pb2_grpc as pb_grpc
from osprey_sidecar.errors import ToolFailure
from osprey_sidecar.files import write_file_chunks
from osprey_sidecar.paths import Roots
from osprey_sidecar.server import build_server
from osprey_sidecar.servicer import parse_write_chunk
from osprey_sidecar.wire import CHANNEL_OPTIONS, TOKEN_KEY

MB = 1024 * 1024


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, kind: int, payload: bytes) -> bytes:
    return varint(number << 3 | kind) + payload


def unknown_fields(rng: random.Random) -> bytes:
    """A few fields WriteFileChunk does not have, of every wire type (a group holding more)."""
    out = b""
    for _ in range(rng.randint(0, 3)):
        number = rng.randint(4, 5000)
        kind = rng.choice([0, 1, 2, 3, 5])
        if kind == 0:
            out += field(number, 0, varint(rng.getrandbits(rng.choice([1, 7, 35, 64]))))
        elif kind == 1:
            out += field(number, 1, rng.randbytes(8))
        elif kind == 5:
            out += field(number, 5, rng.randbytes(4))
        elif kind == 2:
            body = rng.randbytes(rng.randint(0, 300))
            out += field(number, 2, varint(len(body)) + body)
        else:
            out += field(number, 3, field(number + 1, 0, varint(7)) + field(number + 2, 2, b"\x01z")) + varint(number << 3 | 4)
    return out


def same_as_generated(raw: bytes) -> None:
    ours = parse_write_chunk(raw)
    theirs = pb.WriteFileChunk.FromString(raw)
    assert (ours.path, bytes(ours.data), ours.last) == (theirs.path, theirs.data, theirs.last)


def test_a_chunk_reads_as_the_generated_parser_reads_it() -> None:
    rng = random.Random(8)
    for _ in range(400):
        message = pb.WriteFileChunk(path=rng.choice(["", "a.txt", "dir/ünïcode ✓.txt"]), data=rng.randbytes(rng.choice([0, 1, 127, 128, 20_000])), last=rng.random() < 0.5)
        wire = message.SerializeToString()
        same_as_generated(wire)
        # Unknown fields anywhere, and fields repeated (the last one wins), in any order.
        same_as_generated(unknown_fields(rng) + wire + unknown_fields(rng))
        again = pb.WriteFileChunk(path="later.txt", data=b"later", last=not message.last).SerializeToString()
        same_as_generated(wire + unknown_fields(rng) + again)
    # What a client may write that SerializeToString never does: explicit defaults, odd varints.
    same_as_generated(field(3, 0, varint(0)) + field(1, 2, b"\x00") + field(2, 2, b"\x00"))
    same_as_generated(field(3, 0, b"\x80\x80\x01"))
    same_as_generated(field(3, 0, varint(2**64 - 1)))


def test_a_chunk_the_generated_parser_refuses_is_refused() -> None:
    bad = [
        b"\x12",  # a key, no length
        b"\x12\x05ab",  # a length past the end
        b"\x18\xff",  # a varint cut short
        b"\x18" + b"\xff" * 10 + b"\x01",  # a varint over ten bytes
        b"\x00\x01",  # field number 0
        b"\x1e",  # wire types that do not exist
        b"\x1f",
        b"\x0c",  # a group closed that was never opened
        b"\x0b\x14",  # a group closed by another field's end
        b"\x0b\x08\x01",  # a group never closed
        b"\x0a\x01\xff",  # a path that is not UTF-8
        b"\x21\x00\x00",  # a fixed64 cut short
        b"\x25\x00",  # a fixed32 cut short
    ]
    for raw in bad:
        with pytest.raises(Exception):  # noqa: B017 - the generated parser's DecodeError is not ValueError
            pb.WriteFileChunk.FromString(raw)
        with pytest.raises(ValueError):
            parse_write_chunk(raw)


def test_random_bytes_are_accepted_or_refused_alike() -> None:
    rng = random.Random(80)
    for i in range(20_000):
        raw = rng.randbytes(rng.randint(0, 24))
        if i % 2:
            raw = b"\x0b" + raw  # inside a group
        try:
            theirs = pb.WriteFileChunk.FromString(raw)
        except Exception:  # noqa: BLE001 - DecodeError, whose class depends on the protobuf backend
            with pytest.raises(ValueError):
                parse_write_chunk(raw)
            continue
        ours = parse_write_chunk(raw)
        assert (ours.path, bytes(ours.data), ours.last) == (theirs.path, theirs.data, theirs.last), raw


@pytest.fixture
def served(workspace: Path, tmp_path: Path) -> Iterator[tuple[pb_grpc.ToolServiceStub, tuple[tuple[str, str]]]]:
    """The servicer as build_server serves it (its chunk parser in place), and a stub to it."""
    socket_path = str(tmp_path / "tools.sock")
    token = secrets.token_hex(16)
    server = build_server([str(workspace)], socket_path, token)
    channel = grpc.insecure_channel(f"unix:{socket_path}", options=list(CHANNEL_OPTIONS))
    try:
        yield pb_grpc.ToolServiceStub(channel), ((TOKEN_KEY, token),)
    finally:
        channel.close()
        server.stop(grace=None)


def chunked(path: str, data: bytes, step: int) -> Iterator[pb.WriteFileChunk]:
    for at in range(0, len(data), step):
        yield pb.WriteFileChunk(path=path if at == 0 else "", data=data[at : at + step], last=at + step >= len(data))


def test_a_streamed_write_replaces_a_large_file_with_exactly_its_chunks(workspace: Path, served: tuple[pb_grpc.ToolServiceStub, tuple[tuple[str, str]]]) -> None:
    stub, metadata = served
    old = workspace / "big.txt"
    old.write_bytes(b"old\n" * (files.RELEASE_IN_BACKGROUND_BYTES // 2))
    linked = workspace / "big-link.txt"
    os.link(old, linked)  # a second name: replacing the first must leave it as it was
    # Characters cut across chunks, and more than one writeback step of content.
    data = ("ascii line\n" + "ünïcödé ✓ line\n" * 3).encode() * (3 * files.WRITEBACK_STEP_BYTES // 60)
    step = 100_003
    assert data[step - 1] >= 0x80 or data[2 * step - 1] >= 0x80 or data[3 * step - 1] >= 0x80
    response = stub.WriteFileStream(chunked("big.txt", data, step), metadata=metadata, timeout=60)
    assert response.bytes_written == len(data) and not response.created
    assert old.read_bytes() == data
    assert linked.read_bytes() == b"old\n" * (files.RELEASE_IN_BACKGROUND_BYTES // 2)
    # Larger than the release threshold and alone under its name: replaced again, the old one freed.
    os.unlink(linked)
    again = b"y" * (files.RELEASE_IN_BACKGROUND_BYTES + 1)
    stub.WriteFileStream(chunked("big.txt", again, MB), metadata=metadata, timeout=60)
    assert old.read_bytes() == again
    assert sorted(os.listdir(workspace)) == ["big.txt"]


def test_a_malformed_chunk_fails_the_call_and_writes_nothing(workspace: Path, served: tuple[pb_grpc.ToolServiceStub, tuple[tuple[str, str]]], tmp_path: Path) -> None:
    _, metadata = served
    (workspace / "f.txt").write_text("before\n")
    channel = grpc.insecure_channel(f"unix:{tmp_path / 'tools.sock'}", options=list(CHANNEL_OPTIONS))
    try:
        raw = channel.stream_unary("/osprey.sandbox.v1.ToolService/WriteFileStream")
        good = pb.WriteFileChunk(path="f.txt", data=b"x" * 1000).SerializeToString()
        with pytest.raises(grpc.RpcError):
            raw(iter([good, b"\x12\x05ab"]), metadata=metadata, timeout=30)
    finally:
        channel.close()
    assert (workspace / "f.txt").read_text() == "before\n"
    # The call has failed; the servicer's thread may still be removing its temporary file.
    deadline = time.monotonic() + 10
    while os.listdir(workspace) != ["f.txt"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert os.listdir(workspace) == ["f.txt"]


def test_chunks_as_views_are_checked_as_utf8_across_their_bounds(tmp_path: Path) -> None:
    """Chunks arrive as views into their messages; a character may span two of them."""
    roots = Roots([str(tmp_path)])
    for chunks in ([b"caf\xc3", b"abc"], [memoryview(b"caf\xc3"), memoryview(b"abc")], [b"ok", memoryview(b"\xff")]):
        with pytest.raises(ToolFailure, match="UTF-8"):
            write_file_chunks(roots, "f.txt", chunks)
    assert os.listdir(tmp_path) == []
    write_file_chunks(roots, "f.txt", [memoryview(b"caf\xc3"), memoryview(b"\xa9"), b" ok\n"])
    assert (tmp_path / "f.txt").read_text() == "café ok\n"
