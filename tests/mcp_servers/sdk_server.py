"""An MCP server written with the official SDK, for the tests (stdio or streamable HTTP).

    python sdk_server.py [--http] [--port N] [--no-initialize] [--exit-after N]
                         [--pid-file PATH] [--start-once PATH] [--stderr TEXT]

- stdio by default; `--http` serves streamable HTTP on 127.0.0.1 at `/mcp`, on `--port N` (0, the
  default: a free port), and prints `listening on PORT` on stdout (one line) once it accepts.
- `--no-initialize`: never answers anything (reads stdin forever; over HTTP, every request hangs).
- `--exit-after N`: the process exits (code 4) when its (N+1)th tool call arrives.
- `--pid-file PATH`: appends the process's pid (one line) to PATH at start.
- `--start-once PATH`: starts only when PATH does not exist (and creates it); otherwise writes a
  line to stderr and exits with code 2 (a server that cannot be started again).
- `--stderr TEXT`: writes TEXT (one line) to stderr at start.

The flags above act before the SDK is imported (it takes a while to import), so a test sees the
pid file and the stderr line at once.

Tools: `echo(text)` (text), `add(a, b)` (structured content `{"sum": a + b}`), `fail(message)`
(isError), `slow(seconds)` (sleeps, then says `slept`), `big(size)` (a text of `size` characters
`x`), `crash(code)` (exits the process), `image()` (a 1x1 PNG), `peek(key)` (readOnlyHint),
`garbage()` (stdio: writes a malformed line to stdout before answering), `grow()` (adds the tool
`extra` and sends notifications/tools/list_changed). Resources: `memo://greeting` (text),
`memo://pixel` (a PNG blob). Prompt: `review(subject, tone?)`.
"""

import argparse
import base64
import os
import sys
import time
from typing import Any

# The protocol's stdout, kept before the SDK diverts fd 1 to stderr (for `garbage`).
WIRE = os.dup(1)

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


def build(exit_after: int | None) -> Any:
    import anyio
    import mcp_types as types
    from mcp.server.mcpserver import Context, MCPServer

    server = MCPServer("osprey-test", instructions="A server for Osprey's tests.")
    calls = 0

    def counted() -> None:
        nonlocal calls
        calls += 1
        if exit_after is not None and calls > exit_after:
            os._exit(4)

    @server.tool(description="Echo the text back.")
    def echo(text: str) -> str:
        counted()
        return text

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> dict[str, int]:
        counted()
        return {"sum": a + b}

    @server.tool(description="Fail with the message.")
    def fail(message: str) -> types.CallToolResult:
        counted()
        return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)

    @server.tool(description="Sleep for some seconds.")
    async def slow(seconds: float) -> str:
        counted()
        await anyio.sleep(seconds)
        return "slept"

    @server.tool(description="Return `size` characters.")
    def big(size: int) -> str:
        counted()
        return "x" * size

    @server.tool(description="Exit the server's process.")
    def crash(code: int = 3) -> str:
        counted()
        print(f"sdk_server: crashing with code {code}", file=sys.stderr, flush=True)
        os._exit(code)

    @server.tool(description="A small PNG image.")
    def image() -> types.CallToolResult:
        counted()
        return types.CallToolResult(content=[
            types.TextContent(type="text", text="a pixel"),
            types.ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png")])

    @server.tool(description="Look a key up without changing anything.", annotations=types.ToolAnnotations(read_only_hint=True))
    def peek(key: str) -> str:
        counted()
        return f"value of {key}"

    @server.tool(description="Write a malformed line to stdout, then answer.")
    def garbage() -> str:
        counted()
        os.write(WIRE, b"this is not json\n")
        time.sleep(0.2)
        return "after garbage"

    @server.tool(description="Add the tool `extra` and announce the change.")
    async def grow(ctx: Context) -> str:
        counted()

        @server.tool(name="extra", description="A tool added at run time.")
        def extra() -> str:
            return "extra"

        try:
            await ctx.request_context.session.send_tool_list_changed()
        except Exception:  # noqa: BLE001 - a modern connection has no legacy session
            pass
        try:
            await ctx.notify_tools_changed()
        except Exception:  # noqa: BLE001
            pass
        return "grown"

    @server.resource("memo://greeting", name="greeting", description="A greeting.", mime_type="text/plain")
    def greeting() -> str:
        return "hello from the resource"

    @server.resource("memo://pixel", name="pixel", description="A PNG.", mime_type="image/png")
    def pixel() -> bytes:
        return PNG

    @server.prompt(description="Ask for a review of a subject.")
    def review(subject: str, tone: str = "kind") -> str:
        return f"Review {subject} in a {tone} tone."

    return server


async def serve_http(server: Any, port: int) -> None:
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="warning")
    print(f"listening on {sock.getsockname()[1]}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


async def hang_http(port: int) -> None:
    """An HTTP server that accepts connections and never answers."""
    import socket

    import anyio

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    print(f"listening on {sock.getsockname()[1]}", flush=True)
    sock.setblocking(False)
    held = []
    while True:
        try:
            held.append(sock.accept()[0])
        except BlockingIOError:
            await anyio.sleep(0.05)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--no-initialize", action="store_true")
    parser.add_argument("--exit-after", type=int)
    parser.add_argument("--pid-file")
    parser.add_argument("--start-once")
    parser.add_argument("--stderr")
    args = parser.parse_args(argv)
    if args.pid_file:
        with open(args.pid_file, "a") as f:
            f.write(f"{os.getpid()}\n")
    if args.stderr:
        print(args.stderr, file=sys.stderr, flush=True)
    if args.start_once:
        if os.path.exists(args.start_once):
            print(f"sdk_server: {args.start_once} exists; refusing to start again", file=sys.stderr, flush=True)
            sys.exit(2)
        open(args.start_once, "w").close()
    if args.no_initialize:
        if args.http:
            import anyio

            anyio.run(hang_http, args.port)
        while sys.stdin.buffer.read(65536):
            pass
        time.sleep(3600)
        return
    server = build(args.exit_after)
    if args.http:
        import anyio

        anyio.run(serve_http, server, args.port)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
