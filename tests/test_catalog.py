"""The model catalog: models.dev and `/models` answers from loopback servers, the cache, and
what the picker shows when the network fails. No test reaches beyond 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from osprey import catalog
from osprey.catalog import (
    Catalog,
    CatalogError,
    ModelInfo,
    builtin_catalog,
    cache_path,
    catalog_for_picker,
    catalog_scope,
    load_cached,
    refresh,
    save_cache,
)

SAMPLE = (Path(__file__).parent / "data" / "models_dev_sample.json").read_bytes()


# ---------------------------------------------------------------------------------------------
# A loopback HTTP server with scripted routes


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False  # no Content-Length: the body in 1 KiB chunks
    hang: bool = False  # never answer (until the server closes)
    trickle: bool = False  # headers, then a byte every 50 ms until the server closes


@dataclass
class Seen:
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


class Loopback:
    def __init__(self) -> None:
        self.routes: dict[str, list[Route]] = {}
        self.seen: list[Seen] = []
        self.closing = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                outer.seen.append(Seen(parts.path, parse_qs(parts.query), {k.lower(): v for k, v in self.headers.items()}))
                queue = outer.routes.get(parts.path)
                route = (queue.pop(0) if len(queue) > 1 else queue[0]) if queue else Route(b'{"error": "no route"}', 404)
                if route.hang:
                    outer.closing.wait(30)
                    return
                self.send_response(route.status)
                for name, value in route.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                if route.trickle:  # no length: the body runs until the connection closes
                    self.send_header("Connection", "close")
                    self.end_headers()
                    while not outer.closing.wait(0.05):
                        try:
                            self.wfile.write(b" ")
                            self.wfile.flush()
                        except OSError:
                            return
                    return
                if route.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    try:
                        for i in range(0, len(route.body), 1024):
                            piece = route.body[i:i + 1024]
                            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                        self.wfile.write(b"0\r\n\r\n")
                    except OSError:
                        return
                    return
                self.send_header("Content-Length", str(len(route.body)))
                self.end_headers()
                try:
                    self.wfile.write(route.body)
                except OSError:
                    return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def route(self, path: str, *routes: Route) -> None:
        self.routes[path] = list(routes)

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server() -> Iterator[Loopback]:
    loop = Loopback()
    try:
        yield loop
    finally:
        loop.close()


async def _loopback_only(request: httpx.Request) -> None:
    if request.url.host != "127.0.0.1":
        raise AssertionError(f"a test tried to reach {request.url.host}")


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    hooks: dict[str, list] = {"request": [_loopback_only]}
    async with httpx.AsyncClient(trust_env=False, event_hooks=hooks) as c:
        yield c


def _dead_url() -> str:
    """A loopback URL nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _ids(cat: Catalog) -> list[tuple[str, str]]:
    return [(m.provider, m.id) for m in cat.models]


# ---------------------------------------------------------------------------------------------
# models.dev


async def test_models_dev_keeps_openai_and_anthropic(server: Loopback, client: httpx.AsyncClient, tmp_path: Path) -> None:
    server.route("/api.json", Route(SAMPLE))
    cat = await refresh(client, "openai", None, "sk-secret", models_dev_url=server.url + "/api.json")
    assert cat.source == "models.dev" and cat.scope == "models.dev:openai,anthropic"
    assert _ids(cat) == [
        ("anthropic", "claude-3-5-haiku-20241022"), ("anthropic", "claude-sonnet-4-5"),
        ("openai", "gpt-4.1"), ("openai", "gpt-5"), ("openai", "text-embedding-3-small"),
    ]
    gpt5 = cat.find("openai", "gpt-5")
    assert gpt5 == ModelInfo(provider="openai", id="gpt-5", name="GPT-5", context_window=400_000, max_output_tokens=128_000,
                             input_price=1.25, output_price=10.0, reasoning=True, tool_call=True, images=True)
    sonnet = cat.find("anthropic", "claude-sonnet-4-5")
    assert sonnet is not None and (sonnet.context_window, sonnet.input_price, sonnet.output_price) == (200_000, 3.0, 15.0)
    assert cat.fetched_at is not None and cat.fetched_at.tzinfo is not None
    # models.dev never sees the key
    (request,) = server.seen
    assert "authorization" not in request.headers and "x-api-key" not in request.headers


async def test_official_anthropic_endpoint_uses_models_dev(server: Loopback, client: httpx.AsyncClient) -> None:
    server.route("/api.json", Route(SAMPLE))
    cat = await refresh(client, "anthropic", "https://api.anthropic.com/v1", "k", models_dev_url=server.url + "/api.json")
    assert cat.source == "models.dev" and len(cat.for_provider("anthropic")) == 2


async def test_models_dev_for_a_known_gateway(server: Loopback, client: httpx.AsyncClient) -> None:
    server.route("/api.json", Route(SAMPLE))
    cat = await refresh(client, "openai", "https://openrouter.ai/api/v1", "k", models_dev_url=server.url + "/api.json")
    assert cat.scope == "models.dev:openrouter"
    # Osprey speaks to OpenRouter as an OpenAI-compatible server
    assert _ids(cat) == [("openai", "openai/gpt-oss-120b"), ("openai", "qwen/qwen3-coder")]


async def test_gateway_models_dev_does_not_list_falls_back_to_its_models(
    server: Loopback, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(catalog.KNOWN_HOSTS, "127.0.0.1", "deepseek")  # not in the sample
    server.route("/api.json", Route(SAMPLE))
    server.route("/v1/models", Route(json.dumps({"object": "list", "data": [{"id": "deepseek-chat"}]}).encode()))
    cat = await refresh(client, "openai", server.url + "/v1", "k", models_dev_url=server.url + "/api.json")
    assert cat.source == "endpoint" and _ids(cat) == [("openai", "deepseek-chat")]
    assert [s.path for s in server.seen] == ["/api.json", "/v1/models"]


async def test_models_dev_without_our_providers_keeps_the_cache(server: Loopback, client: httpx.AsyncClient, tmp_path: Path) -> None:
    save_cache(tmp_path, builtin_catalog("openai", None))
    server.route("/api.json", Route(b'{"google": {"models": {"gemini-2.5-pro": {}}}}'))
    with pytest.raises(CatalogError, match="lists no OpenAI or Anthropic models"):
        await refresh(client, "openai", None, None, home=tmp_path, models_dev_url=server.url + "/api.json")
    assert load_cached(tmp_path) == builtin_catalog("openai", None)


def test_models_dev_hostile_entries() -> None:
    data = {"openai": {"models": {
        "ok": {"name": "Fine\x1b[31m\u202e", "limit": {"context": 1.0e3, "output": -5}, "cost": {"input": "NaN", "output": 1e400},
               "reasoning": "yes", "tool_call": True},
        "x" * 300: {},
        "bad\nid": {},
        "entry-not-object": 5,
        "other": {"id": 7},
    }}, "anthropic": "nope"}
    models = catalog.parse_models_dev(data, ["openai", "anthropic"])
    assert models == [ModelInfo(provider="openai", id="ok", name="Fine[31m", context_window=1000, tool_call=True)]
    with pytest.raises(CatalogError, match="not its catalog"):
        catalog.parse_models_dev([], ["openai"])


def test_models_dev_says_which_models_take_images() -> None:
    models = {(m.provider, m.id): m.images for m in catalog.parse_models_dev(json.loads(SAMPLE), ["openai", "anthropic", "openrouter"])}
    assert models == {
        ("openai", "gpt-4.1"): True, ("openai", "gpt-5"): True, ("openai", "text-embedding-3-small"): False,
        ("anthropic", "claude-sonnet-4-5"): True, ("anthropic", "claude-3-5-haiku-20241022"): True,
        ("openrouter", "qwen/qwen3-coder"): False, ("openrouter", "openai/gpt-oss-120b"): False,
    }


@pytest.mark.parametrize(("entry", "images"), [
    ({"modalities": {"input": ["text", "image"], "output": ["text"]}, "attachment": False}, True),  # the modalities say more
    ({"modalities": {"input": [" Text ", "IMAGE"]}}, True),
    ({"modalities": {"input": ["text", "pdf"]}, "attachment": True}, False),  # attachments, but no images
    ({"modalities": {"input": ["text"]}}, False),
    ({"attachment": False}, False),  # no modalities: a model without attachments takes no images
    ({"attachment": True}, None),  # attachments of some kind: unknown
    ({}, None),
    ({"attachment": "yes", "modalities": "text+image"}, None),
    ({"modalities": {"input": []}, "attachment": 1}, None),
    ({"modalities": {"input": [None, 7, {"image": 1}, "", "x" * 40 + "image"]}}, None),  # nothing it can read
    ({"modalities": {"input": ["text"] * catalog.MAX_MODALITIES + ["image"]}}, False),  # only the first entries are read
    ({"modalities": [["image"]]}, None),
])
def test_models_dev_images_from_odd_values(entry: dict[str, object], images: bool | None) -> None:
    [model] = catalog.parse_models_dev({"openai": {"models": {"m": entry}}}, ["openai"])
    assert model.images is images


def test_models_dev_nested_under_providers() -> None:
    data = {"providers": json.loads(SAMPLE)}
    assert len(catalog.parse_models_dev(data, ["anthropic"])) == 2


# ---------------------------------------------------------------------------------------------
# An endpoint's /models


async def test_openai_shaped_models(server: Loopback, client: httpx.AsyncClient) -> None:
    body = {"object": "list", "data": [
        {"id": "qwen3-coder", "object": "model", "owned_by": "vllm", "max_model_len": 131072},
        {"id": "llama3.2:3b", "object": "model", "owned_by": "library"},
        {"id": "anthropic/claude-sonnet-4.5", "name": "Anthropic: Claude Sonnet 4.5", "context_length": 1000000,
         "pricing": {"prompt": "0.000003", "completion": "0.000015"}, "top_provider": {"max_completion_tokens": 64000},
         "supported_parameters": ["tools", "reasoning", "max_tokens"]},
        {"id": ""}, {"id": None}, {"no": "id"}, "junk",
    ]}
    server.route("/v1/models", Route(json.dumps(body).encode()))
    cat = await refresh(client, "openai", server.url + "/v1/", "sk-local")
    assert cat.source == "endpoint" and cat.scope == f"openai:{server.url}/v1"
    assert _ids(cat) == [("openai", "anthropic/claude-sonnet-4.5"), ("openai", "llama3.2:3b"), ("openai", "qwen3-coder")]
    assert cat.find("openai", "qwen3-coder") == ModelInfo(provider="openai", id="qwen3-coder", context_window=131072)
    routed = cat.find("openai", "anthropic/claude-sonnet-4.5")
    assert routed is not None
    assert (routed.name, routed.context_window, routed.max_output_tokens) == ("Anthropic: Claude Sonnet 4.5", 1_000_000, 64_000)
    assert (routed.input_price, routed.output_price) == (3.0, 15.0)
    assert (routed.reasoning, routed.tool_call) == (True, True)
    (request,) = server.seen
    assert request.headers["authorization"] == "Bearer sk-local"


def test_models_lists_say_which_models_take_images_by_their_architecture() -> None:
    body = {"data": [
        {"id": "vision", "architecture": {"modality": "text+image->text", "input_modalities": ["image", "text"], "output_modalities": ["text"]}},
        {"id": "coder", "architecture": {"modality": "text->text", "input_modalities": ["text"]}},
        {"id": "summary-only", "architecture": {"modality": "text+image+file->text"}},
        {"id": "summary-text", "architecture": {"modality": "text->text"}},
        {"id": "plain"},
        {"id": "odd", "architecture": {"modality": "image" * 100 + "->text", "input_modalities": "image"}},
        {"id": "odd2", "architecture": ["image"]},
    ]}
    models, _ = catalog.parse_models_list(body, "openai")
    assert {m.id: m.images for m in models} == {"vision": True, "coder": False, "summary-only": True, "summary-text": False,
                                                "plain": None, "odd": None, "odd2": None}


def test_which_models_take_images_is_read_from_the_cache_or_the_builtin_list(tmp_path: Path) -> None:
    # No cache: the built-in list, whose models take images; any other model is not known not to.
    assert catalog.takes_images(tmp_path, "openai", None, "gpt-4.1") is True
    assert catalog.takes_images(tmp_path, "openai", None, "unknown-model") is True
    models = [ModelInfo(provider="openai", id="text-only", images=False), ModelInfo(provider="openai", id="vision", images=True),
              ModelInfo(provider="openai", id="unsure")]
    save_cache(tmp_path, Catalog(models=models, source="endpoint", scope=catalog_scope("openai", "http://127.0.0.1:9/v1")))
    assert catalog.takes_images(tmp_path, "openai", "http://127.0.0.1:9/v1", "text-only") is False
    assert catalog.takes_images(tmp_path, "openai", "http://127.0.0.1:9/v1", "vision") is True
    assert catalog.takes_images(tmp_path, "openai", "http://127.0.0.1:9/v1", "unsure") is True
    # A cache of another endpoint says nothing of this one's models.
    assert catalog.takes_images(tmp_path, "openai", "http://127.0.0.1:10/v1", "text-only") is True
    # A cache written before models said whether they take images reads as unknown.
    cache_path(tmp_path).write_text(json.dumps({"version": 1, "catalog": {
        "source": "endpoint", "scope": catalog_scope("openai", "http://127.0.0.1:9/v1"), "models": [{"provider": "openai", "id": "text-only"}]}}))
    cached = load_cached(tmp_path)
    assert cached is not None and cached.models[0].images is None
    assert catalog.takes_images(tmp_path, "openai", "http://127.0.0.1:9/v1", "text-only") is True


async def test_openai_shaped_models_without_key(server: Loopback, client: httpx.AsyncClient) -> None:
    server.route("/v1/models", Route(b'{"data": [{"id": "m"}]}'))
    await refresh(client, "openai", server.url + "/v1", None)
    assert "authorization" not in server.seen[0].headers


async def test_anthropic_shaped_models_with_pages(server: Loopback, client: httpx.AsyncClient) -> None:
    page1 = {"data": [{"type": "model", "id": "claude-opus-4-1", "display_name": "Claude Opus 4.1", "created_at": "2025-08-05T00:00:00Z"}],
             "has_more": True, "first_id": "claude-opus-4-1", "last_id": "claude-opus-4-1"}
    page2 = {"data": [{"type": "model", "id": "claude-sonnet-4-5", "display_name": "Claude Sonnet 4.5"}],
             "has_more": False, "first_id": "claude-sonnet-4-5", "last_id": "claude-sonnet-4-5"}
    server.route("/v1/models", Route(json.dumps(page1).encode()), Route(json.dumps(page2).encode()))
    cat = await refresh(client, "anthropic", server.url + "/v1", "sk-ant-test")
    assert [(m.id, m.name) for m in cat.models] == [("claude-opus-4-1", "Claude Opus 4.1"), ("claude-sonnet-4-5", "Claude Sonnet 4.5")]
    assert all(m.provider == "anthropic" for m in cat.models)
    first, second = server.seen
    for request in (first, second):
        assert request.headers["x-api-key"] == "sk-ant-test"
        assert request.headers["anthropic-version"] == "2023-06-01"
        assert "authorization" not in request.headers
    assert "after_id" not in first.query and second.query["after_id"] == ["claude-opus-4-1"]


async def test_endless_pages_are_bounded(server: Loopback, client: httpx.AsyncClient) -> None:
    page = {"data": [{"id": "claude-x"}], "has_more": True, "last_id": "claude-x"}
    server.route("/v1/models", Route(json.dumps(page).encode()))
    cat = await refresh(client, "anthropic", server.url + "/v1", "k")
    assert _ids(cat) == [("anthropic", "claude-x")]
    assert len(server.seen) == catalog.MAX_PAGES


@pytest.mark.parametrize(("route", "message"), [
    (Route(b'{"error": {"message": "invalid api key"}}', 401), "HTTP 401 .*invalid api key.*Check the API key"),
    (Route(b"not found", 404), "HTTP 404 .*check --base-url"),
    (Route(b"{}", 503), "HTTP 503 .*Try again later"),
    (Route(b"<html>hello</html>"), "did not answer with JSON"),
    (Route(b'{"models": []}'), "no `data` list"),
    (Route(b"[" * 100_000 + b"]" * 100_000), "did not answer with JSON"),
])
async def test_endpoint_failures_say_what_to_do(server: Loopback, client: httpx.AsyncClient, route: Route, message: str) -> None:
    server.route("/v1/models", route)
    with pytest.raises(CatalogError, match=message):
        await refresh(client, "openai", server.url + "/v1", "k")


async def test_redirect_with_a_key_is_not_followed(server: Loopback, client: httpx.AsyncClient) -> None:
    server.route("/v1/models", Route(b"", 302, {"Location": server.url + "/elsewhere"}))
    server.route("/elsewhere", Route(b'{"data": [{"id": "m"}]}'))
    with pytest.raises(CatalogError, match="HTTP 302 .*set --base-url"):
        await refresh(client, "openai", server.url + "/v1", "k")
    assert [s.path for s in server.seen] == ["/v1/models"]


async def test_credentials_in_the_base_url_stay_out_of_messages_and_scope(server: Loopback, client: httpx.AsyncClient) -> None:
    base = server.url.replace("http://", "http://user:hunter2@") + "/v1"
    server.route("/v1/models", Route(b"nope", 500))
    with pytest.raises(CatalogError) as caught:
        await refresh(client, "openai", base, None)
    assert "hunter2" not in str(caught.value)
    assert "hunter2" not in catalog_scope("openai", base + "?token=hunter2")


@pytest.mark.parametrize("base_url", ["http://[::1/v1", "http://127.0.0.1:notaport/v1", "ftp://127.0.0.1/v1"])
async def test_malformed_base_url(client: httpx.AsyncClient, tmp_path: Path, base_url: str) -> None:
    with pytest.raises(CatalogError, match="not a valid http:// or https:// URL; check --base-url"):
        await refresh(client, "openai", base_url, None)
    assert catalog.initial_catalog(tmp_path, "openai", base_url, "m").models == [ModelInfo(provider="openai", id="m")]


async def test_replay_has_no_catalog(client: httpx.AsyncClient) -> None:
    with pytest.raises(CatalogError, match="choose openai or anthropic"):
        await refresh(client, "replay", None, None)


# ---------------------------------------------------------------------------------------------
# Bounds


@pytest.mark.parametrize("chunked", [False, True])
async def test_oversize_response_refused(server: Loopback, client: httpx.AsyncClient, tmp_path: Path, chunked: bool) -> None:
    big = json.dumps({"data": [{"id": f"model-{i}"} for i in range(2000)]}).encode()
    server.route("/v1/models", Route(big, chunked=chunked))
    with pytest.raises(CatalogError, match="more than Osprey reads"):
        await refresh(client, "openai", server.url + "/v1", None, home=tmp_path, max_bytes=16 * 1024)
    assert load_cached(tmp_path) is None
    # the same answer within the bound is read
    cat = await refresh(client, "openai", server.url + "/v1", None, max_bytes=len(big))
    assert len(cat.models) == 2000


async def test_oversize_models_dev_refused(server: Loopback, client: httpx.AsyncClient) -> None:
    server.route("/api.json", Route(SAMPLE, chunked=True))
    with pytest.raises(CatalogError, match="models.dev sent more than"):
        await refresh(client, "openai", None, None, models_dev_url=server.url + "/api.json", max_bytes=len(SAMPLE) - 1)


@pytest.mark.parametrize("route", [Route(hang=True), Route(trickle=True)], ids=["silent", "trickling"])
async def test_timeouts_are_bounded(server: Loopback, client: httpx.AsyncClient, route: Route) -> None:
    server.route("/v1/models", route)
    started = time.monotonic()
    with pytest.raises(CatalogError, match=r"did not answer|did not arrive"):
        await refresh(client, "openai", server.url + "/v1", None, timeout=0.5)
    assert time.monotonic() - started < 3.0


# ---------------------------------------------------------------------------------------------
# The cache


async def test_cache_round_trip(server: Loopback, client: httpx.AsyncClient, tmp_path: Path) -> None:
    home = tmp_path / "osprey-home"
    server.route("/api.json", Route(SAMPLE))
    cat = await refresh(client, "openai", None, "sk-never-cached", home=home, models_dev_url=server.url + "/api.json")
    assert cat.problem is None
    path = cache_path(home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert "sk-never-cached" not in path.read_text()
    assert load_cached(home) == cat
    assert [p.name for p in path.parent.iterdir()] == ["models.json"]  # no temporary file left


def test_save_cache_drops_stale_marks(tmp_path: Path) -> None:
    cat = builtin_catalog("openai", None).model_copy(update={"stale": True, "problem": "offline"})
    save_cache(tmp_path, cat)
    loaded = load_cached(tmp_path)
    assert loaded is not None and not loaded.stale and loaded.problem is None and loaded.models == cat.models


@pytest.mark.parametrize("content", [
    b"", b"not json", b"[]", b'{"version": 2, "catalog": {"source": "builtin"}}',
    b'{"version": 1, "catalog": {"source": "somewhere"}}',
    b'{"version": 1, "catalog": {"source": "builtin", "models": [{"id": "x"}]}}',
    b'{"version": 1, "catalog": {"source": "builtin", "models": [{"provider": "openai", "id": "x", "input_price": -1}]}}',
    b"\xff\xfe garbage", b"[" * 100_000,
])
def test_malformed_cache_is_none(tmp_path: Path, content: bytes) -> None:
    path = cache_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert load_cached(tmp_path) is None


def test_oversize_cache_is_not_read(tmp_path: Path) -> None:
    save_cache(tmp_path, builtin_catalog("openai", None))
    path = cache_path(tmp_path)
    good = path.read_bytes()
    path.write_bytes(good + b" " * (catalog.MAX_CACHE_BYTES + 1 - len(good)))
    assert load_cached(tmp_path) is None
    path.write_bytes(good + b" " * (catalog.MAX_CACHE_BYTES - len(good)))
    assert load_cached(tmp_path) is not None


def test_cache_that_is_not_a_regular_file(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    save_cache(elsewhere, builtin_catalog("openai", None))
    home = tmp_path / "home"
    cache_path(home).parent.mkdir(parents=True)
    cache_path(home).symlink_to(cache_path(elsewhere))
    assert load_cached(home) is None
    cache_path(home).unlink()
    os.mkfifo(cache_path(home))
    assert load_cached(home) is None  # and does not block
    assert load_cached(tmp_path / "missing") is None


async def test_cache_that_cannot_be_written_is_reported(server: Loopback, client: httpx.AsyncClient, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.write_text("a file, not a directory")
    server.route("/api.json", Route(SAMPLE))
    cat = await refresh(client, "openai", None, None, home=home, models_dev_url=server.url + "/api.json")
    assert len(cat.models) == 5 and cat.problem is not None and "could not be cached" in cat.problem


# ---------------------------------------------------------------------------------------------
# The picker


async def _picker(client: httpx.AsyncClient, home: Path, provider: str, base_url: str | None, url: str,
                  current_model: str | None = None) -> list[Catalog]:
    return [c async for c in catalog_for_picker(client, home, provider, base_url, None, current_model=current_model,
                                                models_dev_url=url, timeout=2.0)]


async def test_picker_shows_cache_then_fresh(server: Loopback, client: httpx.AsyncClient, tmp_path: Path) -> None:
    save_cache(tmp_path, Catalog(models=[ModelInfo(provider="openai", id="old-model")], source="models.dev",
                                 scope=catalog_scope("openai", None)))
    server.route("/api.json", Route(SAMPLE))
    first, second = await _picker(client, tmp_path, "openai", None, server.url + "/api.json")
    assert _ids(first) == [("openai", "old-model")] and not first.stale
    assert len(second.models) == 5 and not second.stale and second.problem is None
    assert load_cached(tmp_path) == second


async def test_picker_shows_the_cache_before_the_network_answers(server: Loopback, client: httpx.AsyncClient, tmp_path: Path) -> None:
    cached = Catalog(models=[ModelInfo(provider="openai", id="gpt-5")], source="models.dev", scope=catalog_scope("openai", None))
    save_cache(tmp_path, cached)
    server.route("/api.json", Route(hang=True))
    started = time.monotonic()
    picker = catalog_for_picker(client, tmp_path, "openai", None, None, models_dev_url=server.url + "/api.json", timeout=0.5)
    assert await anext(picker) == cached
    assert time.monotonic() - started < 0.3
    stale = await anext(picker)
    assert stale.stale and stale.problem and "within 0.5 s" in stale.problem
    with pytest.raises(StopAsyncIteration):
        await anext(picker)


async def test_picker_offline_keeps_the_cache_then_the_builtin_list(client: httpx.AsyncClient, tmp_path: Path) -> None:
    down = _dead_url() + "/api.json"
    # no cache at all: the built-in defaults, marked stale with the reason
    first, second = await _picker(client, tmp_path, "openai", None, down)
    assert first.source == "builtin" and _ids(first) == [("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4.1")]
    assert second.source == "builtin" and second.stale and second.problem is not None
    assert "could not be reached" in second.problem and "offline" in second.problem
    # a cache: shown at once, then again, stale
    cached = Catalog(models=[ModelInfo(provider="openai", id="gpt-5")], source="models.dev", scope=catalog_scope("openai", None))
    save_cache(tmp_path, cached)
    first, second = await _picker(client, tmp_path, "openai", None, down)
    assert first == cached
    assert second.stale and _ids(second) == [("openai", "gpt-5")] and second.problem
    assert load_cached(tmp_path) == cached  # a failed refresh leaves the cache alone


async def test_picker_for_a_local_server_without_cache(client: httpx.AsyncClient, tmp_path: Path) -> None:
    base = _dead_url() + "/v1"
    first, second = await _picker(client, tmp_path, "openai", base, "http://127.0.0.1:9/unused", current_model="qwen3-coder")
    assert _ids(first) == [("openai", "qwen3-coder")] and first.source == "builtin"
    assert second.stale and second.problem and "could not be reached" in second.problem


async def test_picker_ignores_a_cache_for_another_endpoint(server: Loopback, client: httpx.AsyncClient, tmp_path: Path) -> None:
    save_cache(tmp_path, Catalog(models=[ModelInfo(provider="openai", id="gpt-5")], source="models.dev",
                                 scope=catalog_scope("openai", None)))
    server.route("/v1/models", Route(b'{"data": [{"id": "local-model"}]}'))
    first, second = await _picker(client, tmp_path, "openai", server.url + "/v1", "http://127.0.0.1:9/unused",
                                  current_model="local-model")
    assert first.source == "builtin" and _ids(first) == [("openai", "local-model")]
    assert second.source == "endpoint" and _ids(second) == [("openai", "local-model")]
    assert catalog.initial_catalog(tmp_path, "openai", server.url + "/v1") == second


def test_builtin_list_has_the_configured_defaults() -> None:
    from osprey.config import DEFAULT_MODELS

    official = builtin_catalog("anthropic", None, current_model="claude-opus-4-1")
    assert {m.id for m in official.models} == {DEFAULT_MODELS["openai"], DEFAULT_MODELS["anthropic"], "claude-opus-4-1"}
    assert builtin_catalog("openai", "http://127.0.0.1:8080/v1").models == []


def test_the_picker_list_leaves_out_models_that_cannot_call_tools() -> None:
    from osprey.catalog import Catalog, ModelInfo

    catalog = Catalog(models=[
        ModelInfo(provider="openai", id="chat", tool_call=True),
        ModelInfo(provider="openai", id="unknown"),
        ModelInfo(provider="openai", id="text-embedding-3-small", tool_call=False),
        ModelInfo(provider="anthropic", id="claude", tool_call=True),
    ], source="builtin")
    assert [m.id for m in catalog.for_provider("openai")] == ["chat", "unknown", "text-embedding-3-small"]
    assert [m.id for m in catalog.for_provider("openai", agents_only=True)] == ["chat", "unknown"]
