"""Who owns a lane or a dispatcher's socket dir: a broker process, identified across reboots."""

from __future__ import annotations

import os


def boot_id() -> str:
    """This boot's id: a pid recorded in an earlier boot names nothing now."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return "unknown"


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (one we may not signal counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
