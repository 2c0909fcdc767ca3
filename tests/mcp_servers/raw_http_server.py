"""A streamable HTTP MCP server written as raw JSON-RPC on 127.0.0.1, for the tests of what a
misbehaving server may answer. Prints its port (one line) once it accepts.

Tools (tools/call by name): `big(mib)` answers a JSON body with a text of `mib` MiB; `sse(size)`
answers a text of `size` characters as one SSE event; `reflect()` fails with a JSON-RPC error
whose message repeats the request's Authorization header; `zipped()` answers a gzip-compressed
JSON body whatever the request accepts.
"""

import gzip
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def empty(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self.empty(405)

    def do_DELETE(self) -> None:
        self.empty(200)

    def body(self, data: bytes, kind: str = "application/json", **headers: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(data)

    def reply(self, mid: object, result: dict) -> None:
        self.body(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}).encode())

    def do_POST(self) -> None:
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mid, method, params = msg.get("id"), msg.get("method"), msg.get("params") or {}
        if mid is None:
            return self.empty(202)
        if method == "initialize":
            return self.reply(mid, {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                                    "serverInfo": {"name": "raw-http", "version": "1"}})
        if method == "tools/list":
            return self.reply(mid, {"tools": [{"name": name, "inputSchema": {"type": "object"}} for name in ("big", "sse", "reflect", "zipped")]})
        if method != "tools/call":
            return self.body(json.dumps({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}}).encode())
        name, args = params["name"], params.get("arguments") or {}
        if name == "big":
            head, tail = json.dumps({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "@"}]}}).encode().split(b"@")
            size = int(args["mib"]) << 20
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(head) + size + len(tail)))
            self.end_headers()
            self.wfile.write(head)
            for _ in range(size >> 20):
                self.wfile.write(b"y" * (1 << 20))
            self.wfile.write(tail)
            return None
        if name == "sse":
            data = json.dumps({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "s" * int(args["size"])}]}})
            return self.body(f"event: message\ndata: {data}\n\n".encode(), "text/event-stream")
        if name == "reflect":
            message = f"the token {self.headers.get('Authorization')} is not accepted"
            return self.body(json.dumps({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": message}}).encode())
        if name == "zipped":
            data = json.dumps({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "z"}]}}).encode()
            return self.body(gzip.compress(data), Content_Encoding="gzip")
        return self.body(json.dumps({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "no such tool"}}).encode())


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
