"""TUI latency on a pseudo-terminal of 100x30, against the loopback model server.

Launch: from spawning `osprey` until its status line says the session is ready, beside `python -c
pass` (medians of several runs). Goal: <= 1.0 s.
Keystroke: the time from writing a key to the terminal until the TUI draws it, taken in one `osprey --yolo`
process in alternating phases: idle (no tool running: the floor) and while an approved bash call streams
10 MB in 50 kB pieces with short sleeps, so that one stream lasts long enough for a few hundred keys (its
output budget raised so that all of it streams to the TUI, not only the first 512 KiB).
Median, p90, p99 and the number of keys of each. Goal: <= 50 ms while the tool streams."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import ensure_bytecode, figure, median, percentile, time_command  # noqa: E402

from osprey.testing.model_server import ModelServer, Reply  # noqa: E402

RUNS = 7
ROUNDS = 2  # idle phase, stream phase; twice, then a last idle phase
IDLE_KEYS = 100
TIMEOUT = 120.0
PIECES, PIECE_BYTES, PAUSE = 200, 50_000, 0.07  # 10 MB over about 15 s
STREAM = f"w=stream; for i in $(seq {PIECES}); do yes osprey-$w | head -c {PIECE_BYTES}; sleep {PAUSE}; done"
FINISHED = b"stream finished"
RUN = 40  # keys typed into the prompt before it is emptied (well under one line of the prompt)
ANSI = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]")
OSPREY = str(Path(sys.executable).with_name("osprey"))


class Pty:
    """A command on a pseudo-terminal; what it draws, kept as it arrives."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        self.master = master
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(args, env={**env, "TERM": "xterm-256color"}, stdin=slave, stdout=slave, stderr=slave,
                                     start_new_session=True)
        os.close(slave)
        self.data = bytearray()
        self.lock = threading.Condition()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 1 << 16)
            except OSError:
                chunk = b""
            with self.lock:
                if not chunk:
                    self.lock.notify_all()
                    return
                self.data += chunk
                self.lock.notify_all()

    def wait_for(self, needle: bytes, start: int = 0) -> float:
        """Wait until `needle` is drawn (escape sequences left out) after byte `start`; when it was seen."""
        deadline = time.perf_counter() + TIMEOUT
        with self.lock:
            while True:
                if needle in ANSI.sub(b"", bytes(self.data[start:])):
                    return time.perf_counter()
                if self.proc.poll() is not None or time.perf_counter() > deadline:
                    raise RuntimeError(f"waiting for {needle!r}: exit {self.proc.poll()}, tail {bytes(self.data[-500:])!r}")
                self.lock.wait(0.05)

    def seen(self, needle: bytes, start: int) -> bool:
        with self.lock:
            return needle in ANSI.sub(b"", bytes(self.data[start:]))

    def mark(self) -> int:
        with self.lock:
            return len(self.data)

    def write(self, keys: bytes) -> int:
        with self.lock:
            at = len(self.data)
        os.write(self.master, keys)
        return at

    def close(self) -> None:
        if self.proc.poll() is None:
            self.write(b"\x11")  # ctrl+q
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.close(self.master)


class Typist:
    """Types keys into the prompt and times each one until it is drawn.

    Each key extends a run of one letter and counts as drawn when the whole run is, so a repaint of the
    line as it was (the cursor blinking) is not taken for it. After RUN keys the prompt is emptied and the
    next run uses the other letter, so a late repaint of the old run cannot match either."""

    def __init__(self, term: Pty) -> None:
        self.term = term
        self.letter, self.typed = b"z", 0

    def key(self) -> tuple[float, float]:
        """Type one key: when it was sent and when it was drawn."""
        if self.typed >= RUN:
            self.clear()
        if self.typed == 0:  # a run's first key is not timed: one letter alone could be drawn anywhere
            self.term.write(self.letter)
            self.typed = 1
        at = self.term.write(self.letter)
        sent = time.perf_counter()
        self.typed += 1
        return sent, self.term.wait_for(self.letter * self.typed, at)

    def clear(self) -> None:
        self.term.write(b"\x7f" * self.typed)
        time.sleep(0.3)  # keys that follow a burst of backspaces at once can be lost
        self.letter = b"x" if self.letter == b"z" else b"z"
        self.typed = 0


def _env(home: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OSPREY_", "OPENAI_", "ANTHROPIC_"))}
    return {**env, "OSPREY_HOME": home, "OPENAI_API_KEY": "bench-key", "HOME": home}


def launch(server: ModelServer, workspace: str, env: dict[str, str]) -> float:
    term = Pty([OSPREY, "-C", workspace, "--base-url", server.base_url], env)
    try:
        return term.wait_for(b"\xc2\xb7 ready") - term.started
    finally:
        term.close()


def idle(typist: Typist) -> list[float]:
    samples = []
    for _ in range(IDLE_KEYS):
        sent, seen = typist.key()
        samples.append(seen - sent)
        time.sleep(0.005)
    return samples


def streaming(server: ModelServer, typist: Typist) -> list[float]:
    """Key-to-draw times of the keys sent after the stream's first output was drawn, up to the answer that
    follows the bash call."""
    term = typist.term
    server.add(Reply.tool_call("bash", {"command": STREAM}), Reply.text(FINISHED.decode()))
    typist.clear()
    at = term.write(b"stream it\r")
    term.wait_for(b"osprey-stream", at)  # its output: the command in the row reads osprey-$w
    samples: list[float] = []
    while True:
        before = term.mark()
        sent, seen = typist.key()
        if term.seen(FINISHED, before):
            break
        samples.append(seen - sent)
        time.sleep(0.005)
    return samples


def _figures(samples: list[float]) -> str:
    return (f"median {median(samples) * 1e3:.1f} ms, p90 {percentile(samples, 90) * 1e3:.1f} ms, "
            f"p99 {percentile(samples, 99) * 1e3:.1f} ms over {len(samples)} keys")


def main() -> None:
    ensure_bytecode()
    base = median(time_command([sys.executable, "-c", "pass"], RUNS))
    print(f"python -c pass: {base * 1e3:.1f} ms")
    with tempfile.TemporaryDirectory(prefix="osprey-bench-") as tmp, ModelServer() as server:
        workspace = os.path.join(tmp, "ws")
        os.mkdir(workspace)
        env = _env(tmp)
        # bash streams the first half of its output budget live: a budget over 20 MB streams all 10 MB to the TUI
        Path(tmp, "config.toml").write_text(f"[tool_results]\nbash_max_output_bytes = {32 * 1024 * 1024}\n")
        times = [launch(server, workspace, env) for _ in range(RUNS)]
        print(f"osprey launch to an interactive prompt: median {median(times) * 1e3:.0f} ms over {RUNS} runs, "
              f"{median(times) / base:.1f}x python -c pass (goal <= 1000 ms)")
        figure("launch to an interactive prompt", median(times) * 1e3, "ms", floor=base * 1e3)
        term = Pty([OSPREY, "-C", workspace, "--base-url", server.base_url, "--yolo"], env)
        floor: list[float] = []
        streamed: list[float] = []
        try:
            term.wait_for(b"\xc2\xb7 ready")
            typist = Typist(term)
            for _ in range(ROUNDS):
                floor += idle(typist)
                started = time.perf_counter()
                one = streaming(server, typist)
                print(f"  one 10 MB stream ({time.perf_counter() - started:.1f} s): {_figures(one) if one else 'no key drawn'}")
                streamed += one
            floor += idle(typist)
        finally:
            term.close()
        print(f"keystroke to render, no tool running (floor): {_figures(floor)}")
        if not streamed:
            print("keystroke to render while bash streams 10 MB: no key was drawn while the stream ran")
            return
        print(f"keystroke to render while bash streams 10 MB: {_figures(streamed)} (goal <= 50 ms)")
    figure("keystroke to render while bash streams 10 MB, median", median(streamed) * 1e3, "ms", floor=median(floor) * 1e3)
    figure("keystroke to render while bash streams 10 MB, p90", percentile(streamed, 90) * 1e3, "ms", floor=percentile(floor, 90) * 1e3)


if __name__ == "__main__":
    main()
