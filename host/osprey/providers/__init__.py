"""Model providers behind one interface, chosen in one place (`make_provider`)."""

from __future__ import annotations

import httpx

from ..config import Settings
from .base import Provider


def make_provider(settings: Settings, client: httpx.AsyncClient) -> Provider:
    """The provider the settings name; `client` is the caller's, so tests can pass their own."""
    if settings.provider == "replay":
        from .replay import ReplayProvider

        assert settings.replay_file is not None
        return ReplayProvider(settings.replay_file)
    key = settings.api_key.get_secret_value() if settings.api_key else None
    assert settings.base_url is not None
    if settings.provider == "anthropic":
        from .anthropic import AnthropicProvider

        return AnthropicProvider(client, settings.model, settings.base_url, key, settings.effort, settings.max_tokens)
    from .openai import OpenAIProvider

    return OpenAIProvider(client, settings.model, settings.base_url, key, settings.effort)


def effort_supported(settings: Settings) -> bool:
    """Whether the chosen model takes a reasoning setting (so `--effort` has an effect)."""
    if settings.provider == "anthropic":
        from .anthropic import supports_effort
    elif settings.provider == "openai":
        from .openai import supports_effort
    else:
        return False
    return supports_effort(settings.model)


__all__ = ["Provider", "make_provider", "effort_supported"]
