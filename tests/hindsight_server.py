"""A Hindsight service on loopback for the hindsight memory provider's tests.

It serves the endpoints the provider uses, with the request and answer shapes of the Hindsight
API: `GET /version`, `POST /v1/default/banks/{bank}/memories` (retain) and
`POST /v1/default/banks/{bank}/memories/recall`. Memories are kept in memory per bank; recall
returns those sharing a word with the query, newest first. It checks what it is sent (422 like the
service for a request of the wrong shape, 401 without the expected Bearer key) and records every
request. `faults` makes an endpoint slow, failing or malformed: keyed by "version", "retain" or
"recall", each a `Fault` applied to every request of that endpoint until removed."""

from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

BUDGETS = ("low", "mid", "high")
PREFIX = "/v1/default/banks/"


@dataclass
class Fault:
    """How an endpoint misbehaves: wait `delay` seconds, then answer `status` with `body` (bytes
    as they are, anything else as JSON); `declare_length=False` sends the body until the
    connection closes, with no Content-Length; `drop` closes the connection without an answer.
    `body=None` answers normally after the delay."""

    delay: float = 0.0
    status: int = 200
    body: Any = None
    declare_length: bool = True
    drop: bool = False


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class HindsightServer:
    """Use as a context manager; `url` is its base URL."""

    api_key: str | None = None
    faults: dict[str, Fault] = field(default_factory=dict)
    banks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server._handle(self, "GET")

            def do_POST(self) -> None:
                server._handle(self, "POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> HindsightServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def seed(self, bank: str, text: str, *, target: str = "memory") -> None:
        """Put a memory in `bank` as if it had been retained earlier."""
        with self._lock:
            self.banks.setdefault(bank, []).append(_memory(text, {"osprey_target": target}, [f"osprey:{target}"], None))

    def paths(self, method: str | None = None) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests if method is None or r.method == method]

    # -- serving ------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        body: Any
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        with self._lock:
            self.requests.append(Recorded(method, h.path, {k.lower(): v for k, v in h.headers.items()}, body))
        endpoint, bank = _route(method, h.path)
        if endpoint is None:
            return _send(h, 404, {"detail": "Not Found"})
        fault = self.faults.get(endpoint)
        if fault is not None:
            if fault.delay:
                self._closed.wait(fault.delay)
            if fault.drop:
                h.close_connection = True
                return None
            if fault.body is not None or fault.status != 200:
                return _send(h, fault.status, fault.body if fault.body is not None else {"detail": "fault"}, declare_length=fault.declare_length)
        if endpoint == "version":
            return _send(h, 200, {"api_version": "0.4.0", "features": {"observations": True, "mcp": False, "worker": True}})
        if self.api_key is not None and h.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _send(h, 401, {"detail": "Invalid or missing API key"})
        assert bank is not None
        problem = (_retain_problem if endpoint == "retain" else _recall_problem)(body)
        if problem:
            return _send(h, 422, {"detail": [{"loc": ["body"], "msg": problem, "type": "value_error"}]})
        with self._lock:
            memories = self.banks.setdefault(bank, [])
            if endpoint == "retain":
                for item in body["items"]:
                    memories.append(_memory(item["content"], item.get("metadata"), item.get("tags"), item.get("context")))
                return _send(h, 200, {"success": True, "bank_id": bank, "items_count": len(body["items"]), "async": False})
            words = _words(body["query"])
            found = [m for m in reversed(memories) if words & _words(m["text"])]
        return _send(h, 200, {"results": found})


def _route(method: str, path: str) -> tuple[str | None, str | None]:
    if method == "GET" and path == "/version":
        return "version", None
    if method == "POST" and path.startswith(PREFIX):
        bank, _, rest = path[len(PREFIX):].partition("/")
        if rest == "memories":
            return "retain", unquote(bank)
        if rest == "memories/recall":
            return "recall", unquote(bank)
    return None, None


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _memory(text: str, metadata: dict[str, str] | None, tags: list[str] | None, context: str | None) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "text": text, "type": "world", "context": context, "metadata": metadata, "tags": tags}


def _retain_problem(body: Any) -> str | None:
    if not isinstance(body, dict) or not isinstance(body.get("items"), list) or not body["items"]:
        return "items: a non-empty list is required"
    if not isinstance(body.get("async", False), bool):
        return "async: must be a boolean"
    for item in body["items"]:
        if not isinstance(item, dict) or not isinstance(item.get("content"), str):
            return "items[].content: a string is required"
        metadata = item.get("metadata")
        if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
            return "items[].metadata: must map strings to strings"
        tags = item.get("tags")
        if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
            return "items[].tags: must be a list of strings"
        if not isinstance(item.get("context"), str | None) or not isinstance(item.get("timestamp"), str | None):
            return "items[].context and timestamp: must be strings"
    return None


def _recall_problem(body: Any) -> str | None:
    if not isinstance(body, dict) or not isinstance(body.get("query"), str):
        return "query: a string is required"
    if body.get("budget", "mid") not in BUDGETS:
        return "budget: must be one of low, mid, high"
    if not isinstance(body.get("max_tokens", 4096), int):
        return "max_tokens: must be an integer"
    return None


def _send(h: BaseHTTPRequestHandler, status: int, body: Any, *, declare_length: bool = True) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        if declare_length:
            h.send_header("Content-Length", str(len(data)))
        else:
            h.send_header("Connection", "close")
            h.close_connection = True
        h.end_headers()
        h.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client gave up (a timeout test) or stopped reading (an oversize test)
