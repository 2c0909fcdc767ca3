"""Model providers behind one interface, chosen in one place (`make_provider`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import httpx

from ..config import Settings
from ..messages import ModelRequest, ModelTurn, ToolResultMessage
from .base import Provider, TextSink


def make_provider(settings: Settings, client: httpx.AsyncClient, *, images: Callable[[], bool] | None = None) -> Provider:
    """The provider the settings name; `client` is the caller's, so tests can pass their own.

    `images` says whether the model takes images (e.g. what the model catalog knows of it); it is
    asked once, at the first request that holds a tool result's images, so a session that sees
    none never pays for it. Without it, images are sent."""
    if settings.provider == "replay":
        from .replay import ReplayProvider

        assert settings.replay_file is not None
        return ReplayProvider(settings.replay_file)
    key = settings.api_key.get_secret_value() if settings.api_key else None
    assert settings.base_url is not None
    made: _TakesImages
    if settings.provider == "anthropic":
        from .anthropic import AnthropicProvider

        made = AnthropicProvider(client, settings.model, settings.base_url, key, settings.effort, settings.max_tokens)
    else:
        from .openai import OpenAIProvider

        made = OpenAIProvider(client, settings.model, settings.base_url, key, settings.effort)
    return made if images is None else ImagesAsked(made, images)


class _TakesImages(Provider, Protocol):
    images: bool  # whether tool results' images are sent (else notes stand for them)


class ImagesAsked:
    """A provider whose model is sent tool results' images unless `takes_images()`, asked at the
    first request that holds one, says it takes none (then notes stand for them)."""

    def __init__(self, inner: _TakesImages, takes_images: Callable[[], bool]) -> None:
        self.inner = inner
        self.name = inner.name
        self.model = inner.model
        self._ask: Callable[[], bool] | None = takes_images

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelTurn:
        if self._ask is not None and any(isinstance(m, ToolResultMessage) and m.images for m in request.messages):
            self.inner.images, self._ask = self._ask(), None
        return await self.inner.complete(request, on_text)


def effort_supported(settings: Settings) -> bool:
    """Whether the chosen model takes a reasoning setting (so `--effort` has an effect)."""
    if settings.provider == "anthropic":
        from .anthropic import supports_effort
    elif settings.provider == "openai":
        from .openai import supports_effort
    else:
        return False
    return supports_effort(settings.model)


__all__ = ["Provider", "ImagesAsked", "make_provider", "effort_supported"]
