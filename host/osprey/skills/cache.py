"""What earlier discoveries read from each SKILL.md, so a session start parses only the changed ones.

Parsing a frontmatter takes PyYAML (its import alone is tens of milliseconds) and a parse per
skill; a session start that finds every SKILL.md as the previous start left it needs neither. The
cache (`$OSPREY_HOME/cache/skills.json`) keeps, for each SKILL.md path, the file's identity (device,
inode, size, modification and change times in nanoseconds) and what its frontmatter gave: the
`name` and `description` text, or why it is not a valid skill. An entry is used only when the file's
identity is unchanged; a file changed within `RACY_NS` of being read is not kept (a change in
the same clock tick could leave its times as they were), so it is read again next time.

The cache decides nothing a reading would not: the fields are checked by the same rules as a
fresh parse, and a skill's body is always read from the file itself. It lives in Osprey's own
directory, which no workspace or lane writes. A missing, over-large or malformed cache is empty;
a cache that cannot be written is left as it was.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..files import FileRefused, read_file
from ..tomlfile import replace_file

VERSION = 1
MAX_ENTRIES = 4_000
MAX_BYTES = 16 * 1024 * 1024
RACY_NS = 2_000_000_000

Identity = tuple[int, int, int, int, int]


def identity(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass(frozen=True)
class Reading:
    """What a SKILL.md's frontmatter gave: its text fields, or why it is not a skill."""

    fields: dict[str, str] | None = None
    error: str | None = None


class FrontmatterCache:
    """The cache at `path` (None: nothing is kept), loaded at the first lookup."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, list[Any]] | None = None
        self._seen: set[str] = set()
        self._changed = False

    def _load(self) -> dict[str, list[Any]]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> dict[str, list[Any]]:
        if self.path is None:
            return {}
        try:
            data = read_file(self.path, MAX_BYTES)
            document = json.loads(data) if data else None
        except (FileRefused, ValueError, RecursionError):
            return {}
        if not isinstance(document, dict) or document.get("version") != VERSION or not isinstance(document.get("skills"), dict):
            return {}
        return {path: entry for path, entry in document["skills"].items() if _valid(entry)}

    def lookup(self, path: str, st: os.stat_result) -> Reading | None:
        """What the file at `path` gave when it had the identity `st` has now, or None."""
        if self.path is None:
            return None
        entry = self._load().get(path)
        if entry is None or tuple(entry[0]) != identity(st):
            return None
        self._seen.add(path)
        kind, value = entry[1], entry[2]
        return Reading(fields=value) if kind == "fields" else Reading(error=value)

    def store(self, path: str, st: os.stat_result, reading: Reading) -> None:
        """Keep what the file at `path` (with identity `st` when it was read) gave."""
        if self.path is None:
            return
        now = time.time_ns()
        if now - st.st_mtime_ns < RACY_NS or now - st.st_ctime_ns < RACY_NS:
            return  # a change within the same tick would not show in its times
        if reading.fields is not None:
            if not all(isinstance(value, str) for value in reading.fields.values()):
                return  # only text fields are kept: anything else is read again (and refused) each time
            entry: list[Any] = [list(identity(st)), "fields", dict(reading.fields)]
        else:
            entry = [list(identity(st)), "error", reading.error]
        self._load()[path] = entry
        self._seen.add(path)
        self._changed = True

    def save(self) -> None:
        """Write the cache when something was added, those seen by this discovery first."""
        if self.path is None or not self._changed:
            return
        entries = self._load()
        order = sorted(entries, key=lambda p: p not in self._seen)[:MAX_ENTRIES]
        document = {"version": VERSION, "skills": {p: entries[p] for p in order}}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            replace_file(self.path, json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8"), 0o600)
        except OSError:
            return
        self._changed = False


def _valid(entry: object) -> bool:
    if not (isinstance(entry, list) and len(entry) == 3):
        return False
    key, kind, value = entry
    if not (isinstance(key, list) and len(key) == 5 and all(type(n) is int for n in key)):
        return False
    if kind == "fields":
        return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    return kind == "error" and isinstance(value, str)
