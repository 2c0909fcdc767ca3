"""Modules loaded on first use: a name bound now, the module executed when an attribute of it is
first read. Start-up time is mostly imports, and some heavy ones (gRPC and protobuf, needed only
once a tool is called) are bound at module level by code that most runs never reach."""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType

_lock = threading.Lock()


def module(name: str) -> ModuleType:
    """`name`, loaded when first used (at once if it is already loaded). Its parent packages are
    imported now; keep them light."""
    with _lock:
        found = sys.modules.get(name)
        if found is not None:
            return found
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        loader = importlib.util.LazyLoader(spec.loader)
        spec.loader = loader
        lazy = importlib.util.module_from_spec(spec)
        sys.modules[name] = lazy
        loader.exec_module(lazy)
        return lazy
