"""`open_store`: the memory provider the settings name, built in one place."""

from __future__ import annotations

from ..config import Settings
from .base import MemoryStore


def open_store(settings: Settings) -> MemoryStore | None:
    """The configured provider, or None for `provider = "none"`. A provider that cannot be built
    (Hindsight's cloud without HINDSIGHT_API_KEY) raises ConfigError, which stops the start."""
    memory = settings.memory
    if memory.provider == "none":
        return None
    if memory.provider == "hindsight":
        from .hindsight import HindsightMemory

        return HindsightMemory(memory.hindsight, api_key=settings.hindsight_api_key)
    from .builtin import BuiltinMemory

    return BuiltinMemory(settings.home / "memory", memory_char_limit=memory.memory_char_limit, user_char_limit=memory.user_char_limit)
