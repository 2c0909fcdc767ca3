"""The memory entries the injection check has passed, remembered in `.checked` beside the files.

Every session's start shows memory in the system prompt, and each entry must pass `safety.unsafe`
first; compiling its patterns alone takes tens of milliseconds. So the digests of the entries
that passed are kept, and an entry whose digest is listed is not checked again. The list is only
as trusted as the memory files beside it (both are Osprey's own files in `$OSPREY_HOME`, which no
workspace or lane can write), and it names the check it was made with (a digest of the patterns),
so entries are checked again once the patterns change. Entries that did not pass are never listed.

Format: a first line `osprey-memory-checked 1 RULES`, then one hex digest (BLAKE2b, 16 bytes) a
line. The file is replaced atomically (0600); a missing, unreadable, over-large or foreign file is
an empty list, and a write that fails is ignored: the cost is a check, never a wrong answer.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from ..files import FileRefused, read_file
from ..tomlfile import replace_file
from . import safety

CHECKED_NAME = ".checked"
MAX_DIGESTS = 4096  # far more entries than the limits let the two files hold
_DIGEST_CHARS = 32
_MAGIC = "osprey-memory-checked 1"
_MAX_BYTES = 128 + MAX_DIGESTS * (_DIGEST_CHARS + 1)


@functools.cache
def rules() -> str:
    """A digest of everything `safety.unsafe` decides by: a list made with other patterns is void."""
    parts = (safety.MAX_CHECKED, safety._HIDDEN.pattern, safety._CONTROL.pattern, safety._RAW_PATTERNS, safety._WORD_PATTERNS)
    return hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=16).hexdigest()


def digest(text: str) -> str:
    """The digest an entry is listed by."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


class CheckedEntries:
    """The list in one memory directory: `unsafe` answers from it when it can, `save` writes it
    back when it changed (keeping only the digests `keep` names, when given)."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / CHECKED_NAME
        self._passed: set[str] | None = None
        self._seen: set[str] = set()
        self._changed = False

    def _load(self) -> set[str]:
        if self._passed is None:
            self._passed = self._read()
        return self._passed

    def _read(self) -> set[str]:
        try:
            data = read_file(self.path, _MAX_BYTES)
        except FileRefused:
            return set()
        if data is None:
            return set()
        lines = data.decode("ascii", errors="replace").split("\n")
        if lines[0] != f"{_MAGIC} {rules()}":
            return set()
        return {line for line in lines[1:] if len(line) == _DIGEST_CHARS and all(c in "0123456789abcdef" for c in line)}

    def unsafe(self, text: str) -> str | None:
        """`safety.unsafe(text)`, without running the check for an entry listed as passed."""
        key = digest(text)
        self._seen.add(key)
        passed = self._load()
        if key in passed:
            return None
        reason = safety.unsafe(text)
        if reason is None:
            passed.add(key)
            self._changed = True
        return reason

    def passed(self, text: str) -> None:
        """Record that `text` passed the check (it was checked where it was written)."""
        key = digest(text)
        self._seen.add(key)
        passed = self._load()
        if key not in passed:
            passed.add(key)
            self._changed = True

    def save(self, *, prune: bool = False) -> None:
        """Write the list when it changed. With `prune`, only the entries looked at since this
        object was made are kept (a snapshot looks at every entry of both files)."""
        passed = self._load()
        if prune and not passed <= self._seen:
            passed &= self._seen
            self._changed = True
        if not self._changed:
            return
        kept = sorted(passed)[:MAX_DIGESTS]
        try:
            replace_file(self.path, "\n".join([f"{_MAGIC} {rules()}", *kept, ""]).encode("ascii"), 0o600)
        except OSError:
            return
        self._changed = False
