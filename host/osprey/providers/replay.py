"""Replay a recorded session offline, and record any provider's session to a file.

A recording is JSON Lines: a header, then one line per model turn in order.
    {"type": "header", "format": "osprey-recording", "version": 1, "provider": ..., "model": ...}
    {"type": "turn", "index": 0, "turn": {ModelTurn}}
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from ..errors import ConfigError, ProviderError
from ..messages import ModelRequest, ModelTurn
from ..numbers import counted
from .base import Provider, TextSink, loads

FORMAT = "osprey-recording"
VERSION = 1


def load_recording(path: Path) -> tuple[dict[str, Any], list[ModelTurn]]:
    """The header and turns of a recording; a clear error for anything malformed."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"replay file {path} cannot be read: {exc.strerror}") from None
    header: dict[str, Any] | None = None
    turns: list[ModelTurn] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{number}: not JSON ({exc.msg})") from None
        kind = record.get("type") if isinstance(record, dict) else None
        if kind == "header":
            if record.get("format") != FORMAT or record.get("version") != VERSION:
                raise ConfigError(f"{path}:{number}: not an {FORMAT} v{VERSION} file")
            header = record
        elif kind == "turn":
            try:
                turns.append(ModelTurn.model_validate(record.get("turn")))
            except ValidationError as exc:
                raise ConfigError(f"{path}:{number}: invalid turn: {exc.errors()[0]['msg']}") from None
        else:
            raise ConfigError(f"{path}:{number}: unknown record type {kind!r}")
    if header is None:
        raise ConfigError(f"{path}: no header line; is this an Osprey recording (osprey agent --record FILE)?")
    if not turns:
        raise ConfigError(f"{path}: the recording holds no turns")
    return header, turns


class ReplayProvider:
    """Plays back recorded turns in order; tools still run for real."""

    name = "replay"

    def __init__(self, path: Path) -> None:
        self.path = path
        header, self.turns = load_recording(path)
        self.model = f"replay:{header.get('model', '?')}"
        self.position = 0

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelTurn:
        if self.position >= len(self.turns):
            raise ProviderError(
                f"the recording {self.path} has only {counted(len(self.turns), 'turn')} and the session asked for more; "
                "the session went differently from the recorded one"
            )
        turn = self.turns[self.position]
        self.position += 1
        if on_text and turn.message.text:
            on_text(turn.message.text)
        return turn


class RecordingProvider:
    """Wraps a provider and appends every turn it produces to a recording file."""

    def __init__(self, inner: Provider, sink: IO[str]) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self.sink = sink
        self.count = 0
        self._write({"type": "header", "format": FORMAT, "version": VERSION, "provider": inner.name, "model": inner.model, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})

    def _write(self, record: dict[str, Any]) -> None:
        self.sink.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.sink.flush()

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelTurn:
        turn = await self.inner.complete(request, on_text)
        self._write({"type": "turn", "index": self.count, "turn": turn.model_dump(mode="json", exclude_defaults=True)})
        self.count += 1
        return turn
