"""The lsp package's parts on their own: Content-Length framing, positions in UTF-16, the rename
preview's lines, and the JSON-RPC client over a real subprocess."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from lsprotocol import types as t

from osprey.errors import ToolError
from osprey.lsp.client import MAX_HEADER_BYTES, LspClient, LspServerError, _Frames, _Framing, frame
from osprey.lsp.positions import lines_of, position, to_character, utf16_units
from osprey.lsp.tool import _edited_lines
from osprey.toolservice.program import ProgramOutput


def test_frames_split_anywhere_and_joined() -> None:
    data = frame({"id": 1, "result": "é"}) + frame({"method": "x"})
    for cut in range(1, len(data)):
        frames = _Frames()
        got = frames.feed(data[:cut]) + frames.feed(data[cut:])
        assert [json.loads(b) for b in got] == [{"id": 1, "result": "é"}, {"method": "x"}]


@pytest.mark.parametrize("data", [b"X" * (MAX_HEADER_BYTES + 1), b"Content-Length: nope\r\n\r\n", b"Content-Type: x\r\n\r\n",
                                  b"Content-Length: 999999999999\r\n\r\n"])
def test_frames_refuse_what_is_not_framed(data: bytes) -> None:
    with pytest.raises(_Framing):
        _Frames().feed(data)


def test_positions_count_utf16_units() -> None:
    lines = lines_of('s = "𝄞é"; value = 1\r\nnext\rlast\n')
    assert lines == ['s = "𝄞é"; value = 1', "next", "last", ""]
    assert position(lines, 1, None, "value", "f.py") == {"line": 0, "character": 11}  # 𝄞 is two UTF-16 units
    assert position(lines, 1, 11, None, "f.py") == {"line": 0, "character": 11}
    assert position(lines, 2, None, "ext", "f.py") == {"line": 1, "character": 1}  # not a whole word: found as text
    assert to_character(lines[0], 11) == 10 and utf16_units("𝄞") == 2
    with pytest.raises(ToolError, match="has 4 lines; line 9"):
        position(lines, 9, None, "x", "f.py")
    with pytest.raises(ToolError, match="'nothing' is not on line 1"):
        position(lines, 1, None, "nothing", "f.py")
    with pytest.raises(ToolError, match="give `symbol`"):
        position(lines, 1, None, None, "f.py")


def test_a_rename_preview_applies_the_edits_of_a_line_together() -> None:
    def edit(line: int, start: int, end: int, text: str) -> t.TextEdit:
        return t.TextEdit(range=t.Range(start=t.Position(line=line, character=start), end=t.Position(line=line, character=end)), new_text=text)

    lines = ["f(f)", "x = '𝄞' + f"]
    assert _edited_lines(lines, [edit(0, 2, 3, "g"), edit(0, 0, 1, "g"), edit(1, 11, 12, "g")]) == [(1, "g(g)"), (2, "x = '𝄞' + g")]


class Subprocess:
    """A transport over a local subprocess (the shape of a ProgramHandle)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.pid = process.pid

    async def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        await self.process.stdin.drain()

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()

    def __aiter__(self) -> AsyncIterator[ProgramOutput]:
        return self._out()

    async def _out(self) -> AsyncIterator[ProgramOutput]:
        queue: asyncio.Queue[ProgramOutput | None] = asyncio.Queue()

        async def pump(stream: asyncio.StreamReader | None, kind: str) -> None:
            assert stream is not None
            while chunk := await stream.read(4096):
                await queue.put(ProgramOutput(kind, chunk))  # type: ignore[arg-type]
            await queue.put(None)

        tasks = [asyncio.create_task(pump(self.process.stdout, "stdout")), asyncio.create_task(pump(self.process.stderr, "stderr"))]
        ended = 0
        while ended < 2:
            item = await queue.get()
            if item is None:
                ended += 1
            else:
                yield item
        await asyncio.gather(*tasks)
        yield ProgramOutput("exit", exit_code=await self.process.wait())

    async def aclose(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


ECHO_SERVER = r'''
import json, sys
inp, out = sys.stdin.buffer, sys.stdout.buffer
def send(msg):
    body = json.dumps(msg).encode()
    out.write(b"Content-Length: %d\r\n\r\n" % len(body) + body); out.flush()
while True:
    length = None
    while (line := inp.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    if length is None:
        sys.exit(0)
    msg = json.loads(inp.read(length))
    if msg.get("method") == "ask":
        # The server asks its client first (workspace/configuration), then answers.
        send({"jsonrpc": "2.0", "id": "c1", "method": "workspace/configuration", "params": {"items": [{"section": "python.analysis"}, {"section": "nope"}]}})
        send({"jsonrpc": "2.0", "method": "textDocument/publishDiagnostics", "params": {"uri": "file:///a", "version": 1, "diagnostics": []}})
        continue
    if msg.get("id") == "c1":
        send({"jsonrpc": "2.0", "id": 1, "result": msg["result"]})
    elif msg.get("method") == "fail":
        send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32000, "message": "no such thing"}})
    elif msg.get("method") == "die":
        sys.stderr.write("dying now\n"); sys.exit(7)
'''


async def test_the_client_answers_the_servers_requests_and_reports_its_end(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text(ECHO_SERVER)
    process = await asyncio.create_subprocess_exec(sys.executable, str(script), stdin=asyncio.subprocess.PIPE,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    client = LspClient("echo", Subprocess(process), request_timeout=10, settings={"python": {"analysis": {"mode": "strict"}}})
    client.start()
    try:
        assert await client.request("ask", None) == [{"mode": "strict"}, None]
        assert client.diagnostics["file:///a"].version == 1
        with pytest.raises(ToolError, match="answered with an error: no such thing"):
            await client.request("fail", None)
        with pytest.raises(LspServerError, match=r"'echo' exited with code 7; its last stderr lines:\ndying now"):
            await client.request("die", None)
        assert not client.alive
        with pytest.raises(LspServerError, match="exited with code 7"):
            await client.request("ask", None)
    finally:
        await client.close()
    assert process.returncode == 7
