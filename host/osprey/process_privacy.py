"""Keeping the broker's memory and environment (which hold the provider's API key) from other
processes of the same user, such as the commands the model runs on the host."""

from __future__ import annotations

import ctypes
import sys

# prctl(2) options.
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4


def _prctl(option: int, value: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result: int = libc.prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if result < 0:
        raise OSError(ctypes.get_errno(), "prctl failed")
    return result


def make_undumpable() -> bool:
    """Mark this process not dumpable (Linux `prctl(PR_SET_DUMPABLE, 0)`): another process of the
    same user can then neither read its `/proc/PID/environ` or `/proc/PID/mem` nor attach to it
    (ptrace, gdb, py-spy), and it leaves no core dump; root with CAP_SYS_PTRACE still can. A program
    it executes starts dumpable again. Returns whether it took effect; elsewhere, or when the call
    fails, nothing changes and a debug message says why."""
    if not sys.platform.startswith("linux"):
        _trace(f"processes stay dumpable on {sys.platform}: prctl(PR_SET_DUMPABLE) is Linux's")
        return False
    try:
        _prctl(PR_SET_DUMPABLE, 0)
        return _prctl(PR_GET_DUMPABLE, 0) == 0
    except (OSError, AttributeError) as exc:
        _trace(f"prctl(PR_SET_DUMPABLE, 0) failed, this process stays dumpable: {exc}")
        return False


def _trace(message: str) -> None:
    import logging

    logging.getLogger("osprey").debug(message)
