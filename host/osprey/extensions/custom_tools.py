"""Custom tools: a TOML manifest in a layer's `tools/` directory exposes a program as a model tool.

```toml
name = "word_count"
description = "Counts whitespace-separated words."
command = ["./count.sh", "--json"]
timeout_secs = 30
sandbox = true

[parameters.text]
type = "string"
description = "Text to count."
required = true
```

What this module does, in the order the session uses it:

1. `parse_manifest` reads the bytes of one manifest into a `ToolManifest` (or a `ManifestError`
   whose message is a short, sanitized reason for the `osprey extensions` report);
2. `check_name` refuses a built-in tool's name (`tools.names`), on in the session or not;
3. `resolve_program` says where the program is (`ProgramRef`); `pins.plan_tool` lists what a
   trust pin covers: the bytes of the program and of every file its fixed arguments name when
   they live in the workspace (or the user's layer), only the path of a program that lives
   elsewhere (a system program);
4. `custom_tool` builds the `Tool` the model calls.

A call writes the model's input as one JSON object and a newline to the program's stdin, then
closes it. The program runs with no shell: argv is the program and the manifest's fixed arguments.
Its working directory is the program's own directory; `OSPREY_PROJECT_DIR` (the workspace root)
and `OSPREY_CWD` (the session's working directory) say where the workspace is, as paths valid
where the program runs (`tool_paths`). stdout and stderr are each kept as a
512 KiB head and a 512 KiB tail with a marker of the dropped bytes between them, so however much
a program writes, a call holds at most 1 MiB of each. Exit 0 returns stdout (and stderr, under a
label, when there is any); anything else is a failed call that is never repeated by itself:

| category             | when                                                                        |
| -------------------- | --------------------------------------------------------------------------- |
| `exit_status`        | the program exited non-zero or was killed by a signal (its output is kept)  |
| `timeout`            | `timeout_secs` passed; its process group was terminated                     |
| `tool_failed`        | the program could not be started or waited for                              |
| `invalid_arguments`  | the input could not be encoded, or is over 1 MiB as JSON                    |
| `sandbox_unavailable`| `sandbox = true` and the session has no lane, or the lane cannot see it     |
| `modified`           | a file the tool's trust pin covers changed since it was trusted; nothing ran |

Local runs (`sandbox = false`) happen on the host in a new process group. A timeout or a cancel
of the call sends that group SIGTERM, then SIGKILL after a short grace, grandchildren included;
a cancel then propagates. When the program exits, what it left running in its group is stopped
too (as the lane's `Exec` does), once its output has been read for a short while.

`sandbox = true` is enforced: the call goes to the session's lane through the ToolService `Exec`
RPC, where the workspace is mounted at the same path. A program outside the workspace (for
instance in `$OSPREY_HOME/tools`) cannot be seen by the lane and is refused; a session without a
lane refuses the call and says to run with `--sandbox`.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import tomli
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator, model_validator

from .. import tomlfile
from ..errors import ConfigError, ToolError, ToolTimeout
from ..hostrun import Output, StartFailed, run_program
from ..tools.base import Invocation, Tool, ToolContext, ToolOutcome
from .layers import ArtifactError
from .pins import Pin, PinMismatch, Prepared, prepare_tool
from .report import sanitize

MAX_MANIFEST_BYTES = 64 * 1024
MAX_DESCRIPTION_CHARS = 8 * 1024
MAX_PARAMETER_DESCRIPTION_CHARS = 2 * 1024
MAX_PARAMETERS = 64
MAX_ENUM_VALUES = 256
MAX_ENUM_VALUE_CHARS = 256
MAX_COMMAND_ITEMS = 256
MAX_COMMAND_ITEM_CHARS = 4 * 1024
DEFAULT_TIMEOUT_SECS = 300
MAX_TIMEOUT_SECS = 3600
# Bytes of each output stream kept from its head, and from its tail.
STREAM_HEAD_BYTES = 512 * 1024
STREAM_TAIL_BYTES = 512 * 1024
# The model's input as JSON, at most.
MAX_INPUT_BYTES = 1024 * 1024
# Between SIGTERM and SIGKILL of a timed-out or cancelled tool's process group.
KILL_GRACE_S = 2.0
# How long output is still read after the program exits, while something it started holds a pipe.
DRAIN_AFTER_EXIT_S = 0.2

NAME_PATTERN = r"^[a-z0-9_]{1,64}$"
PARAMETER_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
JsonType = Literal["string", "number", "integer", "boolean", "array", "object", "null"]
ParameterName = Annotated[str, StringConstraints(pattern=PARAMETER_NAME_PATTERN)]
CommandItem = Annotated[str, StringConstraints(min_length=1, max_length=MAX_COMMAND_ITEM_CHARS)]


class ManifestError(ConfigError, ArtifactError):
    """A manifest that cannot be used. The message is a short reason without control characters,
    naming the field at fault; `source` is where the manifest came from."""

    def __init__(self, reason: str, *, source: str = "", field: str = "") -> None:
        super().__init__(sanitize(reason))
        self.source = source
        self.field = field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)  # built at first use: most sessions never make one


class ToolParameter(_Strict):
    """One model-facing input field."""

    type: JsonType
    description: str | None = Field(None, max_length=MAX_PARAMETER_DESCRIPTION_CHARS)
    enum: list[Annotated[str, StringConstraints(max_length=MAX_ENUM_VALUE_CHARS)]] | None = Field(None, min_length=1, max_length=MAX_ENUM_VALUES)
    required: bool = False

    @model_validator(mode="after")
    def _enum_fits_type(self) -> ToolParameter:
        if self.enum is not None:
            if self.type != "string":
                raise ValueError(f"enum lists string values, so the type must be 'string', not {self.type!r}")
            if len(set(self.enum)) != len(self.enum):
                raise ValueError("enum lists a value more than once")
        return self


class ToolManifest(_Strict):
    """A custom tool's manifest (`tools/NAME.toml` in an extension layer)."""

    name: Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
    description: Annotated[str, StringConstraints(min_length=1, max_length=MAX_DESCRIPTION_CHARS)]
    command: list[CommandItem] = Field(min_length=1, max_length=MAX_COMMAND_ITEMS)
    timeout_secs: int = Field(DEFAULT_TIMEOUT_SECS, ge=1, le=MAX_TIMEOUT_SECS)
    sandbox: bool = False
    parameters: dict[ParameterName, ToolParameter] = Field(default_factory=dict, max_length=MAX_PARAMETERS)

    @field_validator("description")
    @classmethod
    def _description_has_text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the description is blank; say what the tool does")
        return value

    @field_validator("command")
    @classmethod
    def _no_nul(cls, value: list[str]) -> list[str]:
        if any("\x00" in item for item in value):
            raise ValueError("an item contains a NUL character")
        return value


def _field_of(loc: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in loc) or "manifest"


def _shown(field: str, limit: int = 80) -> str:
    """A field's name for a reason: quoted (control characters escaped), and short enough that
    the reason after it is seen."""
    return repr(field if len(field) <= limit else field[:limit] + "…")


def parse_manifest(data: bytes, *, source: str) -> ToolManifest:
    """The manifest in `data` (the bytes of the file at `source`), or a ManifestError."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"the manifest is {len(data)} bytes, over the {MAX_MANIFEST_BYTES}-byte limit", source=source)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"the manifest is not UTF-8 text (invalid byte at offset {exc.start})", source=source) from None
    try:
        document = tomlfile.loads(text)
    except tomli.TOMLDecodeError as exc:
        raise ManifestError(f"the manifest is not valid TOML: {exc}", source=source) from None
    try:
        return ToolManifest.model_validate(document)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        loc = first["loc"]
        message = first["msg"].removeprefix("Value error, ")
        if loc and loc[-1] == "[key]":
            loc = loc[:-1]
            message = "a parameter name starts with a letter or '_' and has at most 64 letters, digits, '_' or '-'"
        elif first["type"] == "extra_forbidden":
            message = "unknown key (a typo?)"
        where = _field_of(loc)
        more = len(exc.errors()) - 1
        extra = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        raise ManifestError(f"field {_shown(where)}: {message}{extra}", source=source, field=where) from None


def check_name(manifest: ToolManifest, builtin: Collection[str], *, source: str = "") -> None:
    """Refuse a custom tool whose name is a built-in tool's: one of `tools.names.RESERVED` (on in
    this session or not), or another tool the session has (`builtin`)."""
    from ..tools.names import reserved_reason

    why = reserved_reason(manifest.name)
    if why is None and manifest.name in builtin:
        why = f"{manifest.name!r} is the name of a built-in tool of this session, which a custom tool cannot take"
    if why is not None:
        raise ManifestError(f"field 'name': {why}; choose another name", source=source, field="name")


def parameters_schema(manifest: ToolManifest) -> dict[str, Any]:
    """The JSON Schema (Draft 2020-12) of the tool's input object: only the declared fields."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, parameter in manifest.parameters.items():
        prop: dict[str, Any] = {"type": parameter.type}
        if parameter.description:
            prop["description"] = parameter.description
        if parameter.enum is not None:
            prop["enum"] = list(parameter.enum)
        properties[name] = prop
        if parameter.required:
            required.append(name)
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


# --- where the program is -------------------------------------------------------------------------

ProgramKind = Literal["relative", "absolute", "search"]


@dataclass(frozen=True)
class ProgramRef:
    """Where a manifest's program is.

    - `relative`: `command[0]` contains a `/` and is not absolute (`./count.sh`, `bin/tool`,
      `../common/tool`): it starts at the manifest directory. A bare name (`count.sh`) is also
      `relative` when a file of that name is in the manifest directory: the manifest directory
      is looked in first.
    - `absolute`: `command[0]` is an absolute path.
    - `search`: a bare name with no such file beside the manifest: it is looked up on PATH (only
      its absolute entries) when the tool runs; `path` is where it was found when resolved (None
      when it was not found then).

    `workdir` is the directory the program runs in: the program's parent directory, and for a
    `search` program (whose parent would be a system directory such as /usr/bin) the manifest
    directory, where a relative program would have started, so that fixed arguments such as
    `["python3", "tool.py"]` name files beside the manifest.
    """

    spelled: str
    kind: ProgramKind
    path: Path | None
    manifest_dir: Path
    workdir: Path


def _search(name: str, search_path: str) -> Path | None:
    for directory in search_path.split(os.pathsep):
        if not os.path.isabs(directory):
            continue  # a relative PATH entry would name a different directory in every workdir
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def resolve_program(manifest: ToolManifest, manifest_dir: Path, *, search_path: str | None = None) -> ProgramRef:
    """Where `manifest`'s program is (see ProgramRef). `manifest_dir` should be absolute;
    `search_path` is the PATH of a `search` lookup (default: Osprey's own)."""
    manifest_dir = Path(os.path.abspath(manifest_dir))
    spelled = manifest.command[0]
    if os.path.isabs(spelled):
        path = Path(os.path.normpath(spelled))
        return ProgramRef(spelled, "absolute", path, manifest_dir, path.parent)
    if "/" in spelled or os.path.isfile(manifest_dir / spelled):
        path = Path(os.path.normpath(manifest_dir / spelled))
        return ProgramRef(spelled, "relative", path, manifest_dir, path.parent)
    found = _search(spelled, os.environ.get("PATH", os.defpath) if search_path is None else search_path)
    return ProgramRef(spelled, "search", found, manifest_dir, manifest_dir)


def _inside(path: str, directory: Path | str) -> bool:
    base = os.path.realpath(directory)
    return path == base or path.startswith(base.rstrip(os.sep) + os.sep)


# --- where the workspace is -----------------------------------------------------------------------

PROJECT_DIR_VARIABLE = "OSPREY_PROJECT_DIR"
CWD_VARIABLE = "OSPREY_CWD"


def tool_paths(cwd: str, roots: Sequence[str], *, in_lane: bool) -> dict[str, str]:
    """`OSPREY_PROJECT_DIR` and `OSPREY_CWD` for a call of a session working in `cwd`.

    On the host they are the workspace root (as hooks get it: the nearest directory at or above
    `cwd` holding `.git`, else `cwd`) and `cwd`. A lane sees only its roots (the directory the
    session started in, at the same path, links resolved): the variables are real paths there,
    and a workspace root above what the lane sees is given as the lane's root that holds `cwd`."""
    from ..config import workspace_root

    project = str(workspace_root(Path(cwd)))
    if not in_lane:
        return {PROJECT_DIR_VARIABLE: project, CWD_VARIABLE: cwd}
    real_cwd, real_project = os.path.realpath(cwd), os.path.realpath(project)
    if not _inside_any(real_project, roots):
        real_project = next((os.path.realpath(root) for root in roots if _inside(real_cwd, root)), real_cwd)
    return {PROJECT_DIR_VARIABLE: real_project, CWD_VARIABLE: real_cwd}


# --- output ---------------------------------------------------------------------------------------


def _text(output: Output) -> str:
    """A stream as text (invalid UTF-8 replaced), with the ToolService's marker where bytes were dropped."""
    if not output.dropped:
        return (output.head + output.tail).decode("utf-8", "replace")
    from ..toolservice.wire import dropped_marker

    return (output.head + dropped_marker(output.dropped).encode() + output.tail).decode("utf-8", "replace")


@dataclass
class _Finished:
    stdout: str
    stderr: str
    exit_code: int
    signal: int
    timed_out: bool
    killed_background: bool


def _then(text: str, more: str) -> str:
    """`more` on a line after `text` (which is left as it is)."""
    if not text:
        return more
    return f"{text}{more}" if text.endswith("\n") else f"{text}\n{more}"


def _outcome(name: str, run: _Finished, timeout_secs: int) -> ToolOutcome:
    """stdout as it is, then stderr under a label when there is any, then how a failure ended."""
    text = run.stdout
    if run.stderr:
        text = _then(text, f"[stderr]\n{run.stderr}")
    if run.timed_out:
        return ToolOutcome(_then(text, f"[{name} timed out after {timeout_secs} s; its process group was terminated]"), True, "timeout")
    if run.signal:
        return ToolOutcome(_then(text, f"[{name} was killed by signal {run.signal}]"), True, "exit_status")
    if run.exit_code != 0:
        return ToolOutcome(_then(text, f"[{name} exited with code {run.exit_code}]"), True, "exit_status")
    if run.killed_background:
        text = _then(text, f"[processes {name} left running were stopped]")
    return ToolOutcome(text or f"[{name} exited with code 0 and printed nothing]")


# --- running on the host --------------------------------------------------------------------------


async def _run_local(argv: list[str], executable: str, cwd: Path, env: Mapping[str, str], stdin: bytes, timeout_s: float) -> _Finished:
    """Run the program on the host in a process group of its own (`hostrun.run_program`). Raises
    StartFailed when it cannot be started, OSError when waiting for it fails; a cancel terminates
    the group and propagates."""
    run = await run_program(argv, executable=executable, cwd=cwd, env=env, stdin=stdin, timeout=timeout_s,
                            head=STREAM_HEAD_BYTES, tail=STREAM_TAIL_BYTES, linger=DRAIN_AFTER_EXIT_S, grace=KILL_GRACE_S)
    rc = run.returncode
    return _Finished(_text(run.stdout), _text(run.stderr), rc if rc >= 0 else -1, -rc if rc < 0 else 0, run.timed_out, run.left_running)


# --- the tool -------------------------------------------------------------------------------------


def _input_bytes(arguments: Mapping[str, Any]) -> bytes | ToolOutcome:
    try:
        data = json.dumps(dict(arguments), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError) as exc:
        return ToolOutcome(f"Error: the input cannot be sent as JSON: {exc}.", True, "invalid_arguments")
    if len(data) + 1 > MAX_INPUT_BYTES:
        return ToolOutcome(f"Error: the input is {len(data)} bytes as JSON, over the {MAX_INPUT_BYTES}-byte limit of a custom tool; "
                           "send less, or have the tool read a file instead.", True, "invalid_arguments")
    return data + b"\n"


def _host_executable(ref: ProgramRef, env: Mapping[str, str]) -> str | ToolOutcome:
    if ref.kind != "search":
        assert ref.path is not None
        return str(ref.path)
    found = _search(ref.spelled, env.get("PATH", os.defpath))
    if found is None:
        return ToolOutcome(f"Error: no program named {ref.spelled!r} beside the manifest ({ref.manifest_dir}) or on PATH; "
                           "fix the manifest's command.", True, "tool_failed")
    return str(found)


def _start_failure(ref: ProgramRef, exc: OSError) -> ToolOutcome:
    shown = ref.spelled
    if isinstance(exc, FileNotFoundError) and exc.filename == str(ref.workdir):
        what = f"its working directory {ref.workdir} is missing"
    elif isinstance(exc, FileNotFoundError):
        what = "there is no such program (a relative path starts at the manifest directory)"
    elif isinstance(exc, PermissionError):
        what = "it is not an executable file (check its mode and its #! line)"
    else:
        what = exc.strerror or str(exc)
    return ToolOutcome(f"Error: could not start {shown!r}: {what}.", True, "tool_failed")


def _inside_any(path: str, roots: Sequence[str]) -> bool:
    return any(_inside(path, root) for root in roots)


# The lane's Exec takes no environment: `env` sets the two variables, then runs the program.
LANE_ENV_PROGRAM = "/usr/bin/env"
_LANE_ENV_FAILURES = {127: "not_found", 126: "permission_denied"}  # env's exit when it cannot run the program


async def _run_in_lane(manifest: ToolManifest, ref: ProgramRef, stdin: bytes, ctx: ToolContext) -> ToolOutcome:
    workdir = os.path.realpath(ref.workdir)
    if ref.kind == "search":
        program = ref.spelled  # looked up on the lane's own PATH
        where = workdir
    else:
        assert ref.path is not None
        program = os.path.realpath(ref.path)
        where = program
    if not _inside_any(where, ctx.roots):
        return ToolOutcome(
            f"Error: {manifest.name} has sandbox = true, but {where} is outside the workspace the sandbox lane can see "
            f"({', '.join(ctx.roots)}). Move the tool into the project's .osprey/tools, or set sandbox = false to run it on the host.",
            True, "sandbox_unavailable")
    if "=" in program:
        return ToolOutcome(f"Error: could not run {manifest.name} in the sandbox lane: its program {program!r} has '=' in its name, "
                           "which cannot be started with the OSPREY_* variables set; rename it.", True, "tool_failed")
    variables = [f"{name}={value}" for name, value in tool_paths(ctx.cwd, ctx.roots, in_lane=True).items()]
    argv = [LANE_ENV_PROGRAM, "--", *variables, program, *manifest.command[1:]]
    try:
        r = await ctx.client.exec(argv, stdin=stdin, workdir=workdir, timeout_ms=manifest.timeout_secs * 1000,
                                  max_output_bytes=STREAM_HEAD_BYTES + STREAM_TAIL_BYTES)
    except ToolTimeout:
        raise  # the lane did not answer: the client has probed it, and the registry says so
    except ToolError as exc:
        return ToolOutcome(f"Error: could not run {manifest.name} in the sandbox lane ({exc.category}): {exc.message}", True, "tool_failed")
    stderr = r.stderr.text()
    if r.exit_code in _LANE_ENV_FAILURES and not r.signal and not r.stdout.text() and stderr.startswith(f"{LANE_ENV_PROGRAM}: "):
        reason = stderr.removeprefix(f"{LANE_ENV_PROGRAM}: ").strip()[:500]
        return ToolOutcome(f"Error: could not run {manifest.name} in the sandbox lane ({_LANE_ENV_FAILURES[r.exit_code]}): {reason}", True, "tool_failed")
    finished = _Finished(r.stdout.text(), stderr, r.exit_code, r.signal, r.timed_out, r.killed_background)
    return _outcome(manifest.name, finished, manifest.timeout_secs)


def custom_tool(manifest: ToolManifest, manifest_dir: Path, *, env: Mapping[str, str] | None = None, program: ProgramRef | None = None,
                pin: Pin | None = None) -> Tool:
    """The model tool of `manifest`, found in `manifest_dir`.

    `env` is the environment of a host run (the session's host tool environment; None: Osprey's
    own, without credentials, as `config.tool_environment()` gives it). `program` is the
    `resolve_program` result when the caller has one already (the one its trust pin covers).
    With `pin` (the tool is trusted through a trust pin), each host run first checks the files
    its command names against the pin and runs private copies of the bytes it checked
    (`pins.prepare_tool`); a mismatch refuses the call with the category `modified`."""
    ref = program if program is not None else resolve_program(manifest, manifest_dir, search_path=None if env is None else env.get("PATH", os.defpath))

    async def run(call: Invocation, ctx: ToolContext) -> ToolOutcome:
        stdin = _input_bytes(call.arguments)
        if isinstance(stdin, ToolOutcome):
            return stdin
        if manifest.sandbox:
            if ctx.tool_service != "lane":
                return ToolOutcome(
                    f"Error: {manifest.name} has sandbox = true and runs only inside a sandbox lane, but this session has none. "
                    "Run Osprey with --sandbox to use it.", True, "sandbox_unavailable")
            return await _run_in_lane(manifest, ref, stdin, ctx)
        if env is None:
            from ..config import tool_environment

            base: Mapping[str, str] = tool_environment()
        else:
            base = env
        # Set after the credential filter (which withholds every OSPREY_* name).
        run_env = {**base, **tool_paths(ctx.cwd, ctx.roots, in_lane=False)}
        prepared: Prepared | None = None
        if pin is not None:
            try:
                if ref.path is None:
                    raise PinMismatch(f"its program {ref.spelled!r} was not found when it was trusted")
                prepared = await asyncio.to_thread(prepare_tool, manifest.command, str(ref.path), pin.identities, workdir=str(ref.workdir), scope=pin.scope)
            except PinMismatch as exc:
                return ToolOutcome(f"Error: {manifest.name} was not run: {exc}. The person can review its manifest and what it runs, "
                                   f"then run `osprey extensions trust {manifest.name}`.", True, "modified")
        try:
            if prepared is not None:
                assert prepared.executable is not None
                executable: str | ToolOutcome = prepared.executable
                fixed = prepared.argv[1:]
            else:
                executable, fixed = _host_executable(ref, run_env), list(manifest.command[1:])
            if isinstance(executable, ToolOutcome):
                return executable
            # argv[0] is the program's absolute path (a script that finds files from its $0 finds
            # them from its own directory), or the name that was looked up on PATH.
            argv = [ref.spelled if ref.kind == "search" else executable, *fixed]
            try:
                finished = await _run_local(argv, executable, ref.workdir, run_env, stdin, float(manifest.timeout_secs))
            except StartFailed as exc:
                return _start_failure(ref, exc.error)
            except OSError as exc:
                return ToolOutcome(f"Error: waiting for {manifest.name} failed: {exc.strerror or exc}; its process group was stopped.", True, "tool_failed")
            return _outcome(manifest.name, finished, manifest.timeout_secs)
        finally:
            if prepared is not None:
                prepared.close()

    return Tool(manifest.name, manifest.description, parameters_schema(manifest), run, read_only=False, trusted=False, schema_checked=True)
