"""A stdio MCP server written as raw JSON-RPC, for the tests of what a misbehaving server may send.

    python raw_server.py MODE [COUNT_FILE]

COUNT_FILE (optional) holds the number of tools/list requests received so far.

Modes:
- `storm`: once it has answered its first resources/list (the last listing), sends notifications/tools/list_changed as
  fast as it can, forever.
- `early-storm`: the same from the start (before it is listed).
- `burst`: once initialized, sends 200 notifications/tools/list_changed a second for 3 s.
- `many`: 300 small tools (3 pages of 100), 300 prompts, 300 resources.
- `heavy`: 40 tools whose input schemas are ~60 KB each (2 pages of 20).
- `names`: tools, prompts and resources with names and URIs of every bad shape.
"""

import json
import os
import sys
import threading
import time

mode = sys.argv[1]
count_file = sys.argv[2] if len(sys.argv) > 2 else os.devnull
out = sys.stdout.buffer
lock = threading.Lock()
lists = 0
storming = False


def send(obj: dict) -> None:
    data = json.dumps(obj).encode() + b"\n"
    with lock:
        out.write(data)
        out.flush()


def changed() -> None:
    send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})


def storm() -> None:
    while True:
        changed()


def burst() -> None:
    for _ in range(30):
        for _ in range(20):
            changed()
        time.sleep(0.1)


def tool(name: str, schema_kb: int = 0, **more: object) -> dict:
    props = {f"p{i}": {"type": "string", "description": "x" * 1000} for i in range(schema_kb)}
    return {"name": name, "description": "a tool", "inputSchema": {"type": "object", "properties": props}, **more}


def page(items: list, cursor: int, size: int) -> tuple[list, dict]:
    chunk = items[cursor * size:(cursor + 1) * size]
    return chunk, ({"nextCursor": str(cursor + 1)} if (cursor + 1) * size < len(items) else {})


def tools(cursor: int) -> tuple[list, dict]:
    if mode == "many":
        return page([tool(f"t{i}") for i in range(300)], cursor, 100)
    if mode == "heavy":
        return page([tool(f"h{i}", schema_kb=60) for i in range(40)], cursor, 20)
    if mode == "names":
        return [tool("ok", title="T" * 5000), tool("x" * 5000), tool(""), tool("tab\there"), tool("b" * 128)], {}
    return [tool("t0")], {}


def prompts() -> list:
    if mode == "many":
        return [{"name": f"p{i}"} for i in range(300)]
    if mode == "names":
        return [{"name": "fine", "arguments": [{"name": "a", "description": "d" * 5000}]},
                {"name": "p" * 129}, {"name": "badarg", "arguments": [{"name": "y" * 200}]}]
    return []


def resources() -> list:
    if mode == "many":
        return [{"uri": f"memo://r{i}", "name": f"r{i}"} for i in range(300)]
    if mode == "names":
        return [{"uri": "memo://fine", "name": "n" * 5000}, {"uri": "memo://" + "u" * 5000, "name": "long"}]
    return []


for raw in sys.stdin.buffer:
    if not raw.strip():
        continue
    msg = json.loads(raw)
    mid, method = msg.get("id"), msg.get("method")
    params = msg.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": params["protocolVersion"], "serverInfo": {"name": "raw", "version": "1"},
            "capabilities": {"tools": {"listChanged": True}, "prompts": {}, "resources": {}}}})
    elif method == "notifications/initialized":
        if mode in ("early-storm", "burst"):
            threading.Thread(target=storm if mode == "early-storm" else burst, daemon=True).start()
    elif method == "tools/list":
        lists += 1
        with open(count_file, "w") as f:
            f.write(str(lists))
        items, more = tools(int(params.get("cursor") or 0))
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": items, **more}})
    elif method == "prompts/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"prompts": prompts()}})
    elif method == "resources/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"resources": resources()}})
        if mode == "storm" and not storming:
            storming = True
            threading.Thread(target=storm, daemon=True).start()
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": "done"}]}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})
