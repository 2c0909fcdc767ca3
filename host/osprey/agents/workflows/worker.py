"""The process a workflow's script runs in: an embedded V8 (mini-racer), talking to the broker in
JSON lines on stdin and stdout.

It runs in a process of its own so that nothing the script does (an endless loop, an allocation
past any limit, a crash in V8) can block or take down the broker: the broker kills this process
at the run's wall-clock limit, when the run is interrupted, or when it breaks the protocol.

The broker sends one `start` message: the source, its file name, the arguments and the heap
limit. The worker answers with `agent` requests (`osprey.agent`), `log` lines (`osprey.log`) and
finally `done` (the JSON of what `main` returned) or `error`; the broker answers each agent
request with `agent_result`. This module imports nothing of Osprey's: it starts fast.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import threading
from typing import Any

MAX_RESULT_CHARS = 1024 * 1024  # the JSON of `main`'s result at most
MAX_MESSAGE_CHARS = 4 * 1024 * 1024  # one line from the broker at most
MAX_PROMPT_CHARS = 100_000  # runs.MAX_PROMPT_CHARS: an agent's prompt at most
MAX_SPEC_CHARS = 512 * 1024  # the JSON of one `osprey.agent` spec at most (a full prompt, escaped, fits)
HEAP_EXIT = 3  # the exit status when the memory limit was reached
PAGE = os.sysconf("SC_PAGE_SIZE")

# Defines the `osprey` object a workflow's `main` gets, then runs `main` and gives its result's
# JSON. `agent` and `log` are Python functions (each call returns a promise).
RUNNER = r"""
(agentCall, logCall, args, argvJson, toolsJson, maxResult, maxPrompt, maxSpec) => {
  if (typeof main !== "function") {
    throw new Error("the workflow defines no `async function main(osprey)`");
  }
  const osprey = Object.freeze({
    args: args,
    argv: Object.freeze(JSON.parse(argvJson)),
    tools: Object.freeze(JSON.parse(toolsJson)),
    log: (message) => { logCall(String(message)); },
    agent: async (spec) => {
      if (spec === null || typeof spec !== "object" || Array.isArray(spec)) {
        throw new TypeError("osprey.agent takes an object: {prompt, persona, model, tools}");
      }
      if (typeof spec.prompt === "string" && spec.prompt.length > maxPrompt) {
        throw new RangeError("osprey.agent: the prompt is " + spec.prompt.length + " characters long, more than the " + maxPrompt + " a prompt may hold; shorten it");
      }
      const text = JSON.stringify(spec);
      if (text.length > maxSpec) {
        throw new RangeError("osprey.agent: the spec is " + text.length + " characters of JSON, more than the " + maxSpec + " one call may send; shorten it");
      }
      const answer = JSON.parse(await agentCall(text));
      if (answer.error !== undefined) {
        throw new Error(answer.error);
      }
      return answer.result;
    },
  });
  return Promise.resolve(main(osprey)).then((value) => {
    const text = JSON.stringify(value === undefined ? null : value);
    if (text === undefined) {
      throw new TypeError("main returned a value that is not JSON (a function or a symbol)");
    }
    if (text.length > maxResult) {
      throw new RangeError("main returned " + text.length + " characters of JSON, more than the " + maxResult + " a result may hold");
    }
    return text;
  });
}
"""


class Broker:
    """The broker at the other end of stdin and stdout."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: dict[int, asyncio.Future[str]] = {}
        self.next_id = 0
        self.lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        line = (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")
        with self.lock:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()

    def answered(self, message: dict[str, Any]) -> None:
        future = self.pending.pop(int(message.get("id", -1)), None)
        if future is not None and not future.done():
            future.set_result(json.dumps({"error": message["error"]} if "error" in message else {"result": message.get("result")}))

    async def agent(self, spec: Any) -> str:
        self.next_id += 1
        ident = self.next_id
        future = self.loop.create_future()
        self.pending[ident] = future
        self.send({"op": "agent", "id": ident, "spec": str(spec)})
        return await future

    async def log(self, message: Any) -> None:
        self.send({"op": "log", "message": str(message)[:4000]})


def read_stdin(broker: Broker) -> None:
    """Answers from the broker, on a thread of their own (the loop may be busy in V8)."""
    for raw in sys.stdin.buffer:
        if len(raw) > MAX_MESSAGE_CHARS:
            continue
        try:
            message = json.loads(raw)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("op") == "agent_result":
            broker.loop.call_soon_threadsafe(broker.answered, message)
    os._exit(0)  # the broker went away: nothing is left to do


def resident() -> int:
    """This process's resident memory in bytes (0 where /proc cannot be read)."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read(200).split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def where(text: str, filename: str) -> str:
    """A V8 error with its place as FILE:LINE: the first frame in the workflow's file, or the
    line of a syntax error."""
    text = text.removeprefix("JavaScript rejected promise with reason: ").strip()
    text = text.replace("<anonymous>", filename)
    lines = text.splitlines()
    place = re.search(rf"{re.escape(filename)}:(\d+)", text)
    first = lines[0] if lines else "error"
    if first.startswith(f"{filename}:"):
        # A syntax error: "<file>:2: SyntaxError: Unexpected token ';'"
        head, _, message = first.partition(": ")
        return f"{head}: {message}"
    if place is not None:
        return f"{filename}:{place.group(1)}: {first}"
    return f"{filename}: {first}"


async def run(start: dict[str, Any], broker: Broker) -> None:
    from py_mini_racer import JSOOMException, init_mini_racer, mini_racer

    heap = int(start["heap_mb"]) * 1024 * 1024
    filename = str(start["filename"])
    # V8's own limit, past the hard limit below: if an allocation outruns the check, V8 ends this
    # process (never the broker).
    init_mini_racer(flags=("--single-threaded", f"--max-old-space-size={max(16, 2 * int(start['heap_mb']))}"), ignore_duplicate_init=True)
    with mini_racer() as racer:
        racer.set_hard_memory_limit(heap)
        # The script's memory, its heap and the buffers outside it (typed arrays' backing stores),
        # is held to heap_mb over what this process holds once V8 has started. An address-space
        # limit cannot do it: V8 reserves far more address space than it uses.
        ceiling = resident() + heap

        def watch() -> None:
            # A limit reached inside a callback's continuation ends no promise: end the run here.
            while not stop.wait(0.02):
                if racer.was_hard_memory_limit_reached() or resident() > ceiling:
                    broker.send({"op": "error", "kind": "heap", "error": f"{filename}: the script used more than its heap limit of {start['heap_mb']} MB"})
                    os._exit(HEAP_EXIT)

        stop = threading.Event()
        threading.Thread(target=watch, daemon=True).start()
        async with racer.wrap_py_function(broker.agent) as agent_call, racer.wrap_py_function(broker.log) as log_call:
            try:
                await racer.eval_cancelable(str(start["source"]) + f"\n//# sourceURL={filename}\n")
                runner: Any = racer.eval(RUNNER + "\n//# sourceURL=osprey-runner\n")  # its frames are not the file's
                promise = runner(agent_call, log_call, str(start["args"]), json.dumps([str(word) for word in start["argv"]]),
                                 json.dumps([str(name) for name in start.get("tools", [])]), MAX_RESULT_CHARS, MAX_PROMPT_CHARS, MAX_SPEC_CHARS)
                text = await promise
            except JSOOMException:
                broker.send({"op": "error", "kind": "heap", "error": f"{filename}: the script used more than its heap limit of {start['heap_mb']} MB"})
                os._exit(HEAP_EXIT)
            except Exception as exc:  # noqa: BLE001 - every JavaScript failure is the run's error
                broker.send({"op": "error", "kind": "script", "error": where(str(exc), filename)})
                return
            finally:
                stop.set()
            broker.send({"op": "done", "value": str(text)})


def main() -> None:
    first = sys.stdin.buffer.readline(MAX_MESSAGE_CHARS)
    start = json.loads(first)
    loop = asyncio.new_event_loop()
    broker = Broker(loop)
    threading.Thread(target=read_stdin, args=(broker,), daemon=True).start()
    try:
        loop.run_until_complete(run(start, broker))
    finally:
        sys.stdout.flush()
    os._exit(0)  # V8's threads and the reader thread are not waited for


if __name__ == "__main__":
    main()
