"""The terminal driver: textual's Linux driver, made safe for a terminal that goes away.

When the terminal closes (its window, `tmux kill-session`, a dropped ssh connection) the kernel
sends SIGHUP and then SIGCONT, and every write to it fails. textual's driver would take that
SIGCONT for the end of a Ctrl+Z suspension and start its application mode again (a second output
thread, which dies at its first write); its output queue then fills and the next write blocks for
ever, with the session's journal still open. Here a SIGCONT resumes only after a suspension, and
no write or close waits more than a bounded time for the output thread: once it is gone or stuck,
output is dropped (there is nobody to see it)."""

from __future__ import annotations

import queue
import time
from typing import Any

from textual.drivers.linux_driver import LinuxDriver

WRITE_BOUND = 2.0  # seconds a write may wait for room in the output queue
CLOSE_BOUND = 2.0  # seconds closing waits for the output thread to write what is queued


class TerminalDriver(LinuxDriver):
    """textual's Linux driver whose writes and close are bounded in time, and whose SIGCONT
    handler resumes only what a SIGTSTP suspended."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.suspended = False
        self.gone = False  # the terminal (or the thread writing to it) is gone: output is dropped

    def _sigtstp_application(self, *args: Any) -> None:
        self.suspended = True
        super()._sigtstp_application(*args)

    def _sigcont_application(self, *args: Any) -> None:
        if not self.suspended:  # the SIGCONT that follows a hang-up: nothing was suspended
            return
        self.suspended = False
        super()._sigcont_application(*args)

    def write(self, data: str) -> None:
        writer = self._writer_thread
        if self.gone or writer is None:
            return
        if not self._put(writer, data, WRITE_BOUND):
            self.gone = True

    def close(self) -> None:
        writer, self._writer_thread = self._writer_thread, None
        if writer is None:
            return
        if not self.gone and self._put(writer, None, CLOSE_BOUND):
            writer.join(CLOSE_BOUND)
        if writer.is_alive():
            self.gone = True  # stuck writing to a terminal nobody reads: left behind (a daemon thread)

    @staticmethod
    def _put(writer: Any, item: str | None, bound: float) -> bool:
        """Queue `item` for the output thread; False when the thread is gone or stays stuck for `bound` seconds."""
        pending: queue.Queue[str | None] = writer._queue  # textual's WriterThread blocks on it with no bound
        deadline = time.monotonic() + bound
        while writer.is_alive():
            try:
                pending.put(item, timeout=0.1)
                return True
            except queue.Full:
                if time.monotonic() > deadline:
                    return False
        return False
