"""A long-lived program running where the tools run, driven through one ToolService stream.

`ToolClient.program(argv)` starts it and returns a `ProgramHandle`: write its stdin, read its
stdout and stderr in order (ending with one "exit" item), signal its process group, and end it.
Ending the handle (`aclose`, leaving `async with`, the session closing) ends the stream, and the
service kills the program's whole process group. The handle knows nothing of gRPC: the client
gives it a `ProgramStream` (its adapter of the stream call).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal, Protocol

from ..errors import ToolError

SIGNALS = ("TERM", "KILL", "INT")
OutputKind = Literal["stdout", "stderr", "exit"]


@dataclass(frozen=True)
class ProgramOutput:
    """One item of a program's output: a chunk of stdout or stderr, or its exit (the last item:
    `exit_code` when it exited, `signal` when a signal ended it; `timed_out` when the deadline
    given at its start ended it)."""

    kind: OutputKind
    data: bytes = b""
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False


class ProgramStream(Protocol):
    """The transport of one program's stream (the client's adapter of the stream call)."""

    async def send_stdin(self, data: bytes) -> None: ...
    async def close_stdin(self) -> None: ...
    async def signal(self, name: str) -> None: ...

    async def receive(self) -> ProgramOutput | None:
        """The next output item; None when the stream ended without an exit (it was closed)."""
        ...

    async def finish(self) -> None:
        """End the stream gently, once the exit has been read (nothing more will be sent)."""
        ...

    def cancel(self) -> None:
        """End the stream at once (the service then kills the program's process group)."""
        ...


class ProgramHandle:
    """A running program: its `pid` (in the home where it runs), stdin, output, signals, end.

    Iterate it once (`async for item in handle`) for its output in order; the last item is the
    exit. `aclose` (idempotent) ends the stream and with it the program."""

    def __init__(self, pid: int, stream: ProgramStream, *, argv0: str = "", registry: set[ProgramHandle] | None = None) -> None:
        self.pid = pid
        self._stream = stream
        self._name = argv0 or "the program"
        self._exit: ProgramOutput | None = None
        self._closed = False
        self._stdin_closed = False
        self._iterating = False
        self._registry = registry
        self._sending = asyncio.Lock()

    @property
    def exited(self) -> ProgramOutput | None:
        """The exit item once it was read, else None."""
        return self._exit

    @property
    def closed(self) -> bool:
        return self._closed

    def _ended(self, what: str) -> ToolError:
        if self._exit is not None:
            how = f"exited with code {self._exit.exit_code}" if self._exit.exit_code is not None else f"was ended by signal {self._exit.signal}"
            return ToolError("program_ended", f"cannot {what}: {self._name} (pid {self.pid}) {how}; start it again")
        return ToolError("program_ended", f"cannot {what}: the stream of {self._name} (pid {self.pid}) was closed; start it again")

    async def send(self, data: bytes) -> None:
        """Write `data` to the program's stdin (sent in bounded chunks, in order). Once the exit
        has been read this raises ToolError (`program_ended`); before that, what is sent to a
        program that has just ended is dropped."""
        if self._closed or self._exit is not None:
            raise self._ended("write to its stdin")
        if self._stdin_closed:
            raise ToolError("invalid_argument", f"the stdin of {self._name} (pid {self.pid}) was closed; nothing more can be written to it")
        async with self._sending:
            await self._stream.send_stdin(data)

    async def close_stdin(self) -> None:
        """Close the program's stdin (it reads end of file); closing it again does nothing."""
        if self._stdin_closed or self._closed or self._exit is not None:
            self._stdin_closed = True
            return
        self._stdin_closed = True
        async with self._sending:
            await self._stream.close_stdin()

    async def signal(self, name: str) -> None:
        """Send SIGTERM, SIGKILL or SIGINT ("TERM", "KILL", "INT") to the program's process group."""
        name = name.upper().removeprefix("SIG")
        if name not in SIGNALS:
            raise ToolError("invalid_argument", f"cannot send signal {name!r}: use one of {', '.join(SIGNALS)}")
        if self._closed or self._exit is not None:
            raise self._ended(f"send it SIG{name}")
        async with self._sending:
            await self._stream.signal(name)

    def __aiter__(self) -> AsyncIterator[ProgramOutput]:
        if self._iterating:
            raise ToolError("invalid_argument", f"the output of {self._name} is already being read; read it from one place")
        self._iterating = True
        return self._outputs()

    async def _outputs(self) -> AsyncIterator[ProgramOutput]:
        while self._exit is None and not self._closed:
            item = await self._stream.receive()
            if item is None:
                return
            if item.kind == "exit":
                self._exit = item
                self._forget()
                await self._stream.finish()
            yield item

    async def aclose(self) -> None:
        """End the stream: the service kills the program's process group. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._forget()
        self._stream.cancel()

    def _forget(self) -> None:
        if self._registry is not None:
            self._registry.discard(self)

    async def __aenter__(self) -> ProgramHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "exited" if self._exit is not None else "running"
        return f"<ProgramHandle {self._name} pid={self.pid} {state}>"
