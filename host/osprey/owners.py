"""Who owns a lane or a dispatcher's socket dir: a broker process, identified across reboots."""

from __future__ import annotations

import functools
import os


def boot_id() -> str:
    """This boot's id: a pid recorded in an earlier boot names nothing now."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return "unknown"


@functools.cache
def host_id() -> str:
    """This machine's id (its machine-id, else its host name): lanes on an engine that brokers on
    several machines share carry it, so that a broker judges only its own machine's lanes."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path, encoding="ascii") as fh:
                value = fh.read(64).strip()
        except (OSError, UnicodeDecodeError):
            continue
        if value:
            return value
    import socket

    return "host:" + socket.gethostname()[:64]


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


def pid_namespace() -> str:
    """This process's pid namespace: a pid recorded in another one names nothing here."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return "unknown"


def owner_record() -> str:
    """What identifies this process as an owner: pid, boot id and pid namespace."""
    return f"{os.getpid()} {boot_id()} {pid_namespace()}"


def owner_gone(record: str) -> bool:
    """Whether the process an `owner_record` names is certainly gone. One from another pid
    namespace cannot be checked from here, so it counts as alive."""
    parts = record.split()
    if len(parts) != 3 or not parts[0].isdigit():
        return False  # not a record of ours
    pid, boot, namespace = int(parts[0]), parts[1], parts[2]
    if boot != boot_id():
        return True
    if namespace != pid_namespace():
        return False
    return not pid_alive(pid)
