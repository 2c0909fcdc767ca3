"""The destination guard of web_fetch against a corpus of SSRF payloads (zero misses), public URLs
it must accept, and DNS rebinding. No test here touches the network: names resolve through stub
resolvers, and the one connection attempt is made by a network backend that records and refuses."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import httpcore
import pytest

from osprey.web.fetch import WebFetcher
from osprey.web.guard import BlockedURL, DestinationGuard, address_problem, check_url

PAYLOADS = Path(__file__).parent / "data" / "ssrf_payloads.txt"
PUBLIC_V4 = "93.184.216.34"
_RESOLVES = re.compile(r"^(?P<url>.*?)\s+resolves=(?P<addrs>\S*)$")


def load_payloads() -> list[tuple[str, list[str] | None]]:
    out: list[tuple[str, list[str] | None]] = []
    for line in PAYLOADS.read_text(encoding="utf-8").split("\n"):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _RESOLVES.match(line)
        if m:
            out.append((m["url"], [a for a in m["addrs"].split(",") if a]))
        else:
            out.append((line, None))
    return out


def host_of(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0].lower()


class StubResolver:
    """Answers from a table; any other name resolves to a public address. Records every question."""

    def __init__(self, table: dict[str, Sequence[str]] | None = None, default: Sequence[str] = (PUBLIC_V4,)) -> None:
        self.table = dict(table or {})
        self.default = list(default)
        self.questions: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.questions.append((host, port))
        return list(self.table.get(host, self.default))


PAYLOAD_LIST = load_payloads()


def test_the_corpus_is_large_enough() -> None:
    assert len(PAYLOAD_LIST) >= 80
    assert len({url for url, _ in PAYLOAD_LIST}) == len(PAYLOAD_LIST), "duplicate payloads"


@pytest.mark.parametrize(("url", "answers"), PAYLOAD_LIST, ids=[u[:60] for u, _ in PAYLOAD_LIST])
async def test_every_payload_is_refused(url: str, answers: list[str] | None) -> None:
    resolver = StubResolver({host_of(url): answers} if answers is not None else None)
    guard = DestinationGuard(resolver)
    with pytest.raises(BlockedURL) as info:
        await guard.check(url)
    # Refused by the guard's own judgement, never because a name could not be resolved.
    assert info.value.category in ("invalid_url", "credentials_in_url", "blocked_destination"), info.value.message
    if answers is None:
        # Without a note, names resolve to a public address: the text alone must be the reason.
        with pytest.raises(BlockedURL):
            check_url(url) if not _is_literal_address(url) else _raise_for_address(url)


def _is_literal_address(url: str) -> bool:
    try:
        return check_url(url).literal is not None
    except BlockedURL:
        return False


def _raise_for_address(url: str) -> None:
    literal = check_url(url).literal
    assert literal is not None
    problem = address_problem(literal)
    if problem:
        raise BlockedURL("blocked_destination", problem)


PUBLIC = [
    ("https://example.com/", [PUBLIC_V4]),
    ("http://example.com:8080/path/to/page?q=search&page=2#section", [PUBLIC_V4]),
    ("https://EXAMPLE.com./", [PUBLIC_V4]),
    ("https://docs.python.org/3/library/ipaddress.html", ["151.101.0.223", "151.101.64.223"]),
    ("https://bücher.example/katalog", [PUBLIC_V4]),
    ("https://dual.example/", [PUBLIC_V4, "2606:2800:220:1:248:1893:25c8:1946"]),
    ("https://v6only.example/", ["2a00:1450:4001:82a::200e"]),
    ("http://1.1.1.1/", None),
    ("http://8.8.8.8:8080/dns", None),
    ("https://[2606:4700:4700::1111]/", None),
    ("http://[2002:5db8:d822::1]/", None),  # 6to4 around a public IPv4 address
    ("https://example.com/?keyword=token-free&author=me&monkey=1&tokenizer=bert", [PUBLIC_V4]),
    ("https://a_b.example/x", [PUBLIC_V4]),
    ("https://sub.example.co.uk/a/b", ["81.2.69.142"]),
    ("https://example.com/search?q=password+reset+guide", [PUBLIC_V4]),
]


@pytest.mark.parametrize(("url", "answers"), PUBLIC, ids=[u for u, _ in PUBLIC])
async def test_public_urls_are_accepted(url: str, answers: list[str] | None) -> None:
    resolver = StubResolver({host_of(url).rstrip("."): answers} if answers else None)
    guard = DestinationGuard(resolver)
    destination = await guard.check(url)
    assert address_problem(ipaddress.ip_address(destination.address)) is None
    if answers:
        assert destination.address == str(ipaddress.ip_address(answers[0]))
        assert list(destination.addresses) == [str(ipaddress.ip_address(a)) for a in answers]
        assert len(resolver.questions) == 1
    else:
        assert resolver.questions == []  # an address literal is never looked up


def test_the_checked_url_is_the_one_spelling_sent() -> None:
    checked = check_url("HTTPS://Bücher.Example.:443/a b?x=1#frag".replace(" ", "%20"))
    assert checked.url == "https://xn--bcher-kva.example/a%20b?x=1"
    assert checked.host == "xn--bcher-kva.example" and checked.port == 443
    # The fragment is dropped, a default port is left out, the IPv6 literal is compressed.
    assert check_url("http://[2606:4700:4700:0:0:0:0:1111]:80/").url == "http://[2606:4700:4700::1111]/"


async def test_resolver_failures_are_errors_not_acceptance() -> None:
    async def failing(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    with pytest.raises(BlockedURL) as info:
        await DestinationGuard(failing).check("https://nowhere.example/")
    assert info.value.category == "dns_failed"
    with pytest.raises(BlockedURL) as info:
        await DestinationGuard(StubResolver(default=[])).check("https://empty.example/")
    assert info.value.category == "dns_failed"


class RebindingResolver:
    """Answers a public address the first time it is asked, a private one after that."""

    def __init__(self, first: str, then: str) -> None:
        self.first, self.then = first, then
        self.calls = 0

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls += 1
        return [self.first if self.calls == 1 else self.then]


class RecordingBackend(httpcore.AsyncNetworkBackend):
    """Records where a connection is attempted and makes none (these tests never touch a network)."""

    def __init__(self) -> None:
        self.attempts: list[tuple[str, int]] = []

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None) -> httpcore.AsyncNetworkStream:
        self.attempts.append((host, port))
        raise httpcore.ConnectError("the test backend makes no connections")

    async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("no unix sockets")

    async def sleep(self, seconds: float) -> None:
        return None


async def test_dns_rebinding_cannot_move_the_connection() -> None:
    resolver = RebindingResolver(PUBLIC_V4, "127.0.0.1")
    backend = RecordingBackend()
    fetcher = WebFetcher(resolver=resolver, network_backend=backend)
    results = await fetcher.fetch_many(["http://rebind.example/secret"], timeout=10)
    assert results[0].error is not None and results[0].error.category == "connection_failed"
    # The name was resolved once, checked, and the only connection attempt went to that address.
    assert resolver.calls == 1
    assert backend.attempts == [(PUBLIC_V4, 80)]


async def test_dns_rebinding_in_one_answer_is_refused() -> None:
    # A single answer holding a public and a private address: every address must be public.
    backend = RecordingBackend()
    fetcher = WebFetcher(resolver=StubResolver(default=[PUBLIC_V4, "10.0.0.5"]), network_backend=backend)
    results = await fetcher.fetch_many(["http://mixed.example/"], timeout=10)
    assert results[0].error is not None and results[0].error.category == "blocked_destination"
    assert backend.attempts == []


async def test_the_test_switch_is_off_by_default() -> None:
    backend = RecordingBackend()
    fetcher = WebFetcher(resolver=StubResolver(default=["127.0.0.1"]), network_backend=backend)
    results = await fetcher.fetch_many(["http://127.0.0.1:8080/", "http://loopback.example/"], timeout=10)
    assert [r.error.category if r.error else None for r in results] == ["blocked_destination", "blocked_destination"]
    assert backend.attempts == []


def test_the_switch_is_not_reachable_from_configuration() -> None:
    """Only a constructor argument lets non-public destinations through: web_tools takes the
    settings and a client, and builds its fetcher without it."""
    import inspect

    from osprey.web import web_tools
    from osprey.web.fetch import web_fetch_tool

    assert "allow_loopback_for_tests" not in inspect.signature(web_tools).parameters
    assert "allow_loopback_for_tests" not in inspect.signature(web_fetch_tool).parameters
    source = Path(inspect.getsourcefile(web_tools) or "").read_text(encoding="utf-8")
    assert "allow_loopback" not in source
