"""The TUI's first screen in tmux, beside the floor of a minimal textual app.

The floor: a textual app of an Input and a Static that imports httpx, as small as a terminal chat
can be. Osprey: `osprey` against the loopback model server. Each is started in a detached tmux
session of 100x30 (a private server, already running) and timed from `tmux new-session` until
its screen shows:

- the floor: its Static's text (`floor-ready`), drawn with the Input;
- Osprey's first screen: the prompt drawn with its status line (the prompt takes keys from then
  on; what is sent waits for the session);
- Osprey ready: the status line says `· ready` (the session has started).

The variants run interleaved, ROUNDS rounds of RUNS launches each, so that a change of the
machine's load touches them alike; each round prints min/median/max and the paired ratio to the
floor, with the load average beside them, and the CPU time each process had used when its first
screen was up (on a loaded machine the wall times stretch; the CPU times much less). Goal: first
screen <= 1.5x the floor."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import ensure_bytecode, figure, median  # noqa: E402

from osprey.testing.model_server import ModelServer  # noqa: E402

OSPREY = str(Path(sys.executable).with_name("osprey"))
TIMEOUT = 60.0
POLL = 0.01
PROMPT_BORDER = "▔" * 20  # the prompt's top edge: the prompt is on the screen, focused
FLOOR_APP = '''
import httpx  # noqa: F401  (a chat client's one heavy import)
from textual.app import App, ComposeResult
from textual.widgets import Input, Static


class Floor(App[None]):
    def compose(self) -> ComposeResult:
        yield Static("floor-ready")
        yield Input(placeholder="type here")


Floor().run()
'''


class Tmux:
    """A private tmux server, its own socket and config, kept up by an idle session."""

    def __init__(self, directory: str) -> None:
        self.socket = os.path.join(directory, "tmux.sock")
        self.config = os.path.join(directory, "tmux.conf")
        Path(self.config).write_text("set -g status off\nset -g remain-on-exit off\n")
        self.run("new-session", "-d", "-s", "keep", "-x", "100", "-y", "30", "sleep", "100000")

    def run(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, "-f", self.config, *args], capture_output=True, text=True,
                              timeout=30, check=False).stdout

    def launch(self, name: str, command: list[str], env: dict[str, str], shown: tuple[str, ...]) -> list[tuple[float, float]]:
        """Start `command` in session `name`; for each text of `shown`, in order, the seconds until
        it is on the screen and the CPU seconds the process had used by then."""
        wrapped = ["env", "-i", *(f"{k}={v}" for k, v in {**env, "TERM": "xterm-256color"}.items()), *command]
        started = time.perf_counter()
        self.run("new-session", "-d", "-s", name, "-x", "100", "-y", "30", *wrapped)
        pid = int(self.run("display", "-p", "-t", name, "#{pane_pid}").strip())  # `env` runs the command in its own process
        times: list[tuple[float, float]] = []
        try:
            for text in shown:
                deadline = started + TIMEOUT
                while text not in self.run("capture-pane", "-p", "-t", name):
                    if time.perf_counter() > deadline:
                        raise RuntimeError(f"{name}: {text!r} not shown in {TIMEOUT:.0f} s: {self.run('capture-pane', '-p', '-t', name)!r}")
                    time.sleep(POLL)
                times.append((time.perf_counter() - started, _cpu(pid)))
        finally:
            self.run("kill-session", "-t", name)
        return times

    def close(self) -> None:
        self.run("kill-server")


def _cpu(pid: int) -> float:
    """The CPU seconds (user and system) process `pid` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

def _env(home: str) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k in keep}
    return {**env, "OSPREY_HOME": home, "HOME": home, "OPENAI_API_KEY": "bench-key"}


def _line(name: str, samples: list[float], floor: list[float]) -> str:
    ratios = sorted(s / f for s, f in zip(samples, floor, strict=True))
    return (f"  {name}: min {min(samples) * 1e3:.0f} / median {median(samples) * 1e3:.0f} / max {max(samples) * 1e3:.0f} ms"
            f" · paired ratio to the floor: median {median(ratios):.2f}x (min {ratios[0]:.2f}, max {ratios[-1]:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5, help="launches of each variant in a round")
    args = parser.parse_args()
    ensure_bytecode()
    with tempfile.TemporaryDirectory(prefix="osprey-bench-") as tmp, ModelServer() as server:
        workspace = os.path.join(tmp, "ws")
        os.mkdir(workspace)
        floor_app = os.path.join(tmp, "floor.py")
        Path(floor_app).write_text(FLOOR_APP)
        env = _env(tmp)
        tmux = Tmux(tmp)
        osprey = [OSPREY, "-C", workspace, "--base-url", server.base_url]
        try:
            # One launch of each unmeasured: the files it reads are in the page cache, as for a person.
            tmux.launch("warm-floor", [sys.executable, floor_app], env, ("floor-ready",))
            tmux.launch("warm-osprey", osprey, env, ("· ready",))
            medians: list[tuple[float, ...]] = []
            for round_ in range(args.rounds):
                floor: list[float] = []
                first: list[float] = []
                ready: list[float] = []
                floor_cpu: list[float] = []
                first_cpu: list[float] = []
                load = os.getloadavg()
                for run in range(args.runs):
                    [(wall, cpu)] = tmux.launch(f"floor-{round_}-{run}", [sys.executable, floor_app], env, ("floor-ready",))
                    floor.append(wall)
                    floor_cpu.append(cpu)
                    # The prompt's border and the status line are drawn together with the first screen.
                    (wall, cpu), (then, _) = tmux.launch(f"osprey-{round_}-{run}", osprey, env, (PROMPT_BORDER, "· ready"))
                    first.append(wall)
                    first_cpu.append(cpu)
                    ready.append(then)
                after = os.getloadavg()
                print(f"round {round_ + 1}: load average {load[0]:.2f} -> {after[0]:.2f}, {args.runs} launches of each")
                print(f"  floor (textual Input + Static, httpx imported): min {min(floor) * 1e3:.0f} / median "
                      f"{median(floor) * 1e3:.0f} / max {max(floor) * 1e3:.0f} ms, CPU {median(floor_cpu) * 1e3:.0f} ms")
                print(_line("osprey first screen (prompt drawn, takes keys)", first, floor) + f", CPU {median(first_cpu) * 1e3:.0f} ms "
                      f"({median(first_cpu) / median(floor_cpu):.2f}x the floor's)")
                print(_line("osprey ready (session started)", ready, floor))
                medians.append((median(floor), median(first), median(ready),
                                median([f / b for f, b in zip(first, floor, strict=True)])))
                figure("first screen in tmux against a minimal textual app", medians[-1][3], "x", floor=1.0)
                figure("first screen's CPU time against the minimal app's", median(first_cpu) / median(floor_cpu), "x", floor=1.0)
            span = [(min(m[i] for m in medians), max(m[i] for m in medians)) for i in range(4)]
            print(f"over the rounds (medians): floor {span[0][0] * 1e3:.0f}–{span[0][1] * 1e3:.0f} ms · first screen "
                  f"{span[1][0] * 1e3:.0f}–{span[1][1] * 1e3:.0f} ms ({span[3][0]:.2f}–{span[3][1]:.2f}x the floor, goal <= 1.5x) · "
                  f"ready {span[2][0] * 1e3:.0f}–{span[2][1] * 1e3:.0f} ms")
        finally:
            tmux.close()


if __name__ == "__main__":
    main()
