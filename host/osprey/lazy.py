"""Modules loaded, and regular expressions compiled, on first use: a module's name bound now, the
module executed when an attribute of it is first read; a pattern compiled at its first match.
Start-up time is mostly imports, and some heavy ones (gRPC and protobuf, needed only once a tool
is called) are bound at module level by code that most runs never reach."""

from __future__ import annotations

import importlib.util
import re
import sys
import threading
from collections.abc import Callable, Iterator
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


_importing = threading.Lock()


def imported(name: str) -> ModuleType:
    """`name`, imported now by one thread at a time. PyYAML's C loader imports `yaml` from inside
    `yaml`'s own import: a second thread importing it meanwhile can be handed the half-made
    module (a NameError at the first parse). Every lazy import of it goes through here, and so
    does that of a package importing it that may be first imported in a thread (the docker SDK)."""
    with _importing:
        found = sys.modules.get(name)
        if found is not None and not getattr(getattr(found, "__spec__", None), "_initializing", False):
            return found
        return importlib.import_module(name)


class Pattern:
    """A regular expression compiled at its first use rather than at import (a module's patterns
    often serve a path most runs never take). It offers the `re.Pattern` methods Osprey calls."""

    __slots__ = ("_compiled", "_flags", "_source")

    def __init__(self, source: str, flags: int = 0) -> None:
        self._source, self._flags = source, flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        found = self._compiled
        if found is None:
            found = self._compiled = re.compile(self._source, self._flags)
        return found

    @property
    def pattern(self) -> str:
        return self._source

    def match(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled.match(string, pos, endpos)

    def fullmatch(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled.fullmatch(string, pos, endpos)

    def search(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        return self.compiled.search(string, pos, endpos)

    def finditer(self, string: str, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(string, pos, endpos)

    def sub(self, repl: str | Callable[[re.Match[str]], str], string: str, count: int = 0) -> str:
        return self.compiled.sub(repl, string, count)
