"""The ToolService process stops on SIGTERM, SIGINT or SIGHUP, also when several arrive at once (its
parent's death signal, then a hang-up): a handler that took a lock could be interrupted by the next
signal's handler and wait on that lock forever, leaving the process behind its dead broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROUNDS = 12
SIGNALS = 2000
STOP_WITHIN = 15.0  # seconds; generous for a loaded machine (a stop takes milliseconds)


def serving(root: Path, socket: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-I", "-m", "osprey_sidecar", "--socket", str(socket), "--root", str(root)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()
    assert "serving on" in line, line
    return proc


def test_signals_arriving_together_stop_the_service(tmp_path: Path) -> None:
    stuck = 0
    for n in range(ROUNDS):
        proc = serving(tmp_path, tmp_path / f"tools-{n}.sock")
        for _ in range(SIGNALS):  # a burst, so some arrive while the handler of another runs
            try:
                os.kill(proc.pid, signal.SIGHUP)
            except ProcessLookupError:
                break
        try:
            proc.wait(timeout=STOP_WITHIN)
        except subprocess.TimeoutExpired:
            stuck += 1
            proc.kill()
            proc.wait()
        else:
            assert proc.returncode in (0, -signal.SIGHUP), proc.returncode  # a late signal may find Python's handlers gone
    assert stuck == 0, f"{stuck} of {ROUNDS} services did not stop"


def test_one_signal_stops_it_at_once(tmp_path: Path) -> None:
    proc = serving(tmp_path, tmp_path / "tools.sock")
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=STOP_WITHIN) == 0
    assert time.monotonic() - started < STOP_WITHIN
