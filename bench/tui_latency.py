"""TUI latency on a pseudo-terminal of 100x30, against the loopback model server.

Launch: from spawning `osprey` until its status line says the session is ready, beside `python -c
pass` (medians of several runs). Goal: <= 1.0 s.
Keystroke: while an approved bash call streams 10 MB (`yes | head -c 10000000`, `--yolo`), the time
from writing a key to the terminal until the character is drawn; median and p90. Goal: <= 50 ms."""

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

from _stats import median, percentile, time_command  # noqa: E402

from osprey.testing.model_server import ModelServer, Reply  # noqa: E402

RUNS = 7
KEYS = 30
ROUNDS = 20
TIMEOUT = 120.0
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

    def wait_for(self, needle: bytes, start: int = 0, plain: bool = True) -> float:
        """Wait until `needle` is in the output after byte `start`; the time it was seen."""
        deadline = time.perf_counter() + TIMEOUT
        with self.lock:
            while True:
                tail = bytes(self.data[start:])
                if needle in (ANSI.sub(b"", tail) if plain else tail):
                    return time.perf_counter()
                if self.proc.poll() is not None or time.perf_counter() > deadline:
                    raise RuntimeError(f"waiting for {needle!r}: exit {self.proc.poll()}, tail {tail[-500:]!r}")
                self.lock.wait(0.05)

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


def _env(home: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OSPREY_", "OPENAI_", "ANTHROPIC_"))}
    return {**env, "OSPREY_HOME": home, "OPENAI_API_KEY": "bench-key", "HOME": home}


def launch(server: ModelServer, workspace: str, env: dict[str, str]) -> float:
    term = Pty([OSPREY, "-C", workspace, "--base-url", server.base_url], env)
    try:
        return term.wait_for(b"\xc2\xb7 ready") - term.started
    finally:
        term.close()


def keystrokes(server: ModelServer, workspace: str, env: dict[str, str]) -> list[float]:
    """Key-to-draw times taken while the bash call streams (from its row showing until the answer)."""
    server.add(Reply.tool_call("bash", {"command": "yes | head -c 10000000"}), Reply.text("stream finished"))
    term = Pty([OSPREY, "-C", workspace, "--base-url", server.base_url, "--yolo"], env)
    samples: list[float] = []
    try:
        term.wait_for(b"\xc2\xb7 ready")
        term.write(b"stream it\r")
        for _ in range(KEYS * 10):
            at = term.write(b"z")
            sent = time.perf_counter()
            seen = term.wait_for(b"z", at, plain=False)
            with term.lock:
                shown = ANSI.sub(b"", bytes(term.data))
            if b"stream finished" in shown:
                break
            if b"yes | head" in shown:
                samples.append(seen - sent)
            time.sleep(0.005)
    finally:
        term.close()
    return samples


def main() -> None:
    base = median(time_command([sys.executable, "-c", "pass"], RUNS))
    print(f"python -c pass: {base * 1e3:.1f} ms")
    with tempfile.TemporaryDirectory(prefix="osprey-bench-") as tmp, ModelServer() as server:
        workspace = os.path.join(tmp, "ws")
        os.mkdir(workspace)
        env = _env(tmp)
        times = [launch(server, workspace, env) for _ in range(RUNS)]
        print(f"osprey launch to an interactive prompt: median {median(times) * 1e3:.0f} ms over {RUNS} runs, "
              f"{median(times) / base:.1f}x python -c pass (goal <= 1000 ms)")
        samples: list[float] = []
        for _ in range(ROUNDS):  # 10 MB streams in well under a second: several rounds for enough keys
            samples += keystrokes(server, workspace, env)
            if len(samples) >= KEYS:
                break
        if not samples:
            print("keystroke to render: no key was drawn while the stream ran")
            return
        print(f"keystroke to render while bash streams 10 MB: median {median(samples) * 1e3:.1f} ms, "
              f"p90 {percentile(samples, 90) * 1e3:.1f} ms over {len(samples)} keys (goal <= 50 ms)")


if __name__ == "__main__":
    main()
