"""Stray processes in a lane: what a command left running outside its own process group.

A lane is one container per session, so between calls nothing but the sidecar (and the init
that reaps zombies, pid 1) should be running there. A command that escaped its process group
(`setsid`, a daemon, a fork bomb) would otherwise keep the lane's process table full and
starve every later call. The process groups of running programs (Program streams) are spared:
they are the lane's on purpose, and are killed when their streams end. Only ever used inside a lane: on a host this would signal every
process of the user. A `docker exec` process running in the lane at that moment (a compose
healthcheck, say) is killed too; checks that retry are not disturbed by it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Collection

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


def _group(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1  # gone


def reap_strays(spare_groups: Collection[int] = ()) -> int:
    """Kill every process of the lane but pid 1, this one and the members of `spare_groups`;
    how many were running.

    kill(-1) reaches every process this user may signal in one system call, so a fork bomb
    cannot outrun it; a few rounds catch children forked while it ran. With groups to spare,
    the others are killed one by one instead."""
    spared = set(spare_groups)

    def strays() -> list[int]:
        others = _others()
        return [pid for pid in others if _group(pid) not in spared] if spared else others

    before = strays()
    if not before:
        return 0
    for _ in range(MAX_ROUNDS):
        if spared:
            for pid in strays():
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        else:
            try:
                os.kill(-1, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not strays():
            break
        time.sleep(0.005)
    return len(before)
