"""web_fetch against real HTTP servers on loopback, reached only through the fetcher's test switch
(allow_loopback_for_tests): limits, timeouts, redirects, mixed results, charsets, rendering, PDF,
the character window, and pinning of the connection to the checked address."""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trustme

from osprey.tools.base import ToolContext, ToolRegistry
from osprey.web.fetch import MAX_BODY_BYTES, MAX_CHARS, MIN_CHARS, FetchResult, WebFetcher, clamp_timeout, web_fetch_tool

REASONS = {200: "OK", 301: "Moved Permanently", 302: "Found", 307: "Temporary Redirect", 404: "Not Found", 500: "Internal Server Error"}


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    # When set, the body is sent in these pieces with `pause` seconds between them and no length
    # (the end of the body is the end of the connection).
    pieces: list[bytes] | None = None
    pause: float = 0.0


@dataclass
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    local_host: str
    peer_host: str
    body: bytes = b""


Route = Reply | Callable[["Seen"], Reply]


class LoopbackServer:
    """A small HTTP/1.1 server on a loopback address: answers by path from a route table, records
    every request with the local address the connection arrived at."""

    def __init__(self, routes: Mapping[str, Route], *, host: str = "127.0.0.1", port: int = 0, tls: ssl.SSLContext | None = None) -> None:
        self.routes = dict(routes)
        self.host = host
        self.port = port
        self.tls = tls
        self.seen: list[Seen] = []
        self.connections = 0
        self._stop = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> LoopbackServer:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    def url(self, path: str = "/", host: str | None = None) -> str:
        return f"{'https' if self.tls else 'http'}://{host or self.host}:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            local = writer.get_extra_info("sockname")[0]
            peer = writer.get_extra_info("peername")[0]
            length = int(headers.get("content-length", "0") or 0)
            body = await reader.readexactly(length) if length else b""
            seen = Seen(method, target, headers, local, peer, body)
            self.seen.append(seen)
            route = self.routes.get(target.split("?", 1)[0], Reply(404, {"Content-Type": "text/plain"}, b"no such page"))
            reply = route(seen) if callable(route) else route
            status_line = f"HTTP/1.1 {reply.status} {REASONS.get(reply.status, 'Status')}\r\n"
            out_headers = dict(reply.headers)
            out_headers["Connection"] = "close"
            if reply.pieces is None:
                out_headers["Content-Length"] = str(len(reply.body))
            writer.write((status_line + "".join(f"{k}: {v}\r\n" for k, v in out_headers.items()) + "\r\n").encode("latin-1"))
            if reply.pieces is None:
                writer.write(reply.body)
                await writer.drain()
            else:
                for piece in reply.pieces:
                    writer.write(piece)
                    await writer.drain()
                    if reply.pause:
                        try:
                            await asyncio.wait_for(self._stop.wait(), reply.pause)
                            return
                        except TimeoutError:
                            pass
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()


class TableResolver:
    def __init__(self, table: dict[str, Sequence[str]]) -> None:
        self.table = table
        self.questions: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.questions.append(host)
        return list(self.table[host])


def fetcher(**kwargs: Any) -> WebFetcher:
    return WebFetcher(allow_loopback_for_tests=True, **kwargs)


def text_of(result: FetchResult) -> str:
    assert result.error is None, result.error and result.error.message
    assert result.page is not None
    return result.page.rendered.text


async def call_tool(tool_fetcher: WebFetcher, arguments: dict[str, Any]) -> Any:
    registry = ToolRegistry(max_result_chars=10_000_000)
    registry.add(web_fetch_tool(tool_fetcher))
    ctx = ToolContext(client=None, cwd="/", roots=["/"], bash_max_output_bytes=0)  # type: ignore[arg-type]
    return await registry.call("web_fetch", arguments, ctx)


def html(body: str, head: str = "") -> bytes:
    return f"<!doctype html><html><head>{head}</head><body>{body}</body></html>".encode()


# ---------------------------------------------------------------------------------------------


async def test_html_is_rendered_as_markdown_like_text() -> None:
    page = html(
        "<h1>Osprey</h1><p>A <a href='/docs'>harness</a> with <b>tools</b>.</p>"
        "<ul><li>one</li><li>two</li></ul><script>var secret = 1;</script><style>p{color:red}</style>",
        head="<title>The Osprey page</title>",
    )
    async with LoopbackServer({"/": Reply(200, {"Content-Type": "text/html; charset=utf-8"}, page)}) as server:
        [result] = await fetcher().fetch_many([server.url("/")])
    text = text_of(result)
    assert "# Osprey" in text
    assert "[harness](/docs)" in text
    assert "**tools**" in text
    assert "- one" in text and "- two" in text
    assert "secret" not in text and "color:red" not in text
    assert result.page is not None and result.page.rendered.title == "The Osprey page"


async def test_json_is_pretty_printed_and_text_kinds_pass_through() -> None:
    routes: dict[str, Route] = {
        "/data.json": Reply(200, {"Content-Type": "application/json"}, b'{"name":"osprey","tools":["web_fetch","web_search"]}'),
        "/app.js": Reply(200, {"Content-Type": "application/javascript"}, b"function f() { return 1; }"),
        "/feed.xml": Reply(200, {"Content-Type": "application/rss+xml"}, b"<?xml version='1.0'?><rss><channel><title>t</title></channel></rss>"),
        "/notes.txt": Reply(200, {"Content-Type": "text/plain"}, b"plain words"),
        "/image.png": Reply(200, {"Content-Type": "image/png"}, b"\x89PNG\r\n\x1a\n\x00\x00"),
    }
    async with LoopbackServer(routes) as server:
        results = await fetcher().fetch_many([server.url(p) for p in routes])
    assert text_of(results[0]) == json.dumps({"name": "osprey", "tools": ["web_fetch", "web_search"]}, indent=2)
    assert text_of(results[1]) == "function f() { return 1; }"
    assert "<channel><title>t</title></channel>" in text_of(results[2])
    assert text_of(results[3]) == "plain words"
    assert results[4].error is not None and results[4].error.category == "unsupported_content"
    assert "image/png" in results[4].error.message


async def test_charset_from_the_header_and_from_a_meta_tag() -> None:
    latin = "Café crème à la carte".encode("latin-1")
    routes: dict[str, Route] = {
        "/header": Reply(200, {"Content-Type": "text/plain; charset=ISO-8859-1"}, latin),
        "/meta": Reply(200, {"Content-Type": "text/html"}, html("<p>Café crème</p>", head='<meta charset="iso-8859-1">').replace("é".encode(), b"\xe9").replace("è".encode(), b"\xe8")),
        "/http-equiv": Reply(200, {"Content-Type": "text/html"}, b'<html><head><meta http-equiv="Content-Type" content="text/html; charset=windows-1252"></head><body><p>\x93quoted\x94 \x80</p></body></html>'),
        "/unlabelled": Reply(200, {"Content-Type": "text/plain"}, b"na\xefve"),
        "/utf8": Reply(200, {"Content-Type": "text/plain"}, "naïve ☃".encode()),
        "/bogus-label": Reply(200, {"Content-Type": "text/plain; charset=base64"}, "naïve".encode()),
    }
    async with LoopbackServer(routes) as server:
        paths = list(routes)
        results = await fetcher().fetch_many([server.url(p) for p in paths[:3]])
        results += await fetcher().fetch_many([server.url(p) for p in paths[3:]])
    header, meta, equiv, unlabelled, utf8, bogus = (text_of(r) for r in results)
    assert header == "Café crème à la carte"
    assert "Café crème" in meta
    assert "“quoted” €" in equiv
    assert unlabelled == "naïve"  # not UTF-8 and not labelled: windows-1252
    assert utf8 == "naïve ☃"
    assert bogus == "naïve"  # a label that names no text encoding is ignored


async def test_the_body_limit_stops_reading() -> None:
    big = b"a" * (MAX_BODY_BYTES + 1024 * 1024)
    bomb = gzip.compress(b"\0" * (60 * 1024 * 1024))  # 60 MiB of zeros in a few dozen KiB
    routes: dict[str, Route] = {
        "/big": Reply(200, {"Content-Type": "text/plain"}, big),
        "/bomb": Reply(200, {"Content-Type": "text/plain", "Content-Encoding": "gzip"}, bomb),
        "/big.pdf": Reply(200, {"Content-Type": "application/pdf"}, b"%PDF-1.4\n" + big),
        "/small-gzip": Reply(200, {"Content-Type": "text/plain", "Content-Encoding": "gzip"}, gzip.compress(b"compressed words")),
    }
    async with LoopbackServer(routes) as server:
        results = await fetcher().fetch_many([server.url(p) for p in routes])
    for result in results[:2]:
        assert result.page is not None and result.page.truncated
        assert len(result.page.rendered.text) == MAX_BODY_BYTES
    assert len(bomb) < MAX_BODY_BYTES
    assert results[2].error is not None and results[2].error.category == "body_too_large"
    assert text_of(results[3]) == "compressed words"


async def test_a_slow_body_hits_the_timeout() -> None:
    routes: dict[str, Route] = {
        "/slow": Reply(200, {"Content-Type": "text/plain"}, pieces=[b"first part ", b"never arrives"], pause=60.0),
        "/fast": Reply(200, {"Content-Type": "text/plain"}, b"quick"),
    }
    async with LoopbackServer(routes) as server:
        slow, fast = await fetcher().fetch_many([server.url("/slow"), server.url("/fast")], timeout=1.0)
    assert slow.error is not None and slow.error.category == "timeout"
    assert text_of(fast) == "quick"
    assert clamp_timeout(1000) == 120.0 and clamp_timeout(0) == 1.0


async def test_redirects_are_followed_and_each_is_checked_again() -> None:
    async with LoopbackServer({}) as server:
        server.routes.update({
            "/a": Reply(302, {"Location": "/b"}),
            "/b": Reply(301, {"Location": server.url("/c")}),
            "/c": Reply(200, {"Content-Type": "text/plain"}, b"arrived"),
            "/to-private": Reply(302, {"Location": "/hop"}),
            "/hop": Reply(307, {"Location": "http://10.0.0.1/admin"}),
            "/to-metadata": Reply(302, {"Location": "http://169.254.169.254/latest/meta-data/"}),
            "/to-credentials": Reply(302, {"Location": server.url("/c").replace("://", "://user:pw@")}),
            "/to-token": Reply(302, {"Location": "/c?access_token=abc"}),
            "/to-file": Reply(302, {"Location": "file:///etc/passwd"}),
            "/loop": Reply(302, {"Location": "/loop"}),
        })
        paths = ["/a", "/to-private", "/to-metadata", "/to-credentials", "/to-token", "/to-file", "/loop"]
        results = await fetcher().fetch_many([server.url(p) for p in paths[:4]])
        results += await fetcher().fetch_many([server.url(p) for p in paths[4:]])
        served = [s.target for s in server.seen]
    assert text_of(results[0]) == "arrived"
    assert results[0].page is not None and results[0].page.redirects == [server.url("/a"), server.url("/b")]
    categories = [r.error.category if r.error else None for r in results[1:]]
    assert categories == ["blocked_destination", "blocked_destination", "credentials_in_url", "credentials_in_url", "invalid_url", "too_many_redirects"]
    assert "10.0.0.1" in (results[1].error.message if results[1].error else "")
    # The refused hops were never requested: every request the server saw is one of its own paths.
    assert all(not t.startswith("/c?") for t in served)
    assert served.count("/loop") == 6  # the first request and five redirects, then it stopped


async def test_a_redirect_httpx_cannot_parse_is_followed_or_refused_never_internal() -> None:
    """`http:HOST:PORT/r` (no slashes) is a path relative to the page, as a browser reads it; a
    Location that is no URL at all is `invalid_url`; neither is an exception from inside httpx."""
    async with LoopbackServer({}) as server:
        port = server.url("/").rsplit(":", 1)[1].split("/")[0]
        server.routes.update({
            "/no-slashes": Reply(302, {"Location": f"http:127.0.0.1:{port}/r"}),
            f"/127.0.0.1:{port}/r": Reply(200, {"Content-Type": "text/plain"}, b"relative"),
            "/other-scheme": Reply(302, {"Location": "https:127.0.0.1/r"}),
            "/broken": Reply(302, {"Location": "http://[::1"}),
        })
        results = await fetcher().fetch_many([server.url(p) for p in ["/no-slashes", "/other-scheme", "/broken"]])
    assert text_of(results[0]) == "relative"
    assert [r.error.category if r.error else None for r in results[1:]] == ["invalid_url", "invalid_url"]
    assert results[2].error is not None and "http://[::1" in results[2].error.message


async def test_mixed_success_and_failure_keep_their_order() -> None:
    routes: dict[str, Route] = {
        "/one": Reply(200, {"Content-Type": "text/plain"}, b"first page"),
        "/missing": Reply(404, {"Content-Type": "text/plain"}, b"gone"),
        "/three": Reply(200, {"Content-Type": "application/json"}, b'{"n": 3}'),
    }
    async with LoopbackServer(routes) as server:
        urls = [server.url("/one"), server.url("/missing"), "http://192.168.1.1/", server.url("/three"), "ftp://example.com/"]
        outcome = await call_tool(fetcher(), {"urls": urls})
    assert not outcome.is_error
    text = outcome.text
    sections = text.split("## [")[1:]
    assert [s.split("]", 1)[0] for s in sections] == ["1", "2", "3", "4", "5"]
    assert "first page" in sections[0]
    assert "Error (http_status): HTTP 404" in sections[1]
    assert "Error (blocked_destination)" in sections[2] and "192.168.1.1" in sections[2]
    assert '"n": 3' in sections[3]
    assert "Error (invalid_url)" in sections[4]


async def test_all_failed_is_an_error_outcome_and_a_single_url_may_be_a_string() -> None:
    outcome = await call_tool(fetcher(), {"urls": "http://10.1.2.3/"})
    assert outcome.is_error and outcome.category == "blocked_destination"
    outcome = await call_tool(fetcher(), {"urls": []})
    assert outcome.is_error and outcome.category == "invalid_arguments"
    outcome = await call_tool(fetcher(), {"urls": ["http://10.0.0.1/"] * 6})
    assert outcome.is_error and outcome.category == "invalid_arguments"


def make_pdf(lines: list[str]) -> bytes:
    """A small valid PDF with one page of Helvetica text, written by hand."""
    content = "BT /F1 18 Tf 72 720 Td 22 TL " + " ".join(f"({line}) Tj T*" for line in lines) + " ET"
    stream = content.encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, obj in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + obj + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


async def test_pdf_text_is_extracted() -> None:
    pdf = make_pdf(["Osprey reads PDF files", "second line here"])
    routes: dict[str, Route] = {
        "/doc.pdf": Reply(200, {"Content-Type": "application/pdf"}, pdf),
        "/unlabelled": Reply(200, {}, pdf),
        "/broken.pdf": Reply(200, {"Content-Type": "application/pdf"}, b"%PDF-1.4\nthis is not a pdf at all"),
    }
    async with LoopbackServer(routes) as server:
        labelled, sniffed, broken = await fetcher().fetch_many([server.url(p) for p in routes])
    for result in (labelled, sniffed):
        text = text_of(result)
        assert "Osprey reads PDF files" in text and "second line here" in text
        assert result.page is not None and result.page.rendered.kind == "pdf"
    assert broken.error is not None and broken.error.category == "unreadable_pdf"


async def test_the_character_window_is_clamped_and_pages() -> None:
    body = "".join(f"{i:07d}\n" for i in range(20_000)).encode()  # 160,000 characters
    async with LoopbackServer({"/long": Reply(200, {"Content-Type": "text/plain"}, body)}) as server:
        url = server.url("/long")
        small = await call_tool(fetcher(), {"urls": [url], "max_chars": 10})
        large = await call_tool(fetcher(), {"urls": [url], "max_chars": 10_000_000})
        tail = await call_tool(fetcher(), {"urls": [url], "max_chars": 50_000, "start_char": 150_000})
        past = await call_tool(fetcher(), {"urls": [url], "start_char": 500_000})

    def shown(outcome: Any) -> str:
        return outcome.text.split("\n\n", 1)[1].rsplit("\n[characters", 1)[0]

    assert len(shown(small)) == MIN_CHARS
    assert f"[characters 0-{MIN_CHARS:,} of 160,000; call again with start_char={MIN_CHARS} for more]" in small.text
    assert len(shown(large)) == MAX_CHARS
    assert f"start_char={MAX_CHARS}" in large.text
    assert shown(tail).startswith("0018750\n") and len(shown(tail)) == 10_000
    assert "[characters 150,000-160,000 of 160,000]" in tail.text
    assert "past the end" in past.text


async def test_without_the_test_switch_loopback_is_refused() -> None:
    async with LoopbackServer({"/": Reply(200, {"Content-Type": "text/plain"}, b"secret")}) as server:
        results = await WebFetcher().fetch_many([server.url("/"), server.url("/", host="localhost")])
        resolved = await WebFetcher(resolver=TableResolver({"inside.example": ["127.0.0.1"]})).fetch_many([server.url("/", host="inside.example")])
        outcome = await call_tool(WebFetcher(), {"urls": [server.url("/")]})
    assert [r.error.category if r.error else None for r in results + resolved] == ["blocked_destination"] * 3
    assert outcome.is_error and "secret" not in outcome.text
    assert server.connections == 0


async def test_the_switch_allows_loopback_only() -> None:
    guard_fetcher = fetcher(resolver=TableResolver({"lan.example": ["192.168.0.10"], "mixed.example": ["127.0.0.1", "10.0.0.1"]}))
    results = await guard_fetcher.fetch_many(["http://lan.example/", "http://mixed.example/", "http://[::ffff:127.0.0.1]/", "http://169.254.169.254/"])
    assert [r.error.category if r.error else None for r in results] == ["blocked_destination"] * 4


async def test_the_connection_is_pinned_to_the_checked_address() -> None:
    """The resolver answers 127.0.0.2 first and 127.0.0.1 after that; a server listens on each,
    on the same port. The request must arrive at 127.0.0.2, with the name in its Host header."""
    first = LoopbackServer({"/": Reply(200, {"Content-Type": "text/plain"}, b"checked address")}, host="127.0.0.2")
    async with first:
        async with LoopbackServer({"/": Reply(200, {"Content-Type": "text/plain"}, b"rebound address")}, host="127.0.0.1", port=first.port) as second:
            answers = iter(["127.0.0.2"] + ["127.0.0.1"] * 10)
            questions: list[str] = []

            async def rebinding(host: str, port: int) -> list[str]:
                questions.append(host)
                return [next(answers)]

            [result] = await fetcher(resolver=rebinding).fetch_many([f"http://pinned.example:{first.port}/"])
    assert text_of(result) == "checked address"
    assert questions == ["pinned.example"]
    assert [(s.local_host, s.headers["host"]) for s in first.seen] == [("127.0.0.2", f"pinned.example:{first.port}")]
    assert second.seen == [] and second.connections == 0


async def test_tls_is_verified_for_the_name_while_connecting_to_the_pinned_address() -> None:
    ca = trustme.CA()
    good = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("pinned.example").configure_cert(good)
    wrong = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("other.example").configure_cert(wrong)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    resolver = TableResolver({"pinned.example": ["127.0.0.1"]})
    route = {"/": Reply(200, {"Content-Type": "text/plain"}, b"over tls")}
    async with LoopbackServer(route, tls=good) as server:
        [ok] = await fetcher(resolver=resolver, ssl_context=client).fetch_many([server.url("/", host="pinned.example")])
        sni = server.seen[0].headers["host"]
    async with LoopbackServer(route, tls=wrong) as server:
        [bad] = await fetcher(resolver=resolver, ssl_context=client).fetch_many([server.url("/", host="pinned.example")])
    assert text_of(ok) == "over tls" and sni.startswith("pinned.example:")
    assert bad.error is not None and bad.error.category == "connection_failed"
    assert "certificate" in bad.error.message.lower() or "hostname" in bad.error.message.lower()


def render_children() -> list[int]:
    """Our child processes that are rendering a page."""
    import os
    from pathlib import Path

    found = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"osprey.web.render" in cmdline:
                found.append(int(pid))
    return found


async def test_large_pages_render_in_a_child_process_that_the_deadline_kills() -> None:
    from osprey.web.render import INLINE_BYTES

    paragraphs = "".join(f"<p>paragraph number {i} with <a href='/p{i}'>a link</a></p>\n" for i in range(8_000))
    large = html(f"<h1>Large page</h1>{paragraphs}<p>the last words</p>", head="<title>Large</title>")
    assert len(large) > INLINE_BYTES
    pdf = make_pdf([f"PDF line {i} padding padding padding padding padding" for i in range(6_000)] + ["final PDF line"])
    assert len(pdf) > INLINE_BYTES
    huge = html("<table>" + "<tr><td><a href='/x'>cell</a></td><td><b>bold</b> text</td></tr>" * 60_000 + "</table>")
    routes: dict[str, Route] = {
        "/large": Reply(200, {"Content-Type": "text/html; charset=utf-8"}, large),
        "/large.pdf": Reply(200, {"Content-Type": "application/pdf"}, pdf),
        "/huge": Reply(200, {"Content-Type": "text/html"}, huge),
    }
    async with LoopbackServer(routes) as server:
        page, document = await fetcher().fetch_many([server.url("/large"), server.url("/large.pdf")])
        [slow] = await fetcher().fetch_many([server.url("/huge")], timeout=1.0)
    text = text_of(page)
    assert text.startswith("# Large page") and "[a link](/p7999)" in text and text.endswith("the last words")
    assert page.page is not None and page.page.rendered.title == "Large" and page.page.rendered.encoding == "utf-8"
    assert "final PDF line" in text_of(document)
    # The huge table takes seconds per MiB to convert: the deadline came first, and its child is gone.
    assert slow.error is not None and slow.error.category == "timeout"
    assert render_children() == []
