"""Mixture of agents: several reference models answer one prompt in parallel, then an aggregator
model merges their answers into the final one.

A session runs it (`Session.moa`) and gives it what it needs: its settings, HTTP client and
request limiter (through `MoaProviders`), its system prompt and its conversation. Reference models
get no tools; each has the preset's time limit. The aggregator is told which references failed,
and a mixture ends with a `MoaError` only when none answered or the aggregator failed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..config import RetrySettings, Settings
from ..config.schema import DEFAULT_BASE_URLS, MoaPreset, ResolvedMoa
from ..errors import ConfigError, OspreyError, ProviderError
from ..messages import AssistantMessage, Message, ModelRequest, ToolResultMessage, Usage, UserMessage
from ..providers.turns import TurnTimeout, run_turn

if TYPE_CHECKING:
    import httpx

    from ..providers.base import Provider, TextSink
    from ..providers.limiter import RequestLimiter

# An answer longer than this reaches the aggregator cut (its head, with a note).
MAX_ANSWER_CHARS = 60_000
# A tool call's arguments and a tool result, as the models of a mixture read them, at most.
MAX_CALL_CHARS, MAX_RESULT_CHARS = 2_000, 20_000
# How a preset is written when none is configured yet.
EXAMPLE_PRESET = """\
[moa]
default = "trio"

[moa.presets.trio]
reference_models = ["gpt-4.1", "claude-sonnet-4-5", "gpt-4.1-mini"]
aggregator = "gpt-4.1"
providers = { "claude-sonnet-4-5" = "anthropic" }"""

REFERENCE_NOTE = """\
For this answer you have no tools: answer the last message directly, in text, from what the
conversation holds. Your answer is one of several that another model will merge, so be complete
and precise, and say where you are unsure."""

AGGREGATOR_NOTE = """\
For this answer you have no tools. Several models answered the last message independently; their
answers are below it. Write the single best answer to that message: keep what is correct and
useful in them, resolve where they disagree (say so when it matters), and leave out what is
wrong. Answer the message directly, as your own answer."""


class MoaError(OspreyError):
    """A mixture could not produce an answer: no reference model answered, or the aggregator failed."""


class ModelAnswer(BaseModel):
    """What one model of a mixture did: its answer (or why it has none), its usage and time."""

    model_config = ConfigDict(defer_build=True)

    role: Literal["reference", "aggregator"]
    provider: str
    model: str
    ok: bool
    text: str = Field("", exclude=True)  # in the conversation (the aggregator's), or in its request
    error: str | None = None
    usage: Usage = Field(default_factory=Usage)
    seconds: float = 0.0


def choose_preset(moa: ResolvedMoa, name: str | None = None) -> tuple[str, MoaPreset]:
    """The preset `name` names, else the default one; a ConfigError says how to configure one."""
    if name is None:
        name = moa.default
        if name is None:
            if moa.presets:
                raise ConfigError(f"no default Mixture of Agents preset is chosen (there are: {', '.join(sorted(moa.presets))}); "
                                  "pick one with /moa-config, or set `default` under [moa] in config.toml")
            raise ConfigError("no Mixture of Agents preset is configured: add one with /moa-config, or in "
                              f"$OSPREY_HOME/config.toml, e.g.\n{EXAMPLE_PRESET}\n(see `osprey docs moa`)")
    preset = moa.presets.get(name)
    if preset is None:
        known = ", ".join(sorted(moa.presets)) or "none"
        raise ConfigError(f"there is no Mixture of Agents preset {name!r} (configured: {known}); add it with /moa-config")
    return name, preset


class MoaProviders:
    """One provider per distinct (provider, model) of a mixture, on the session's HTTP client (or a
    client of its own when the session's cannot reach the endpoint's scheme), behind the session's
    request limiter. A model without a provider, or with the session's, talks where the session
    does; another provider talks to its configured endpoint. Close it when the mixture ends."""

    def __init__(self, settings: Settings, moa: ResolvedMoa, *, http: httpx.AsyncClient | None = None,
                 http_plain: bool | None = None, limiter: RequestLimiter | None = None) -> None:
        self.settings = settings
        self.moa = moa
        self._http = http
        self._http_plain = http_plain
        self._limiter = limiter
        self._made: dict[tuple[str, str], Provider] = {}
        self._clients: dict[bool, httpx.AsyncClient] = {}
        self._making = asyncio.Lock()  # the references ask at once: one client per scheme all the same

    def settings_for(self, provider: str | None, model: str) -> Settings:
        """The session's settings with the provider fields of `model` at `provider`; a ConfigError
        when that provider cannot be talked to."""
        own = self.settings
        if provider is None or provider == own.provider:
            if own.provider == "replay":
                raise ConfigError(f"the replay provider plays a recorded session back and cannot answer as {model}; "
                                  "give the model a provider in the preset (providers = { ... })")
            return own.model_copy(update={"model": model})
        endpoint = self.moa.endpoints.get(provider)  # type: ignore[call-overload]
        if endpoint is None:
            raise ConfigError(f"the provider {provider} of {model} has no endpoint; name it in the preset's providers table")
        if endpoint.api_key is None and endpoint.base_url == DEFAULT_BASE_URLS.get(provider):
            raise ConfigError(f"{endpoint.api_key_env} is not set, so {model} cannot be asked ({provider}): put the key in the "
                              f"environment or a .env file, or give [providers.{provider}] a base_url that needs none")
        return own.model_copy(update={"provider": provider, "model": model, "base_url": endpoint.base_url,
                                      "api_key": endpoint.api_key, "replay_file": None})

    async def get(self, provider: str | None, model: str) -> Provider:
        """The provider that asks `model` (made once per provider and model)."""
        from ..providers import make_provider
        from ..providers.base import plain_http

        settings = self.settings_for(provider, model)
        key = (settings.provider, model)
        found = self._made.get(key)
        if found is not None:
            return found
        plain = plain_http(settings.base_url)
        client = self._http if self._http is not None and self._http_plain in (None, plain) else await self._client(plain, settings)
        made = make_provider(settings, client)
        if self._limiter is not None:
            from ..providers.limiter import LimitedProvider

            made = LimitedProvider(made, self._limiter)
        self._made[key] = made
        return made

    async def _client(self, plain: bool, settings: Settings) -> httpx.AsyncClient:
        async with self._making:
            client = self._clients.get(plain)
            if client is None:
                import httpx

                from ..providers.base import http_client

                timeout = httpx.Timeout(settings.retry.turn_timeout, connect=settings.retry.connect_timeout)
                client = self._clients[plain] = await http_client(timeout, settings.base_url).__aenter__()
            return client

    async def aclose(self) -> None:
        """Close the clients made for this mixture (the session's own is left open)."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()


async def _ask(provider: Provider, request: ModelRequest, retry: RetrySettings, timeout: float,
               on_text: TextSink | None = None) -> tuple[str, Usage]:
    """One model's answer within `timeout` seconds, retrying what the server says may pass (a
    session's turn, with the preset's deadline)."""
    try:
        turn = await run_turn(provider, request, retry.model_copy(update={"turn_timeout": timeout}), on_text)
    except TurnTimeout:
        raise ProviderError(f"no answer within {timeout:g} s") from None
    text = turn.message.text.strip()
    if not text:
        raise ProviderError("the model returned an empty answer")
    return text, turn.usage


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}\n[... {len(text) - limit:,} more characters]"


def plain_conversation(messages: Sequence[Message]) -> list[Message]:
    """The conversation as text alone, for models that get no tools: each tool call and result
    becomes a line of text (an API refuses tool calls in a request that offers no tools), and
    reasoning blocks, which only their own model can read back, are left out."""
    import json

    out: list[Message] = []
    for message in messages:
        if isinstance(message, ToolResultMessage):
            said = "failed" if message.is_error else "returned"
            out.append(UserMessage(content=f"[the tool {message.name} {said}:]\n{_cut(message.content, MAX_RESULT_CHARS)}"))
        elif isinstance(message, AssistantMessage):
            calls = [f"[I called the tool {call.name} with {_cut(json.dumps(call.arguments, ensure_ascii=False), MAX_CALL_CHARS)}]"
                     for call in message.tool_calls]
            text = "\n\n".join(part for part in (message.text.strip(), "\n".join(calls)) if part)
            if text:
                out.append(AssistantMessage(text=text))
        else:
            out.append(message)
    return out


def _bounded(text: str) -> str:
    text = text.replace("</answer", "</ answer")  # an answer cannot close its own label early
    if len(text) <= MAX_ANSWER_CHARS:
        return text
    return f"{text[:MAX_ANSWER_CHARS]}\n[... {len(text) - MAX_ANSWER_CHARS:,} more characters of this answer were cut]"


def aggregator_prompt(prompt: str, answers: Sequence[ModelAnswer], instructions: str | None = None) -> str:
    """The last user message the aggregator gets: the prompt, then every reference answer labelled
    with its model, the models that failed, and the preset's instructions."""
    parts = [prompt, "", "---", "Answers of the reference models to the message above:"]
    for answer in answers:
        if answer.ok:
            parts += ["", f'<answer model="{answer.model}">', _bounded(answer.text), "</answer>"]
    failed = [answer for answer in answers if not answer.ok]
    if failed:
        parts += ["", "These reference models did not answer, so their views are missing: "
                  + "; ".join(f"{a.model} ({a.error})" for a in failed)]
    if instructions:
        parts += ["", f"Instructions for merging the answers: {instructions}"]
    return "\n".join(parts)


class Mixture:
    """One run of a preset. `answers` holds every model's outcome as it comes (also when the run
    fails or is cancelled part-way), so the caller can account for what was used."""

    def __init__(self, name: str, preset: MoaPreset, providers: MoaProviders, *, retry: RetrySettings,
                 on_answer: Callable[[ModelAnswer], None] | None = None) -> None:
        self.name = name
        self.preset = preset
        self.providers = providers
        self.retry = retry
        self.on_answer = on_answer
        self.answers: list[ModelAnswer] = []

    @property
    def usage(self) -> Usage:
        """What every model of the run used so far."""
        total = Usage()
        for answer in self.answers:
            total = total + answer.usage
        return total

    def provider_of(self, model: str) -> str:
        """The provider `model` talks to in this run."""
        return self.preset.providers.get(model) or self.providers.settings.provider

    async def _one(self, role: Literal["reference", "aggregator"], model: str, system: str, messages: list[Message],
                   on_text: TextSink | None = None) -> ModelAnswer:
        started = time.monotonic()
        provider_name = self.provider_of(model)
        try:
            provider = await self.providers.get(self.preset.providers.get(model), model)
            text, usage = await _ask(provider, ModelRequest.model_construct(system=system, messages=messages, tools=[]),
                                     self.retry, self.preset.timeout, on_text)
            answer = ModelAnswer(role=role, provider=provider_name, model=model, ok=True, text=text, usage=usage,
                                 seconds=round(time.monotonic() - started, 3))
        except OspreyError as exc:
            answer = ModelAnswer(role=role, provider=provider_name, model=model, ok=False, error=str(exc),
                                 seconds=round(time.monotonic() - started, 3))
        self.answers.append(answer)
        if self.on_answer is not None:
            self.on_answer(answer)
        return answer

    async def run(self, *, system: str, conversation: Sequence[Message], prompt: str, on_text: TextSink | None = None) -> ModelAnswer:
        """Ask every reference model (in parallel) the conversation plus `prompt`, then the
        aggregator, whose answer streams to `on_text` and is returned. A MoaError when no
        reference answered or the aggregator failed."""
        conversation = plain_conversation(conversation)
        asked = [*conversation, UserMessage(content=prompt)]
        reference_system = f"{system}\n\n{REFERENCE_NOTE}"
        references = await asyncio.gather(*(self._one("reference", model, reference_system, asked) for model in self.preset.reference_models))
        if not any(answer.ok for answer in references):
            raise MoaError(f"no reference model of the preset {self.name!r} answered: "
                           + "; ".join(f"{a.model}: {a.error}" for a in references)
                           + ". The session's model is unchanged; check the models' names and providers (/moa-config).")
        merged = [*conversation, UserMessage(content=aggregator_prompt(prompt, references, self.preset.instructions))]
        final = await self._one("aggregator", self.preset.aggregator, f"{system}\n\n{AGGREGATOR_NOTE}", merged, on_text)
        if not final.ok:
            raise MoaError(f"the aggregator {final.model} of the preset {self.name!r} failed: {final.error}")
        return final
