"""The broker and its local dispatcher are not dumpable: a host command of the same user cannot
read their `/proc/PID/environ` (which holds the provider's key in the broker) or memory.

Root reads any process's environment whatever its dumpable flag, so when the tests run as root
the whole `osprey agent` run is started as an unprivileged user: then the broker, the dispatcher
and the command the model runs all share that user's uid, as they do on a developer's machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from osprey.testing.model_server import ModelServer, Reply

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_DUMPABLE is Linux's")

OSPREY = str(Path(sys.executable).with_name("osprey"))
KEY = "sk-broker-key-0a1b2c3d4e5f6a7b8c9d"
NOBODY = 65534
# Walks from the command's parent up to the broker; for each: pid, its command line, and what
# reading its environment gave (the variables, or the error).
WALK = r"""
pid=$PPID
for _ in 1 2 3 4 5 6; do
  cmd=$(tr '\0' ' ' < /proc/$pid/cmdline | cut -c1-300)
  printf '== %s %s\n' "$pid" "$cmd"
  if env_text=$(tr '\0' '\n' 2>&1 < /proc/$pid/environ); then echo "READABLE"; printf '%s\n' "$env_text"; else echo "REFUSED $env_text"; fi
  case "$cmd" in *" agent -C "*) break ;; esac  # the broker: what is above it is not Osprey's
  pid=$(awk '/^PPid:/ {print $2}' /proc/$pid/status)
done
"""


@pytest.fixture
def unprivileged_dir() -> Iterator[Path]:
    """A directory the run's user owns (the pytest tmp dirs of root are closed to others)."""
    path = Path(tempfile.mkdtemp(prefix="osprey-undumpable-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _as_run_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: no way to run the broker as an unprivileged user")
    # CAP_DAC_READ_SEARCH only so that user can run an interpreter installed under a directory
    # closed to it (e.g. /root): it reads any file, but not a process's environment or memory,
    # which take ptrace access (the same uid and a dumpable process, or CAP_SYS_PTRACE).
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
            "--inh-caps=-all,+dac_read_search", "--ambient-caps=+dac_read_search", "--", *argv]


def _ancestors(output: str) -> list[tuple[str, str]]:
    """(command line, what reading its environment gave) of each ancestor of the command."""
    found = []
    for block in output.split("== ")[1:]:
        head, _, rest = block.partition("\n")
        found.append((head, rest))
    return found


def test_a_host_command_cannot_read_the_broker_or_the_dispatcher(unprivileged_dir: Path, model_server: ModelServer) -> None:
    home, workspace = unprivileged_dir / "osprey-home", unprivileged_dir / "workspace"
    home.mkdir()
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello\n")
    if os.geteuid() == 0:
        for path in (unprivileged_dir, home, workspace, workspace / "notes.txt"):
            os.chown(path, NOBODY, NOBODY)
    env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8", "HOME": str(unprivileged_dir),
           "OSPREY_HOME": str(home), "OPENAI_API_KEY": KEY, "TMPDIR": "/tmp"}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    model_server.add(Reply.tool_call("bash", {"command": WALK}), Reply.text("done"))
    argv = _as_run_user([OSPREY, "agent", "-C", str(workspace), "--provider", "openai", "--base-url", model_server.base_url,
                         "--yolo", "Read what the processes above you hold."])
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=unprivileged_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [result] = [e for e in map(json.loads, proc.stdout.splitlines()) if e["type"] == "tool_result"]
    output = result["output"]
    ancestors = _ancestors(output)
    brokers = [read for cmd, read in ancestors if " agent -C " in cmd and "osprey" in cmd]
    dispatchers = [read for cmd, read in ancestors if "osprey_sidecar" in cmd]
    assert len(brokers) == 1 and len(dispatchers) == 1, output
    for read in (brokers[0], dispatchers[0]):
        assert read.startswith("REFUSED") and "Permission denied" in read, output
    assert KEY not in output
    assert KEY not in proc.stdout  # nor anywhere in the run's events


def test_make_undumpable_takes_effect_in_a_child() -> None:
    # In a child process, so the test process keeps its own flag.
    code = ("from osprey.process_privacy import PR_GET_DUMPABLE, _prctl, make_undumpable\n"
            "before = _prctl(PR_GET_DUMPABLE, 0)\nok = make_undumpable()\nprint(before, ok, _prctl(PR_GET_DUMPABLE, 0))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.split() == ["1", "True", "0"]


def test_a_program_the_broker_runs_is_dumpable_again() -> None:
    # exec resets the flag: commands the model runs (and their debuggers) work as usual.
    code = ("import subprocess, sys\nfrom osprey.process_privacy import make_undumpable\nassert make_undumpable()\n"
            "print(subprocess.run([sys.executable, '-c', 'from osprey.process_privacy import PR_GET_DUMPABLE, _prctl; "
            "print(_prctl(PR_GET_DUMPABLE, 0))'], capture_output=True, text=True, check=True).stdout.strip())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.strip() == "1"
