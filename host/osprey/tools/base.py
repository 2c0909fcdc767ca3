"""Tools are schema-first: a name, a description, a JSON Schema, a read-only flag and a run function
that receives its own call. Built-in tools keep a pydantic model that produces their schema;
schema-only tools (manifests, MCP servers, personas) are validated with jsonschema."""

from __future__ import annotations

import importlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import DispatcherError, OspreyError, ToolError, ToolTimeout
from ..messages import ImageBlock, ToolSpec
from ..toolservice.client import ToolClient

if TYPE_CHECKING:
    from ..events import TaskEnd


class ToolInput(BaseModel):
    """Base for tool inputs: unknown arguments are refused, so typos surface."""

    # Each tool's model is built at its first call (its JSON schema is stored, see `model_schema`).
    model_config = ConfigDict(extra="forbid", defer_build=True)


@dataclass
class ToolOutcome:
    text: str
    is_error: bool = False
    category: str | None = None
    truncated_chars: int = 0
    # Images the result carries (build them with `messages.image_or_note`); the call path keeps
    # at most `messages.MAX_IMAGES` and notes any it drops in the text.
    images: list[ImageBlock] = field(default_factory=list)


@dataclass(frozen=True)
class Invocation:
    """One call as its tool sees it: its own id, the arguments, and (for tools with an input model)
    the validated input."""

    id: str
    name: str
    arguments: Mapping[str, Any]
    input: Any = None
    # Live output of this call (bash streams its output here while it runs).
    on_output: Callable[[bytes], None] | None = None


class ChildRequest(BaseModel):
    """What a tool asks for when it starts a child session (a subagent, a workflow's agent)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built at first use: most sessions never make one

    task: str = Field(min_length=1, description="The child's first prompt.")
    name: str = Field("", max_length=80, description="How the child is labelled to the person (a persona's name).")
    persona: str | None = Field(None, max_length=80, description="The persona the child runs as.")
    model: str | None = Field(None, min_length=1, max_length=200, description="Another model of the same provider.")
    tools: list[str] | None = Field(None, description="The child's tools: a subset of the parent's (None: all of them).")
    own_home: bool | None = Field(None, description="A ToolService home (lane) of its own; None: as the session is configured.")


class ChildAgent(Protocol):
    """A running child session, as the tool that started it sees it."""

    agent_id: str
    parent_id: str
    name: str

    @property
    def running(self) -> bool: ...

    async def wait(self) -> TaskEnd: ...

    async def send(self, prompt: str) -> None: ...

    def cancel(self) -> bool: ...

    async def close(self) -> None: ...


Spawn = Callable[[ChildRequest], Awaitable[ChildAgent]]


@dataclass
class ToolContext:
    """What every call of a session shares: the ToolService client and where tools run."""

    client: ToolClient
    cwd: str
    roots: list[str]
    bash_max_output_bytes: int
    processes: Any = None  # ProcessManager in plain host runs; None in a lane
    tool_service: str = "local"  # where the client's calls run: "local" (the host) or "lane"
    # Starts a child session that borrows this session's parts (None where children cannot start).
    spawn: Spawn | None = None


RunFunction = Callable[[Invocation, ToolContext], Awaitable["str | ToolOutcome"]]


@dataclass
class Tool:
    """A tool the model can call."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema of the arguments object
    run: RunFunction
    read_only: bool = False
    # One of the built-in read-only tools the approval policies trust by name.
    trusted: bool = False
    # It changes only Osprey's own state (memory under $OSPREY_HOME): the approval policies let it
    # run as they do a trusted read-only tool (hooks and rules still apply), but it is not
    # read-only, so its calls run one at a time, in the model's order.
    own_state: bool = False
    input_model: type[BaseModel] | None = None
    # A built-in tool's input model by its dotted name (`module.Class`), imported and built at the
    # tool's first call (`Tool.stored`); until then it is `input_model` None.
    input_model_name: str | None = None
    # The schema was made by Osprey itself (a custom tool's parameters), so it is not checked
    # again, and its validator (jsonschema, a slow import) is built at the first call.
    schema_checked: bool = False
    # Its arguments are checked against its schema before it runs. A tool whose schema comes from a
    # server that validates its own arguments (MCP) skips this: an untrusted schema's patterns and
    # references would run here, on the event loop. Its arguments must still be a JSON object.
    validate_arguments: bool = True
    _validator: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.input_model is None and self.input_model_name is None and not self.schema_checked:
            from jsonschema import Draft202012Validator
            from jsonschema.exceptions import SchemaError

            try:
                Draft202012Validator.check_schema(self.parameters)
            except SchemaError as exc:
                raise ValueError(f"the tool {self.name!r} has an invalid JSON Schema: {exc.message}") from None
            except Exception as exc:  # noqa: BLE001 - a schema too deep or odd to check is not a valid one
                raise ValueError(f"the tool {self.name!r} has a JSON Schema that cannot be checked: {type(exc).__name__}") from None
            if self.validate_arguments:
                self._validator = Draft202012Validator(self.parameters)

    @classmethod
    def from_model(cls, name: str, description: str, input_model: type[BaseModel], run: RunFunction, *, read_only: bool = False, trusted: bool = False,
                   own_state: bool = False) -> Tool:
        """A tool whose schema comes from a pydantic model; its run function gets the model in `call.input`."""
        return cls(name, description, model_schema(input_model), run, read_only=read_only, trusted=trusted,
                   own_state=own_state, input_model=input_model)

    @classmethod
    def stored(cls, name: str, description: str, input_model: str, run: RunFunction, *, read_only: bool = False, trusted: bool = False,
               own_state: bool = False) -> Tool:
        """`from_model` for a built-in tool whose input model (`module.Class`) has its schema stored
        (`schema_store.py`): the model's module is imported only when the tool is first called."""
        from .stored_schemas import SCHEMAS

        text = SCHEMAS.get(input_model)
        if text is None:  # not stored (yet): as `from_model`
            return cls.from_model(name, description, _model_named(input_model), run, read_only=read_only, trusted=trusted, own_state=own_state)
        return cls(name, description, json.loads(text), run, read_only=read_only, trusted=trusted, own_state=own_state,
                   input_model_name=input_model)

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def validate(self, arguments: Mapping[str, Any]) -> tuple[Any, str | None]:
        """The validated input (a model instance, or the arguments themselves), or a problem."""
        if self.input_model is None and self.input_model_name is not None:
            self.input_model = _model_named(self.input_model_name)
        if self.input_model is not None:
            try:
                return self.input_model.model_validate(dict(arguments)), None
            except ValidationError as exc:
                return None, "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors())
        if not isinstance(arguments, Mapping):
            return None, "arguments: must be a JSON object"
        if not self.validate_arguments:
            return arguments, None
        problems = []
        try:
            if self._validator is None:
                from jsonschema import Draft202012Validator

                self._validator = Draft202012Validator(self.parameters)
            for error in self._validator.iter_errors(dict(arguments)):
                where = ".".join(str(p) for p in error.absolute_path) or "arguments"
                problems.append(f"{where}: {error.message[:300]}")
                if len(problems) >= 10:
                    break
        except Exception as exc:  # noqa: BLE001 - an unresolvable or endless $ref of the schema (RecursionError included)
            problems.append(f"the tool's schema cannot check them ({type(exc).__name__}: {str(exc)[:200]})")
        return (arguments, None) if not problems else (None, "; ".join(problems))


def _model_named(name: str) -> type[BaseModel]:
    module, _, attribute = name.rpartition(".")
    model: type[BaseModel] = getattr(importlib.import_module(module), attribute)
    return model


# The cleaned JSON schema of each input model, as JSON text: taken from the stored schemas of the
# built-in tools (`schema_store.py`) or generated, once per process (a child session makes its
# tools again), each tool getting a copy of its own.
_MODEL_SCHEMAS: dict[type[BaseModel], str] = {}


def model_schema(input_model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of a tool's input model, cleaned (see `clean_schema`); a new dict each time."""
    text = _MODEL_SCHEMAS.get(input_model)
    if text is None:
        from .stored_schemas import SCHEMAS

        stored = SCHEMAS.get(f"{input_model.__module__}.{input_model.__qualname__}")
        text = _MODEL_SCHEMAS[input_model] = stored if stored is not None else generate_schema(input_model)
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def generate_schema(input_model: type[BaseModel]) -> str:
    """The cleaned JSON schema of `input_model` as JSON text, generated from the model (which
    builds it)."""
    return json.dumps(clean_schema(input_model.model_json_schema()))


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema without pydantic's titles, which only cost tokens."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if isinstance(value, dict):
            # `properties` and `$defs` map names to schemas: each is cleaned, the map itself is not a schema.
            value = {k: clean_schema(v) if isinstance(v, dict) else v for k, v in value.items()} if key in ("properties", "$defs") else clean_schema(value)
        out[key] = value
    out.setdefault("type", "object")
    if out.get("type") == "object":
        out.setdefault("properties", {})
    return out


def limit_text(text: str, max_chars: int) -> tuple[str, int]:
    """Keep the head and tail of `text` within `max_chars`; say how much was dropped."""
    if len(text) <= max_chars:
        return text, 0
    dropped = len(text) - max_chars
    head = max_chars * 2 // 3
    tail = max_chars - head
    marker = f"\n[... {dropped} characters dropped from this result; narrow the request to see them ...]\n"
    return text[:head] + marker + text[len(text) - tail :], dropped


def _with_recovery(text: str, exc: Exception) -> str:
    note = getattr(exc, "recovery", "")
    return f"{text}\n{note}" if note else text


@dataclass
class ToolRegistry:
    """The tool catalogue of one session, by name; validates, runs, and limits results."""

    tools: dict[str, Tool] = field(default_factory=dict)
    max_result_chars: int = 50_000
    # Keeps the whole text of a result that is cut (the tool's name, the text) and returns the
    # handle the model retrieves it by (`osprey.retrieve`); None: cut results are not kept.
    keep: Callable[[str, str], Awaitable[str | None]] | None = None

    def add(self, tool: Tool) -> None:
        self.tools[tool.name] = tool

    def remove(self, name: str) -> None:
        self.tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def specs(self) -> list[ToolSpec]:
        return [t.spec() for t in self.tools.values()]

    def names(self) -> list[str]:
        return list(self.tools)

    async def call(self, name: str, arguments: Mapping[str, Any], ctx: ToolContext, *, call_id: str = "", on_output: Callable[[bytes], None] | None = None) -> ToolOutcome:
        tool = self.tools.get(name)
        if tool is None:
            return ToolOutcome(f"Error: there is no tool named {name!r}. Available tools: {', '.join(self.tools)}.", True, "unknown_tool")
        value, problem = tool.validate(arguments)
        if problem is not None:
            return ToolOutcome(f"Error: invalid arguments for {name}: {problem}.", True, "invalid_arguments")
        call = Invocation(id=call_id, name=name, arguments=arguments, input=value, on_output=on_output)
        try:
            result = await tool.run(call, ctx)
        except ToolTimeout as exc:
            # The home has been probed (and replaced when it no longer answered): say what happened.
            return ToolOutcome(_with_recovery(f"Error (timeout): {exc.message}", exc), True, "timeout")
        except ToolError as exc:
            return ToolOutcome(_with_recovery(f"Error ({exc.category}): {exc.message}", exc), True, exc.category)
        except DispatcherError as exc:
            return ToolOutcome(_with_recovery(f"Error (tool_service_unavailable): {exc}", exc), True, "tool_service_unavailable")
        except OspreyError as exc:
            return ToolOutcome(f"Error: {exc}", True, "tool_error")
        except Exception as exc:  # noqa: BLE001 - a tool's bug fails its call, not the session
            return ToolOutcome(f"Error (internal): {name} failed: {type(exc).__name__}: {exc}", True, "internal")
        outcome = result if isinstance(result, ToolOutcome) else ToolOutcome(result)
        whole = outcome.text
        outcome.text, outcome.truncated_chars = limit_text(whole, self.max_result_chars)
        if outcome.truncated_chars and self.keep is not None:
            handle = await self.keep(name, whole)
            if handle is not None:
                outcome.text += f"\nretrieve handle: {handle}"
        return outcome


class ToolSource:
    """A part of a session that contributes tools (built-in, web, control, extensions, and MCP
    servers): started when the session starts, asked for its tools when the catalogue is made, and
    closed when the session closes, if the session made it. A source passed in to a session is
    borrowed: its owner starts it before and closes it after; the session only asks for its tools."""

    name = "tools"

    async def start(self) -> None:
        return None

    def tools(self) -> Sequence[Tool]:
        return ()

    async def close(self) -> None:
        return None


class StaticTools(ToolSource):
    """A fixed list of tools: nothing to start or close."""

    def __init__(self, name: str, tools: Sequence[Tool]) -> None:
        self.name = name
        self._tools = list(tools)

    def tools(self) -> Sequence[Tool]:
        return list(self._tools)
