"""Custom tools: manifests parsed and refused, and real programs (sh and Python scripts written into
tmp dirs) run as model tools on the host and in a real sandbox lane."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from helpers import CALL_BOUND_S, read_pid, require_docker, wait_for_file, wait_host_gone, write
from homes import lane_home

from osprey.extensions.custom_tools import (
    MAX_INPUT_BYTES,
    MAX_MANIFEST_BYTES,
    STREAM_HEAD_BYTES,
    STREAM_TAIL_BYTES,
    ManifestError,
    ToolManifest,
    check_name,
    custom_tool,
    parameters_schema,
    parse_manifest,
    resolve_program,
)
from osprey.extensions.layers import ArtifactError
from osprey.tools.base import Invocation, Tool, ToolContext, ToolOutcome
from osprey.tools.builtin import base_tools
from osprey.toolservice.client import dropped_marker

SPEC_EXAMPLE = b"""
name = "word_count"
description = "Counts whitespace-separated words."
command = ["./count.sh", "--json"]
timeout_secs = 30
sandbox = true

[parameters.text]
type = "string"
description = "Text to count."
required = true

[parameters.mode]
type = "string"
enum = ["words", "lines"]
required = false
"""


def manifest_text(**fields: Any) -> bytes:
    """A manifest with these top-level fields (TOML values written as JSON, which TOML reads alike)."""
    base: dict[str, Any] = {"name": "t", "description": "A test tool.", "command": ["./tool.sh"]}
    base.update(fields)
    lines = []
    params = base.pop("parameters", None)
    for key, value in base.items():
        if value is not None:
            lines.append(f"{key} = {json.dumps(value)}")
    for pname, spec in (params or {}).items():
        lines.append(f"[parameters.{json.dumps(pname)}]")
        lines.extend(f"{k} = {json.dumps(v)}" for k, v in spec.items())
    return ("\n".join(lines) + "\n").encode()


def manifest(**fields: Any) -> ToolManifest:
    return parse_manifest(manifest_text(**fields), source="tools/t.toml")


def script(path: Path, body: str, *, shell: str = "#!/bin/sh") -> Path:
    write(path, f"{shell}\n{body}" if shell else body)
    path.chmod(0o755)
    return path


def context(tool_service: str = "local", client: Any = None, roots: list[str] | None = None) -> ToolContext:
    return ToolContext(client=client, cwd=os.getcwd(), roots=roots or [os.getcwd()], bash_max_output_bytes=1 << 20, tool_service=tool_service)


async def call(tool: Tool, arguments: Mapping[str, Any], ctx: ToolContext | None = None) -> ToolOutcome:
    value, problem = tool.validate(arguments)
    assert problem is None, problem
    result = await asyncio.wait_for(tool.run(Invocation("call-1", tool.name, value), ctx or context()), CALL_BOUND_S)
    assert isinstance(result, ToolOutcome)
    return result


# --- manifests ----------------------------------------------------------------------------------


def test_the_documented_example_parses() -> None:
    m = parse_manifest(SPEC_EXAMPLE, source="tools/word_count.toml")
    assert (m.name, m.command, m.timeout_secs, m.sandbox) == ("word_count", ["./count.sh", "--json"], 30, True)
    assert m.parameters["text"].required and m.parameters["text"].description == "Text to count."
    assert m.parameters["mode"].enum == ["words", "lines"] and not m.parameters["mode"].required


def test_defaults() -> None:
    m = parse_manifest(b'name = "x_1"\ndescription = "d"\ncommand = ["prog"]\n', source="s")
    assert (m.timeout_secs, m.sandbox, m.parameters) == (300, False, {})
    assert parameters_schema(m) == {"type": "object", "properties": {}, "additionalProperties": False}


@pytest.mark.parametrize(("fields", "field"), [
    ({"name": None}, "name"),
    ({"name": ""}, "name"),
    ({"name": "Word"}, "name"),
    ({"name": "word-count"}, "name"),
    ({"name": "a" * 65}, "name"),
    ({"name": 7}, "name"),
    ({"description": None}, "description"),
    ({"description": ""}, "description"),
    ({"description": "  \n "}, "description"),
    ({"description": "d" * 9000}, "description"),
    ({"description": ["d"]}, "description"),
    ({"command": None}, "command"),
    ({"command": []}, "command"),
    ({"command": "./tool.sh"}, "command"),
    ({"command": [1]}, "command.0"),
    ({"command": [""]}, "command.0"),
    ({"command": ["./t", "a\u0000b"]}, "command"),
    ({"command": ["x"] * 300}, "command"),
    ({"timeout_secs": 0}, "timeout_secs"),
    ({"timeout_secs": 3601}, "timeout_secs"),
    ({"timeout_secs": "30"}, "timeout_secs"),
    ({"timeout_secs": True}, "timeout_secs"),
    ({"timeout_secs": 1.5}, "timeout_secs"),
    ({"sandbox": "yes"}, "sandbox"),
    ({"sandbox": 1}, "sandbox"),
    ({"parameters": {"p": {"description": "no type"}}}, "parameters.p.type"),
    ({"parameters": {"p": {"type": "str"}}}, "parameters.p.type"),
    ({"parameters": {"p": {"type": ["string", "null"]}}}, "parameters.p.type"),
    ({"parameters": {"p": {"type": "string", "description": 3}}}, "parameters.p.description"),
    ({"parameters": {"p": {"type": "string", "enum": "a"}}}, "parameters.p.enum"),
    ({"parameters": {"p": {"type": "string", "enum": [1, 2]}}}, "parameters.p.enum.0"),
    ({"parameters": {"p": {"type": "string", "enum": []}}}, "parameters.p.enum"),
    ({"parameters": {"p": {"type": "string", "enum": ["a", "a"]}}}, "parameters.p"),
    ({"parameters": {"p": {"type": "integer", "enum": ["1"]}}}, "parameters.p"),
    ({"parameters": {"p": {"type": "string", "required": "yes"}}}, "parameters.p.required"),
    ({"parameters": {"p": {"type": "string", "default": "x"}}}, "parameters.p.default"),
    ({"parameters": {"two words": {"type": "string"}}}, "parameters.two words"),
    ({"parameters": {"9lives": {"type": "string"}}}, "parameters.9lives"),
    ({"parameters": {"p" * 65: {"type": "string"}}}, f"parameters.{'p' * 65}"),
    ({"parameters": {f"p{i}": {"type": "string"} for i in range(65)}}, "parameters"),
    ({"version": 2}, "version"),
])
def test_a_bad_field_is_refused_by_name(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(ManifestError) as info:
        manifest(**fields)
    err = info.value
    assert err.field == field
    assert str(err).startswith(f"field {field if len(field) <= 80 else field[:80] + '…'!r}: ")
    assert err.source == "tools/t.toml"
    assert isinstance(err, ArtifactError)  # discovery's "cannot be used" error


@pytest.mark.parametrize(("data", "words"), [
    (b'name = "t"\ndescription = "d"\ncommand = ["./t"\n', "not valid TOML"),
    (b'name = "t"\nname = "u"\ndescription = "d"\ncommand = ["x"]\n', "not valid TOML"),
    (b'name = "t\xff"\ndescription = "d"\ncommand = ["x"]\n', "not UTF-8"),
    (b"", "field 'name'"),
    (b"#" + b"x" * MAX_MANIFEST_BYTES + b"\n", f"{MAX_MANIFEST_BYTES}-byte limit"),
])
def test_an_unreadable_manifest_is_refused(data: bytes, words: str) -> None:
    with pytest.raises(ManifestError, match=words):
        parse_manifest(data, source="s")


def test_a_reason_is_sanitized_and_short() -> None:
    # A key of the file's own, with a terminal escape and a newline in it, lands in the reason.
    data = b'name = "t"\ndescription = "d"\ncommand = ["x"]\n"\\u001b[31mred\\nline' + b"k" * 500 + b'" = 1\n'
    with pytest.raises(ManifestError) as info:
        parse_manifest(data, source="s")
    reason = str(info.value)
    assert "unknown key" in reason
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in reason)
    assert len(reason) <= 300


def test_a_manifest_at_the_size_limit_is_read() -> None:
    data = manifest_text()
    data += b"#" * (MAX_MANIFEST_BYTES - len(data) - 1) + b"\n"
    assert len(data) == MAX_MANIFEST_BYTES
    assert parse_manifest(data, source="s").name == "t"


def test_a_builtin_name_cannot_be_shadowed() -> None:
    builtin = [t.name for t in base_tools(host_processes=True)]
    check_name(manifest(name="word_count"), builtin)
    with pytest.raises(ManifestError) as info:
        check_name(manifest(name="bash"), builtin, source="tools/bash.toml")
    assert "'bash'" in str(info.value) and "built-in" in str(info.value)
    assert (info.value.field, info.value.source) == ("name", "tools/bash.toml")


# --- the schema the model sees ------------------------------------------------------------------


def test_model_input_is_validated_against_the_parameters(tmp_path: Path) -> None:
    tool = custom_tool(parse_manifest(SPEC_EXAMPLE, source="s"), tmp_path)
    assert (tool.name, tool.description, tool.read_only, tool.trusted) == ("word_count", "Counts whitespace-separated words.", False, False)
    assert tool.parameters == {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "Text to count."},
            "mode": {"type": "string", "enum": ["words", "lines"]},
        },
        "required": ["text"],
        "additionalProperties": False,
    }
    assert tool.validate({"text": "a b"}) == ({"text": "a b"}, None)
    assert tool.validate({"text": "a", "mode": "lines"})[1] is None
    for bad, words in [({}, "'text' is a required property"), ({"text": 3}, "not of type 'string'"),
                       ({"text": "a", "mode": "chars"}, "is not one of"), ({"text": "a", "extra": 1}, "Additional properties")]:
        value, problem = tool.validate(bad)
        assert value is None and problem is not None and words in problem, (bad, problem)


def test_every_type_makes_a_valid_schema(tmp_path: Path) -> None:
    types = ["string", "number", "integer", "boolean", "array", "object", "null"]
    tool = custom_tool(manifest(parameters={t: {"type": t, "required": True} for t in types}), tmp_path)
    good = {"string": "s", "number": 1.5, "integer": 2, "boolean": True, "array": [1], "object": {"a": 1}, "null": None}
    assert tool.validate(good)[1] is None
    assert tool.validate({**good, "integer": 1.5})[1] is not None


# --- where the program is -----------------------------------------------------------------------


def test_program_resolution_and_identity(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    tools = workspace / ".osprey" / "tools"
    script(tools / "count.sh", "echo hi\n")
    script(tools / "bin" / "inner.sh", "echo hi\n")
    os.symlink("/bin/sh", tools / "shell")
    system = tmp_path / "system-bin"
    script(system / "systool", "echo hi\n")
    search = f"relative-entry:{system}"

    ref = resolve_program(manifest(command=["./count.sh"]), tools)
    assert (ref.kind, ref.path, ref.workdir) == ("relative", tools / "count.sh", tools)
    ref = resolve_program(manifest(command=["count.sh"]), tools, search_path=search)  # beside the manifest first
    assert (ref.kind, ref.path) == ("relative", tools / "count.sh")
    ref = resolve_program(manifest(command=["bin/inner.sh"]), tools)
    assert (ref.kind, ref.workdir) == ("relative", tools / "bin")
    ref = resolve_program(manifest(command=["../../run.sh"]), tools)  # leaves the manifest dir, stays in the workspace
    ref = resolve_program(manifest(command=["./shell"]), tools)  # a link beside the manifest to a system program
    ref = resolve_program(manifest(command=[str(system / "systool")]), tools)
    assert (ref.kind, ref.workdir) == ("absolute", system)
    ref = resolve_program(manifest(command=["systool"]), tools, search_path=search)
    assert (ref.kind, ref.path, ref.workdir) == ("search", system / "systool", tools)
    ref = resolve_program(manifest(command=["no-such-tool-osprey"]), tools, search_path=search)
    assert (ref.kind, ref.path) == ("search", None)


def test_a_pin_covers_the_program_and_the_files_its_arguments_name(tmp_path: Path) -> None:
    from osprey.extensions.pins import plan_tool, scope_of

    tools = tmp_path / "tools"
    write(tools / "tool.py", "print('hi')\n")
    write(tools / "lib" / "conf.json", "{}\n")
    script(tools / "run.sh", "echo hi\n")
    scope = scope_of([tmp_path], tmp_path)
    python = os.path.join(os.path.dirname(sys.executable), "python3")
    plan = plan_tool(["python3", "tool.py", "--config", "lib/conf.json", "--verbose", "/etc/hostname-osprey-missing"], python,
                     workdir=str(tools), scope=scope)
    assert [(f.local, f.shown) for f in plan.files] == [(False, python), (True, "tools/tool.py"), (True, "tools/lib/conf.json")]
    plan = plan_tool(["./run.sh", "./run.sh", "--rc=lib/conf.json"], str(tools / "run.sh"), workdir=str(tools), scope=scope)
    assert [f.shown for f in plan.files] == ["tools/run.sh", "tools/lib/conf.json"]


# --- running on the host ------------------------------------------------------------------------

ECHO_STDIN = f"""#!{sys.executable}
import os, sys
data = sys.stdin.buffer.read()
open(os.path.join(os.environ["OUT_DIR"], "stdin.bin"), "wb").write(data)
print("cwd=" + os.getcwd())
"""


async def test_stdin_gets_one_json_object_and_a_newline(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    script(tools / "bin" / "echo.py", ECHO_STDIN, shell="")
    m = manifest(command=["bin/echo.py"], parameters={"text": {"type": "string", "required": True}, "n": {"type": "integer"}, "tags": {"type": "array"}})
    tool = custom_tool(m, tools, env={**os.environ, "OUT_DIR": str(tmp_path)})
    arguments = {"text": "héllo \"quoted\"\nnew line \U0001f600", "n": 3, "tags": ["a", {"b": None}]}
    outcome = await call(tool, arguments)
    assert not outcome.is_error, outcome
    received = (tmp_path / "stdin.bin").read_bytes()
    assert received.endswith(b"\n") and received.count(b"\n") == 1
    assert json.loads(received) == arguments
    assert outcome.text == f"cwd={os.path.realpath(tools / 'bin')}\n"


async def test_the_program_runs_without_a_shell_in_its_own_directory(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    script(tools / "args.sh", 'printf "%s|" "$0" "$@"; echo; pwd -P; cat >/dev/null\n')
    tool = custom_tool(manifest(command=["./args.sh", "$HOME", "a; touch pwned", "*"]), tools)
    outcome = await call(tool, {})
    assert outcome.text == f"{tools / 'args.sh'}|$HOME|a; touch pwned|*|\n{os.path.realpath(tools)}\n"
    assert not (tools / "pwned").exists()


async def test_exit_zero_returns_stdout_and_labelled_stderr(tmp_path: Path) -> None:
    script(tmp_path / "quiet.sh", "cat >/dev/null\n")
    script(tmp_path / "out.sh", "cat >/dev/null; printf 'result'\n")
    script(tmp_path / "both.sh", "cat >/dev/null; echo result; echo warning >&2\n")
    assert (await call(custom_tool(manifest(command=["./out.sh"]), tmp_path), {})) == ToolOutcome("result")
    assert (await call(custom_tool(manifest(command=["./both.sh"]), tmp_path), {})) == ToolOutcome("result\n[stderr]\nwarning\n")
    assert (await call(custom_tool(manifest(command=["./quiet.sh"]), tmp_path), {})) == ToolOutcome("[t exited with code 0 and printed nothing]")


async def test_a_nonzero_exit_is_an_error_with_the_output(tmp_path: Path) -> None:
    script(tmp_path / "fail.sh", "echo partial; echo 'went wrong' >&2; exit 3\n")
    outcome = await call(custom_tool(manifest(command=["./fail.sh"]), tmp_path), {})
    assert outcome == ToolOutcome("partial\n[stderr]\nwent wrong\n[t exited with code 3]", True, "exit_status")
    script(tmp_path / "killed.sh", "echo before; kill -9 $$\n")
    outcome = await call(custom_tool(manifest(command=["./killed.sh"]), tmp_path), {})
    assert outcome == ToolOutcome("before\n[t was killed by signal 9]", True, "exit_status")


def pattern(n: int) -> bytes:
    """n bytes of numbered lines: any slice of it shows where it came from."""
    out = b"".join(b"%09d\n" % i for i in range(n // 10 + 1))
    return out[:n]


WRITER = f"""#!{sys.executable}
import json, sys
args = json.loads(sys.stdin.readline())
n = args["n"]
data = b"".join(b"%09d\\n" % i for i in range(n // 10 + 1))[:n]
stream = sys.stdout if args["stream"] == "stdout" else sys.stderr
stream.buffer.write(data)
stream.flush()
"""


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
@pytest.mark.parametrize("extra", [0, 1, 3 * 1024 * 1024 + 7])
async def test_output_keeps_its_head_and_tail(tmp_path: Path, stream: str, extra: int) -> None:
    script(tmp_path / "writer.py", WRITER, shell="")
    m = manifest(command=["./writer.py"], parameters={"n": {"type": "integer"}, "stream": {"type": "string"}})
    n = STREAM_HEAD_BYTES + STREAM_TAIL_BYTES + extra
    outcome = await call(custom_tool(m, tmp_path), {"n": n, "stream": stream})
    assert not outcome.is_error
    data = pattern(n)
    if extra == 0:
        kept = data.decode()
    else:
        kept = data[:STREAM_HEAD_BYTES].decode() + dropped_marker(extra) + data[-STREAM_TAIL_BYTES:].decode()
    assert outcome.text == (kept if stream == "stdout" else "[stderr]\n" + kept)


async def test_a_timeout_kills_the_process_group(tmp_path: Path) -> None:
    # The grandchild ignores SIGTERM, so only the SIGKILL after the grace ends it.
    script(tmp_path / "slow.sh", f"(trap '' TERM; exec sleep 300) & echo $! > {tmp_path}/grandchild.pid\necho started\nsleep 300\n")
    m = manifest(command=["./slow.sh"], timeout_secs=1)
    outcome = await call(custom_tool(m, tmp_path), {})
    assert outcome == ToolOutcome("started\n[t timed out after 1 s; its process group was terminated]", True, "timeout")
    await wait_host_gone(read_pid(tmp_path / "grandchild.pid"))


async def test_a_cancel_kills_the_process_group_and_propagates(tmp_path: Path) -> None:
    script(tmp_path / "slow.sh", f"sleep 300 & echo $! > {tmp_path}/grandchild.pid\necho $$ > {tmp_path}/child.pid\nwait\n")
    tool = custom_tool(manifest(command=["./slow.sh"]), tmp_path)
    task = asyncio.ensure_future(tool.run(Invocation("c", "t", {}), context()))
    await wait_for_file(tmp_path / "child.pid")
    grandchild, child = read_pid(tmp_path / "grandchild.pid"), read_pid(tmp_path / "child.pid")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, CALL_BOUND_S)
    await wait_host_gone(grandchild)
    await wait_host_gone(child)


async def test_what_a_program_leaves_running_is_stopped(tmp_path: Path) -> None:
    script(tmp_path / "bg.sh", f"sleep 300 >/dev/null 2>&1 & echo $! > {tmp_path}/bg.pid\necho done\n")
    outcome = await call(custom_tool(manifest(command=["./bg.sh"]), tmp_path), {})
    assert outcome == ToolOutcome("done\n[processes t left running were stopped]")
    await wait_host_gone(read_pid(tmp_path / "bg.pid"))


async def test_a_program_that_cannot_start_is_a_tool_failure(tmp_path: Path) -> None:
    outcome = await call(custom_tool(manifest(command=["./missing.sh"]), tmp_path), {})
    assert (outcome.is_error, outcome.category) == (True, "tool_failed") and "no such program" in outcome.text
    write(tmp_path / "data.txt", "not a program\n").chmod(0o644)
    outcome = await call(custom_tool(manifest(command=["./data.txt"]), tmp_path), {})
    assert (outcome.is_error, outcome.category) == (True, "tool_failed") and "not an executable" in outcome.text
    outcome = await call(custom_tool(manifest(command=["no-such-program-osprey"]), tmp_path, env={"PATH": "/nowhere"}), {})
    assert (outcome.is_error, outcome.category) == (True, "tool_failed") and "PATH" in outcome.text
    # Deleted after the tool was made.
    tool = custom_tool(manifest(command=["./gone.sh"]), script(tmp_path / "gone.sh", "echo here\n").parent)
    (tmp_path / "gone.sh").unlink()
    outcome = await call(tool, {})
    assert outcome.category == "tool_failed"


async def test_a_bare_name_is_found_beside_the_manifest_then_on_path(tmp_path: Path) -> None:
    tools, bin_dir = tmp_path / "tools", tmp_path / "bin"
    script(bin_dir / "mytool", "cat >/dev/null; echo from PATH in $(pwd -P)\n")
    tools.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
    tool = custom_tool(manifest(command=["mytool"]), tools, env=env)
    assert (await call(tool, {})).text == f"from PATH in {os.path.realpath(tools)}\n"
    script(tools / "mytool", "cat >/dev/null; echo beside the manifest\n")
    tool = custom_tool(manifest(command=["mytool"]), tools, env=env)
    assert (await call(tool, {})).text == "beside the manifest\n"


async def test_a_resolved_program_is_the_one_that_runs(tmp_path: Path) -> None:
    # A caller that resolved the program (for its trust pin) hands that reference over.
    script(tmp_path / "a" / "x.sh", "cat >/dev/null; echo a\n")
    script(tmp_path / "b" / "x.sh", "cat >/dev/null; echo b\n")
    ref = resolve_program(manifest(command=["./x.sh"]), tmp_path / "a")
    assert (await call(custom_tool(manifest(command=["./x.sh"]), tmp_path / "b", program=ref), {})).text == "a\n"


async def test_the_environment_is_the_one_given(tmp_path: Path) -> None:
    script(tmp_path / "env.sh", 'cat >/dev/null; echo "${OSPREY_CT_MARK:-unset}"\n')
    tool = custom_tool(manifest(command=["./env.sh"]), tmp_path, env={"PATH": os.defpath, "OSPREY_CT_MARK": "given"})
    assert (await call(tool, {})).text == "given\n"


async def test_input_over_the_limit_is_refused_before_running(tmp_path: Path) -> None:
    script(tmp_path / "mark.sh", f"touch {tmp_path}/ran\n")
    tool = custom_tool(manifest(command=["./mark.sh"], parameters={"text": {"type": "string"}}), tmp_path)
    outcome = await call(tool, {"text": "x" * MAX_INPUT_BYTES})
    assert (outcome.is_error, outcome.category) == (True, "invalid_arguments") and f"{MAX_INPUT_BYTES}-byte limit" in outcome.text
    assert not (tmp_path / "ran").exists()
    assert not (await call(tool, {"text": "x" * (MAX_INPUT_BYTES - 100)})).is_error
    assert (tmp_path / "ran").exists()


# --- sandbox = true -----------------------------------------------------------------------------


async def test_sandbox_true_is_refused_without_a_lane(tmp_path: Path) -> None:
    script(tmp_path / "mark.sh", f"touch {tmp_path}/ran\n")
    tool = custom_tool(manifest(command=["./mark.sh"], sandbox=True), tmp_path)
    outcome = await call(tool, {}, context("local"))
    assert (outcome.is_error, outcome.category) == (True, "sandbox_unavailable")
    assert "--sandbox" in outcome.text
    assert not (tmp_path / "ran").exists()


LANE_TOOL = """#!/bin/sh
input=$(cat)
printf 'input=%s\\n' "$input"
echo "cwd=$(pwd -P)"
echo "mark=${OSPREY_CT_MARK:-unset}"
test -f /.dockerenv && echo "in a container"
echo "to stderr" >&2
"""


async def test_sandbox_true_runs_in_the_lane(workspace: Path, tmp_path: Path) -> None:
    require_docker()
    tools = workspace / ".osprey" / "tools"
    script(tools / "lane.sh", LANE_TOOL, shell="")
    script(tools / "writer.py", WRITER.replace(sys.executable, "/usr/bin/env python3"), shell="")
    script(tools / "fail.sh", "cat >/dev/null; echo nope; exit 4\n")
    script(tools / "slow.sh", "sleep 300\n")
    outside = tmp_path / "home-tools"
    script(outside / "lane.sh", LANE_TOOL, shell="")
    host_env = {**os.environ, "OSPREY_CT_MARK": "host"}
    async with lane_home([str(workspace)]) as home:
        ctx = context("lane", home.client, list(home.roots))
        m = manifest(command=["./lane.sh"], sandbox=True, parameters={"a": {"type": "string"}})
        outcome = await call(custom_tool(m, tools, env=host_env), {"a": "b c"}, ctx)
        assert outcome == ToolOutcome(
            f'input={{"a":"b c"}}\ncwd={os.path.realpath(tools)}\nmark=unset\nin a container\n[stderr]\nto stderr\n'), outcome

        n = STREAM_HEAD_BYTES + STREAM_TAIL_BYTES + 1
        m = manifest(command=["./writer.py"], sandbox=True, parameters={"n": {"type": "integer"}, "stream": {"type": "string"}})
        outcome = await call(custom_tool(m, tools), {"n": n, "stream": "stdout"}, ctx)
        data = pattern(n)
        assert outcome.text == data[:STREAM_HEAD_BYTES].decode() + dropped_marker(1) + data[-STREAM_TAIL_BYTES:].decode()

        outcome = await call(custom_tool(manifest(command=["./fail.sh"], sandbox=True), tools), {}, ctx)
        assert outcome == ToolOutcome("nope\n[t exited with code 4]", True, "exit_status")
        outcome = await call(custom_tool(manifest(command=["./slow.sh"], sandbox=True, timeout_secs=1), tools), {}, ctx)
        assert (outcome.is_error, outcome.category) == (True, "timeout")
        outcome = await call(custom_tool(manifest(command=["./missing.sh"], sandbox=True), tools), {}, ctx)
        assert (outcome.is_error, outcome.category) == (True, "tool_failed") and "not_found" in outcome.text

        # A tool beside a manifest outside the workspace (say, $OSPREY_HOME/tools): the lane cannot see it.
        outcome = await call(custom_tool(manifest(command=["./lane.sh"], sandbox=True), outside), {}, ctx)
        assert (outcome.is_error, outcome.category) == (True, "sandbox_unavailable")
        assert str(outside) in outcome.text
