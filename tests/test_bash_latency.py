"""A bash command that ends as it prints sends its output with its exit: one message on the call's
stream instead of two (each message is a round trip through the server's threads), and the
client still hands all of the output to `on_output`.

The sidecar's `BashRun` in-process on real subprocesses, and a real server on a loopback unix
socket with the real client. How fast a call returns is measured by bench/bash_latency.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from osprey.toolservice.client import ToolClient
from osprey_sidecar import shell
from osprey_sidecar.paths import Roots
from osprey_sidecar.server import build_server
from osprey_sidecar.shell import BashRun


def events(workspace: Path, command: str, **kwargs: int) -> list[tuple[str, bytes]]:
    """The run's events as ("output", data) and ("exit", tail)."""
    run = BashRun(Roots([str(workspace)]), command, **kwargs)
    return [("output", e.output.data) if e.HasField("output") else ("exit", e.exit.tail) for e in run.events()]


def test_output_that_arrives_with_the_exit_goes_in_the_exit_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Held long enough that a loaded machine's scheduling cannot split the output from the exit.
    monkeypatch.setattr(shell, "HOLD_S", 10.0)
    assert events(tmp_path, "echo hi") == [("exit", b"hi\n")]
    assert events(tmp_path, "printf 'a\\nb\\n'; echo c >&2; exit 4") == [("exit", b"a\nb\nc\n")]


def test_output_is_still_streamed_while_the_command_runs(tmp_path: Path) -> None:
    got = events(tmp_path, "echo first; sleep 0.3; echo second")
    assert got[0] == ("output", b"first\n"), got
    assert got[-1][0] == "exit"
    assert b"".join(data for _, data in got) == b"first\nsecond\n"


def test_output_past_the_head_is_not_put_in_the_exit_when_bytes_were_dropped(tmp_path: Path) -> None:
    expected = "".join(f"{i}\n" for i in range(1, 20_001)).encode()
    run = BashRun(Roots([str(tmp_path)]), "seq 1 20000", max_output_bytes=1_000)
    got = list(run.events())
    streamed = b"".join(e.output.data for e in got if e.HasField("output"))
    done = got[-1].exit
    assert streamed == expected[:500]
    assert done.tail == expected[-500:]
    assert done.dropped_bytes == len(expected) - 1_000


async def test_the_client_hands_all_of_the_output_to_on_output(tmp_path: Path) -> None:
    socket_path = str(tmp_path / "tools.sock")
    server = build_server([str(tmp_path)], socket_path)
    client = ToolClient.for_socket(socket_path)
    try:
        await client.wait_ready(10)
        chunks: list[bytes] = []
        result = await client.bash("echo hi; echo there >&2", on_output=chunks.append)
        assert (result.output, result.exit_code) == ("hi\nthere\n", 0)
        assert b"".join(chunks) == b"hi\nthere\n"
        chunks.clear()
        result = await client.bash("seq 1 20000", max_output_bytes=1_000, on_output=chunks.append)
        assert result.dropped_bytes > 0
        assert b"".join(chunks) == b"".join(f"{i}\n".encode() for i in range(1, 20_001))[:500]  # the head only
    finally:
        await client.close()
        server.stop(0)
