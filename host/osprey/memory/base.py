"""The memory contract: what the `memory` tool asks of a provider, and what comes back.

Two targets: `memory` (the project and its context) and `user` (facts about the user). Every
failure is a `MemoryStoreError` whose message says what was wrong and what to do; a provider maps
its own failures (file system, HTTP) into it at its boundary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from ..errors import OspreyError

Target = Literal["memory", "user"]
TARGETS: tuple[Target, ...] = ("memory", "user")
BLOCKED = "[blocked: this entry looks like an instruction injection and is not shown]"


class MemoryStoreError(OspreyError):
    """A memory operation failed. `write` says whether it was a write (add, replace, remove, batch):
    the tool counts write failures, not recall failures."""

    def __init__(self, message: str, *, write: bool = True) -> None:
        super().__init__(message)
        self.write = write


class MemoryOperation(BaseModel):
    """One mutation of a batch, applied in order to the batch's target."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use: most sessions never make one

    action: Literal["add", "replace", "remove"]
    content: str = ""
    old_text: str = ""


class MemoryEntry(BaseModel):
    """One remembered entry as recall returns it; `text` is `BLOCKED` for an unsafe entry."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built at first use: most sessions never make one

    target: Target
    text: str
    blocked: bool = False


class MemoryStore(Protocol):
    """A memory provider. Each write returns a short message for the model."""

    name: str

    async def add(self, content: str, target: Target = "memory") -> str:
        """Add one entry; an exact duplicate succeeds without a write."""
        ...

    async def replace(self, old_text: str, content: str, target: Target = "memory") -> str:
        """Replace the single entry holding the non-empty substring `old_text`."""
        ...

    async def remove(self, old_text: str, target: Target = "memory") -> str:
        """Remove the single entry holding the non-empty substring `old_text`."""
        ...

    async def recall(self, query: str) -> list[MemoryEntry]:
        """Entries holding every whitespace-separated term of `query` (case-insensitive), newest
        first within each target, read from the provider's latest state."""
        ...

    async def batch(self, operations: Sequence[MemoryOperation], target: Target = "memory") -> str:
        """Apply `operations` in order to one target: all of them, or none."""
        ...

    async def snapshot(self) -> str:
        """The block for the system prompt, frozen for the session ("" when there is nothing to
        show): the entries, unsafe ones as `BLOCKED`, and each non-empty target's character use."""
        ...

    async def aclose(self) -> None:
        """Release what the provider holds (an HTTP client)."""
        ...
