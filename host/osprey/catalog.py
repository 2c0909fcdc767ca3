"""The model catalog the `/model` picker shows: models with their context window, output limit,
prices and capabilities.

Read from `$OSPREY_HOME/cache/models.json` without network (`load_cached`, `initial_catalog`),
refreshed from models.dev for the official OpenAI and Anthropic endpoints and a few known hosted
gateways, or from the configured endpoint's `/models` for any other server (`refresh`).
`catalog_for_picker` yields what is at hand at once, then the refreshed catalog, or the cached
one marked stale when the refresh fails (offline keeps working), or a small built-in list.

Everything a server sends is untrusted: responses are bounded in size and time, and every field
is checked and trimmed before it reaches the cache or the screen.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from .config import DEFAULT_BASE_URLS, DEFAULT_MODELS
from .errors import OspreyError
from .files import read_no_follow
from .tomlfile import write_atomic

MODELS_DEV_URL = "https://models.dev/api.json"
ANTHROPIC_VERSION = "2023-06-01"
CACHE_NAME = "models.json"
MAX_CACHE_BYTES = 8 * 1024 * 1024
# models.dev's api.json lists every provider it knows (a few MiB); a `/models` answer is far smaller.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
MAX_MODELS = 20_000
MAX_PAGES = 20  # Anthropic's `/models` pages
MAX_MODALITIES = 16  # of one model's input modalities read (real lists name two to five)
DEFAULT_TIMEOUT = 10.0

Source = Literal["models.dev", "endpoint", "builtin"]

# Hosted OpenAI-compatible gateways whose models models.dev lists, by the provider id it uses.
KNOWN_HOSTS = {
    "openrouter.ai": "openrouter",
    "api.deepseek.com": "deepseek",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral",
    "api.x.ai": "xai",
}
_OFFICIAL_HOSTS = {"openai": "api.openai.com", "anthropic": "api.anthropic.com"}


class CatalogError(OspreyError):
    """The model catalog could not be fetched or read."""


class ModelInfo(BaseModel):
    """One model as the picker shows it. `provider` is the Osprey provider that speaks to it
    (`openai` for any OpenAI-compatible server); prices are US dollars per million tokens."""

    model_config = ConfigDict(extra="ignore", defer_build=True)  # built when a catalog is first read

    provider: str = Field(min_length=1, max_length=64)
    id: str = Field(min_length=1, max_length=256)
    name: str | None = Field(None, max_length=256)
    context_window: int | None = Field(None, ge=0)
    max_output_tokens: int | None = Field(None, ge=0)
    input_price: float | None = Field(None, ge=0, allow_inf_nan=False)
    output_price: float | None = Field(None, ge=0, allow_inf_nan=False)
    reasoning: bool | None = None
    tool_call: bool | None = None
    # Whether the model takes images in its input (tool results' images are sent to it); None: unknown.
    images: bool | None = None


class Catalog(BaseModel):
    """A list of models and where it came from.

    `scope` says which configuration the list belongs to (see `catalog_scope`), so a cache written
    for one endpoint is not shown for another. `stale` is set when a refresh failed and this is
    older data (or the built-in list); `problem` then says why and what to do."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    models: list[ModelInfo] = Field(default_factory=list, max_length=MAX_MODELS)
    source: Source
    scope: str = ""
    fetched_at: datetime | None = None
    stale: bool = False
    problem: str | None = None

    def for_provider(self, provider: str, *, agents_only: bool = False) -> list[ModelInfo]:
        """The provider's models; with `agents_only`, without those known not to call tools (an
        agent cannot work with them: embedding, image and speech models)."""
        return [m for m in self.models if m.provider == provider and not (agents_only and m.tool_call is False)]

    def find(self, provider: str, model_id: str) -> ModelInfo | None:
        return next((m for m in self.models if m.provider == provider and m.id == model_id), None)


class _CacheFile(BaseModel):
    model_config = ConfigDict(defer_build=True)

    version: Literal[1] = 1
    catalog: Catalog


# ---------------------------------------------------------------------------------------------
# The cache


def cache_path(home: Path) -> Path:
    return home / "cache" / CACHE_NAME


def load_cached(home: Path) -> Catalog | None:
    """The cached catalog, or None when there is none or it cannot be used (a missing, oversized,
    non-regular or malformed file). Never raises, never touches the network."""
    data = read_no_follow(cache_path(home), MAX_CACHE_BYTES + 1)
    if data is None or len(data) > MAX_CACHE_BYTES:
        return None
    try:
        return _CacheFile.model_validate_json(data).catalog
    except (ValidationError, ValueError, RecursionError):
        return None


def save_cache(home: Path, catalog: Catalog) -> None:
    """Replace the cache with `catalog` (crash-atomic, mode 0600 in a 0700 directory). Raises OSError."""
    plain = catalog.model_copy(update={"stale": False, "problem": None})
    write_atomic(cache_path(home), _CacheFile(catalog=plain).model_dump_json() + "\n")


# ---------------------------------------------------------------------------------------------
# Where a catalog comes from


def _redact(url: str) -> str:
    """`url` without a user part, query or fragment: nothing that may hold a credential."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "(malformed)"
    netloc = f"[{host}]" if ":" in host else host
    if port:
        netloc += f":{port}"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def _host(base_url: str | None) -> str:
    try:
        return (urlsplit(base_url).hostname or "").lower() if base_url else ""
    except ValueError:
        return ""


def models_dev_providers(provider: str, base_url: str | None) -> tuple[str, ...] | None:
    """The models.dev providers to keep for this configuration, or None when the catalog comes
    from the endpoint's own `/models`."""
    host = _host(base_url)
    if provider in _OFFICIAL_HOSTS and (not base_url or host == _OFFICIAL_HOSTS[provider]):
        return ("openai", "anthropic")
    if provider == "openai" and host in KNOWN_HOSTS:
        return (KNOWN_HOSTS[host],)
    return None


def catalog_scope(provider: str, base_url: str | None) -> str:
    """A key for the configuration a catalog belongs to: the models.dev providers it keeps, or the
    endpoint (without credentials) it was listed by."""
    kept = models_dev_providers(provider, base_url)
    if kept is not None:
        return "models.dev:" + ",".join(kept)
    return f"{provider}:{_redact(base_url or '')}"


# ---------------------------------------------------------------------------------------------
# Reading untrusted answers

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _text(value: Any, limit: int = 256) -> str | None:
    if not isinstance(value, str):
        return None
    cleaned = _CONTROL.sub("", value).strip()
    return cleaned[:limit] or None


def _model_id(value: Any) -> str | None:
    """An id the picker may offer: printable, at most 256 characters (longer ones are dropped,
    never cut, since a cut id names another model)."""
    if not isinstance(value, str) or not value or len(value) > 256 or _CONTROL.search(value) or value != value.strip():
        return None
    return value


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 1 << 53 else None
    if isinstance(value, float) and value.is_integer() and 0 <= value < 2**53:
        return int(value)
    return None


def _price(value: Any, scale: float = 1.0) -> float | None:
    if isinstance(value, str) and len(value) <= 32:  # OpenRouter sends prices as strings
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    price = round(float(value) * scale, 9)  # per-token strings scaled up: 3.0000000000000004 is 3.0
    return price if math.isfinite(price) and price >= 0 else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _modalities(value: Any) -> set[str] | None:
    """The modalities a list names (`["text", "image"]`), lower-cased; None when it is not a list
    or names none."""
    if not isinstance(value, list):
        return None
    named = {v.strip().lower() for v in value[:MAX_MODALITIES] if isinstance(v, str) and len(v) <= 32}
    return named - {""} or None


def _arrow_inputs(value: Any) -> set[str] | None:
    """The input modalities of a `text+image->text` summary (OpenRouter's `modality`)."""
    if not isinstance(value, str) or len(value) > 200 or "->" not in value:
        return None
    return _modalities(value.split("->", 1)[0].split("+"))


def _takes_images(inputs: set[str] | None, attachment: bool | None = None) -> bool | None:
    """Whether a model takes images: its input modalities say so when they are known; else a model
    that takes no attachments takes no images; else unknown."""
    if inputs is not None:
        return "image" in inputs
    return False if attachment is False else None


def parse_models_dev(data: Any, keep: Iterable[str], *, as_provider: str | None = None) -> list[ModelInfo]:
    """The models of the `keep` providers in models.dev's `api.json` (a mapping of provider id to
    `{models: {id: {name, limit: {context, output}, cost: {input, output}, reasoning, tool_call,
    attachment, modalities: {input, output}}}}`). Each model's `provider` is its models.dev
    provider, or `as_provider` when given."""
    if not isinstance(data, dict):
        raise CatalogError("models.dev answered with something that is not its catalog (not a JSON object); try again later")
    keep = tuple(keep)
    # The providers are the top level; a copy that nests them under "providers" is read too.
    providers = data if any(k in data for k in keep) else _dict(data.get("providers"))
    out: list[ModelInfo] = []
    for provider_id in keep:
        models = _dict(_dict(providers.get(provider_id)).get("models"))
        for key, entry in models.items():
            if not isinstance(entry, dict):
                continue
            model_id = _model_id(entry.get("id", key))
            if model_id is None:
                continue
            limit, cost = _dict(entry.get("limit")), _dict(entry.get("cost"))
            out.append(ModelInfo(
                provider=as_provider or provider_id,
                id=model_id,
                name=_text(entry.get("name")),
                context_window=_count(limit.get("context")),
                max_output_tokens=_count(limit.get("output")),
                input_price=_price(cost.get("input")),
                output_price=_price(cost.get("output")),
                reasoning=_flag(entry.get("reasoning")),
                tool_call=_flag(entry.get("tool_call")),
                images=_takes_images(_modalities(_dict(entry.get("modalities")).get("input")), _flag(entry.get("attachment"))),
            ))
            if len(out) >= MAX_MODELS:
                return out
    return out


def parse_models_list(data: Any, provider: str) -> tuple[list[ModelInfo], str | None]:
    """The models in a `/models` answer (`{"data": [{"id": ...}, ...]}`, OpenAI's and Anthropic's
    shape alike), with what the common servers add: Anthropic's `display_name`, vLLM's
    `max_model_len`, OpenRouter's `context_length`, per-token `pricing`, `supported_parameters` and
    `architecture` (its input modalities). Also the id to list the next page after, when the answer
    says it `has_more`."""
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise CatalogError("the server's /models answer has no `data` list of models; check --base-url "
                           "(it should end where `/chat/completions` or `/messages` follows, e.g. http://localhost:8080/v1)")
    out: list[ModelInfo] = []
    for entry in data["data"][:MAX_MODELS]:
        entry = _dict(entry)
        model_id = _model_id(entry.get("id"))
        if model_id is None:
            continue
        pricing, top, arch = _dict(entry.get("pricing")), _dict(entry.get("top_provider")), _dict(entry.get("architecture"))
        params = entry.get("supported_parameters")
        params = [p for p in params if isinstance(p, str)] if isinstance(params, list) else None
        out.append(ModelInfo(
            provider=provider,
            id=model_id,
            name=_text(entry.get("display_name")) or _text(entry.get("name")),
            context_window=_count(entry.get("context_length")) or _count(entry.get("max_model_len"))
            or _count(entry.get("context_window")) or _count(top.get("context_length")),
            max_output_tokens=_count(top.get("max_completion_tokens")) or _count(entry.get("max_output_tokens")),
            input_price=_price(pricing.get("prompt"), 1_000_000),
            output_price=_price(pricing.get("completion"), 1_000_000),
            reasoning=("reasoning" in params) if params is not None else None,
            tool_call=("tools" in params) if params is not None else None,
            images=_takes_images(_modalities(arch.get("input_modalities")) or _arrow_inputs(arch.get("modality"))),
        ))
    last = _model_id(data.get("last_id")) if data.get("has_more") is True else None
    return out, last


def _finish(models: Iterable[ModelInfo]) -> list[ModelInfo]:
    """One entry per (provider, id), sorted."""
    unique = {(m.provider, m.id): m for m in models}
    return [unique[k] for k in sorted(unique)][:MAX_MODELS]


# ---------------------------------------------------------------------------------------------
# Fetching


def _detail(body: bytes) -> str:
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return _text(body[:300].decode("utf-8", "replace"), 200) or "no detail"
    err = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(err, dict):
        err = err.get("message") or err.get("type")
    return _text(err if isinstance(err, str) else json.dumps(payload)[:300], 200) or "no detail"


async def _get_json(
    client: httpx.AsyncClient,
    url: str,
    *,
    label: str,
    headers: Mapping[str, str],
    params: Mapping[str, str] | None,
    timeout: float,
    max_bytes: int,
    follow_redirects: bool,
) -> Any:
    """GET `url` and parse its JSON body: at most `max_bytes` bytes (decoded), within `timeout`
    seconds in all. Every failure is a CatalogError saying what to do."""
    shown = _redact(url)
    try:
        async with asyncio.timeout(timeout):
            async with client.stream("GET", url, headers=dict(headers), params=params, timeout=timeout,
                                     follow_redirects=follow_redirects) as response:
                body = bytearray()
                if response.status_code != 200:
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) >= 4096:
                            break
                    raise CatalogError(_status_message(label, shown, response.status_code, _detail(bytes(body))))
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise CatalogError(_too_large(label, shown, max_bytes))
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise CatalogError(_too_large(label, shown, max_bytes))
    except TimeoutError:
        raise CatalogError(f"{label} did not answer within {timeout:g} s ({shown}); check your network "
                           f"connection or the server, then open the picker again") from None
    except httpx.TimeoutException as exc:
        raise CatalogError(f"{label} did not answer in time ({type(exc).__name__} at {shown}); check your "
                           f"network connection or the server, then open the picker again") from None
    except (httpx.InvalidURL, httpx.UnsupportedProtocol):
        raise CatalogError(f"{label}'s address {shown} is not a valid http:// or https:// URL; check --base-url") from None
    except httpx.HTTPError as exc:
        raise CatalogError(f"{label} could not be reached at {shown} ({type(exc).__name__}); you may be "
                           f"offline: the cached list is shown until a refresh succeeds") from None
    try:
        return json.loads(bytes(body))
    except (ValueError, RecursionError):
        raise CatalogError(f"{label} at {shown} did not answer with JSON; check the URL") from None


def _status_message(label: str, url: str, status: int, detail: str) -> str:
    hint = ""
    if status in (401, 403):
        hint = " Check the API key (OPENAI_API_KEY, ANTHROPIC_API_KEY or the variable api_key_env names)."
    elif status == 404:
        hint = " The server lists no models there; check --base-url, or type the model name with --model."
    elif status in (301, 302, 303, 307, 308):
        hint = " The server sends the request elsewhere; set --base-url to the address it should be."
    elif status == 429 or status >= 500:
        hint = " Try again later."
    return f"{label} answered HTTP {status} at {url}: {detail}.{hint}"


def _too_large(label: str, url: str, limit: int) -> str:
    return (f"{label} sent more than {limit // (1024 * 1024) or 1} MiB at {url}, more than Osprey reads for a "
            f"model list; check the URL")


async def _from_models_dev(
    client: httpx.AsyncClient, url: str, keep: tuple[str, ...], as_provider: str | None, timeout: float, max_bytes: int
) -> list[ModelInfo]:
    data = await _get_json(client, url, label="models.dev", headers={"Accept": "application/json"}, params=None,
                           timeout=timeout, max_bytes=max_bytes, follow_redirects=True)
    return parse_models_dev(data, keep, as_provider=as_provider)


async def _from_endpoint(
    client: httpx.AsyncClient, provider: str, base_url: str, api_key: str | None, timeout: float, max_bytes: int
) -> list[ModelInfo]:
    url = base_url.rstrip("/") + "/models"
    headers = {"Accept": "application/json"}
    if provider == "anthropic":
        headers["anthropic-version"] = ANTHROPIC_VERSION
        if api_key:
            headers["x-api-key"] = api_key
    elif api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    label = "the model server" if provider != "anthropic" else "the Anthropic endpoint"
    models: list[ModelInfo] = []
    params: dict[str, str] | None = {"limit": "1000"} if provider == "anthropic" else None
    for _ in range(MAX_PAGES):
        # A redirect is not followed: it could carry the key to another host.
        data = await _get_json(client, url, label=label, headers=headers, params=params, timeout=timeout,
                               max_bytes=max_bytes, follow_redirects=False)
        page, after = parse_models_list(data, provider)
        models += page
        if after is None or provider != "anthropic" or len(models) >= MAX_MODELS:
            break
        params = {"limit": "1000", "after_id": after}
    return models


async def refresh(
    client: httpx.AsyncClient,
    provider: str,
    base_url: str | None,
    api_key: str | SecretStr | None,
    *,
    home: Path | None = None,
    models_dev_url: str = MODELS_DEV_URL,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> Catalog:
    """Fetch the catalog for this configuration and, with `home`, write it to the cache.

    The official OpenAI and Anthropic endpoints (or no `base_url`) and the known hosted gateways
    (`KNOWN_HOSTS`) take models.dev's list; any other `base_url` is asked for its `/models`, with
    the key when there is one. A gateway models.dev knows nothing of is asked for `/models` too.
    Raises CatalogError; a cache that cannot be written is reported in `problem`, not raised."""
    if provider not in ("openai", "anthropic"):
        raise CatalogError(f"the {provider} provider has no model catalog; choose openai or anthropic with /provider")
    key = api_key.get_secret_value() if isinstance(api_key, SecretStr) else api_key
    keep = models_dev_providers(provider, base_url)
    gateway = keep is not None and keep[0] not in ("openai", "anthropic")
    models: list[ModelInfo] = []
    source: Source = "models.dev"
    try:
        async with asyncio.timeout(timeout):
            if keep is not None:
                models = await _from_models_dev(client, models_dev_url, keep, provider if gateway else None, timeout, max_bytes)
            if keep is None or (gateway and not models):
                source = "endpoint"
                models = await _from_endpoint(client, provider, base_url or DEFAULT_BASE_URLS[provider], key, timeout, max_bytes)
            elif not models:  # an empty answer must not replace a good cache
                raise CatalogError("models.dev lists no OpenAI or Anthropic models (a partial answer?); try again later")
    except TimeoutError:
        raise CatalogError(f"the model list did not arrive within {timeout:g} s; check your network connection "
                           f"or the server, then open the picker again") from None
    catalog = Catalog(models=_finish(models), source=source, scope=catalog_scope(provider, base_url),
                      fetched_at=datetime.now(UTC))
    if home is not None:
        try:
            save_cache(home, catalog)
        except OSError as exc:
            catalog.problem = f"the model list could not be cached at {cache_path(home)}: {exc.strerror or exc}"
    return catalog


# ---------------------------------------------------------------------------------------------
# What the picker shows

BUILTIN_MODELS = (
    ModelInfo(provider="openai", id=DEFAULT_MODELS["openai"], name="GPT-4.1", context_window=1_047_576,
              max_output_tokens=32_768, input_price=2.0, output_price=8.0, reasoning=False, tool_call=True, images=True),
    ModelInfo(provider="anthropic", id=DEFAULT_MODELS["anthropic"], name="Claude Sonnet 4.5", context_window=200_000,
              max_output_tokens=64_000, input_price=3.0, output_price=15.0, reasoning=True, tool_call=True, images=True),
)


def builtin_catalog(provider: str, base_url: str | None, current_model: str | None = None) -> Catalog:
    """The list shown with no cache and no network: the default models on the official endpoints,
    and the model in use (the only one known for any other server)."""
    scope = catalog_scope(provider, base_url)
    models = list(BUILTIN_MODELS) if scope == catalog_scope("openai", None) else []
    if current_model and provider in ("openai", "anthropic") and _model_id(current_model):
        if not any((m.provider, m.id) == (provider, current_model) for m in models):
            models.append(ModelInfo(provider=provider, id=current_model))
    return Catalog(models=_finish(models), source="builtin", scope=scope)


def initial_catalog(home: Path, provider: str, base_url: str | None, current_model: str | None = None) -> Catalog:
    """What to show at once, without network: the cache when it belongs to this configuration,
    else the built-in list."""
    cached = load_cached(home)
    if cached is not None and cached.scope == catalog_scope(provider, base_url):
        return cached
    return builtin_catalog(provider, base_url, current_model)


async def catalog_for_picker(
    client: httpx.AsyncClient,
    home: Path,
    provider: str,
    base_url: str | None,
    api_key: str | SecretStr | None,
    *,
    current_model: str | None = None,
    models_dev_url: str = MODELS_DEV_URL,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> AsyncIterator[Catalog]:
    """Yield the catalog to show at once (`initial_catalog`, no network), then the refreshed one;
    when the refresh fails, the first one again marked `stale`, with `problem` saying why."""
    first = initial_catalog(home, provider, base_url, current_model)
    yield first
    try:
        fresh = await refresh(client, provider, base_url, api_key, home=home, models_dev_url=models_dev_url,
                              timeout=timeout, max_bytes=max_bytes)
    except CatalogError as exc:
        yield first.model_copy(update={"stale": True, "problem": str(exc)})
        return
    yield fresh


def takes_images(home: Path, provider: str, base_url: str | None, model: str) -> bool:
    """Whether to send `model` the images of tool results: False only when the catalog at hand
    (the cache of this configuration, else the built-in list; no network) says it takes none."""
    found = initial_catalog(home, provider, base_url).find(provider, model)
    return found is None or found.images is not False


def estimated_cost(input_tokens: int, output_tokens: int, info: ModelInfo | None) -> float | None:
    """US dollars for this many tokens at the model's list prices, or None when they are unknown.
    Cache reads and writes are not priced apart (providers bill them differently)."""
    if info is None or info.input_price is None or info.output_price is None:
        return None
    return (input_tokens * info.input_price + output_tokens * info.output_price) / 1_000_000
