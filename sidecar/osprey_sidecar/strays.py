"""Stray processes in a lane: what a command left running outside its own process group.

A lane is one container per session, so between calls nothing but the sidecar (and the init
that reaps zombies, pid 1) should be running there. A command that escaped its process group
(`setsid`, a daemon, a fork bomb) would otherwise keep the lane's process table full and
starve every later call. Only ever used inside a lane: on a host this would signal every
process of the user. A `docker exec` process running in the lane at that moment (a compose
healthcheck, say) is killed too; checks that retry are not disturbed by it.
"""

from __future__ import annotations

import os
import signal
import time

MAX_ROUNDS = 50


def _others() -> list[int]:
    me = os.getpid()
    pids: list[int] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return pids
    for name in names:
        if name.isdigit():
            pid = int(name)
            if pid not in (1, me):
                pids.append(pid)
    return pids


def reap_strays() -> int:
    """Kill every process of the lane but pid 1 and this one; how many were running.

    kill(-1) reaches every process this user may signal in one system call, so a fork bomb
    cannot outrun it; a few rounds catch children forked while it ran."""
    before = _others()
    if not before:
        return 0
    for _ in range(MAX_ROUNDS):
        try:
            os.kill(-1, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if not _others():
            break
        time.sleep(0.005)
    return len(before)
