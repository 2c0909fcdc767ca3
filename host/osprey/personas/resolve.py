"""Finding a persona by name and checking its file.

A name resolves from the first layer that has `NAME.md`: the project's `.osprey/personas/`, then
`$OSPREY_HOME/personas/`, then the personas bundled with Osprey. The nearest file wins even when it
is broken: resolution then fails rather than falling through to a farther persona of that name.

Rules beyond the field table of the documentation:
- a persona name is 1 to 64 lowercase letters, digits, hyphens and underscores, starting with a
  letter or digit (so never a path);
- unknown frontmatter fields are ignored, so a file written for a later version still loads;
- a project persona's file and schema must lie inside the workspace (a symbolic link out of it is
  refused), since the workspace is untrusted;
- an output schema is checked as JSON Schema Draft 2020-12 (as tool arguments are validated) and
  its top level must be `"type": "object"`: it describes the arguments of the terminal tool.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

from ..files import FileRefused, read_file
from . import frontmatter
from .model import Persona, PersonaError, Source

BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"
BUNDLED_NAMES = ("default", "coding", "architect", "verifier")
# The bundled personas the TUI picker lists: the others have an output contract, chosen at launch.
PICKER_BUNDLED = ("default", "coding")
# Schema files a persona may name without having a copy: the bundled file of that name is used.
BUNDLED_SCHEMAS = ("plan.schema.json", "verification.schema.json")

NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
NAME_RULE = "1 to 64 lowercase letters, digits, hyphens and underscores, starting with a letter or digit"
TOOL_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what model providers accept as a tool name

MAX_PERSONA_BYTES = 64 * 1024
MAX_SCHEMA_BYTES = 256 * 1024
MAX_LISTED_FILES = 256  # directory entries looked at per folder when listing or naming personas
MAX_NAMES_SHOWN = 40


def valid_name(name: str) -> bool:
    """Whether `name` is a persona name (never a path)."""
    return NAME_RE.fullmatch(name) is not None


def _layers(workspace_root: Path, home: Path) -> list[tuple[Source, Path]]:
    return [("project", workspace_root / ".osprey" / "personas"), ("user", home / "personas"), ("bundled", BUNDLED_DIR)]


def _inside(path: Path, root: Path) -> bool:
    try:
        return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))
    except (OSError, ValueError):
        return False


def _read(path: Path, limit: int, what: str, *, within: Path | None) -> bytes | None:
    """The bytes of `path` (symbolic links followed, but not out of `within` when given), None when
    nothing or a directory is there; PersonaError when it cannot be used."""
    try:
        data = read_file(path, limit, follow_symlinks=True)
    except FileRefused as exc:
        if exc.reason == "too_large":
            raise PersonaError(f"{path}: larger than {limit // 1024} KiB, the most Osprey reads as {what}; shorten it") from None
        if exc.reason == "not_regular":
            raise PersonaError(f"{path}: not a regular file, so it is not read as {what}; replace it with a regular file") from None
        raise PersonaError(f"{path}: cannot be read as {what}: {exc.strerror}; check its permissions") from None
    if data is not None and within is not None and not _inside(path, within):
        raise PersonaError(f"{path}: leads outside the workspace {within}; a project persona's files must be inside the workspace")
    return data


def _text(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PersonaError(f"{path}: not UTF-8 text; save it as UTF-8") from None


def _optional(fields: dict[str, Any], key: str, kind: type, what: str, where: Path) -> Any:
    value = fields.get(key)
    if value is None:
        return None
    if not isinstance(value, kind):
        raise PersonaError(f"{where}: '{key}' must be {what}, not {type(value).__name__} {value!r:.60}; fix it or remove the field")
    return value


def _tools(fields: dict[str, Any], where: Path) -> tuple[str, ...] | None:
    tools = fields.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise PersonaError(f"{where}: 'tools' must be a list of tool names, such as [read_file, grep]; fix it or remove the field")
    for i, entry in enumerate(tools):
        if not isinstance(entry, str):
            raise PersonaError(f"{where}: 'tools' entry {i + 1} is {type(entry).__name__} {entry!r:.60}, not a tool name; write the tool's exact name")
        if not entry.strip():
            raise PersonaError(f"{where}: 'tools' entry {i + 1} is empty; remove it or write the tool's exact name")
    return tuple(dict.fromkeys(tools))


def _schema(raw: str, persona_dir: Path, where: Path, *, within: Path | None) -> tuple[dict[str, Any], str]:
    """The JSON Schema that `schema_path` names (relative to the persona's folder) and the file it
    was read from; a missing file named like a bundled schema falls back to the bundled copy."""
    target = Path(raw)
    if not target.is_absolute():
        target = persona_dir / target
    data = _read(target, MAX_SCHEMA_BYTES, "a JSON Schema", within=within)
    if data is None and target.name in BUNDLED_SCHEMAS:
        target = BUNDLED_DIR / target.name
        data = _read(target, MAX_SCHEMA_BYTES, "a JSON Schema", within=None)
    if data is None:
        raise PersonaError(f"{where}: its schema_path {raw!r} names {target}, which does not exist; create that file or fix schema_path "
                           f"(relative paths start at {persona_dir})")
    try:
        schema = json.loads(data)
    except json.JSONDecodeError as exc:
        raise PersonaError(f"{target}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}; fix the schema") from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise PersonaError(f"{target}: not valid JSON ({type(exc).__name__}); fix the schema") from None
    if not isinstance(schema, dict):
        raise PersonaError(f"{target}: a JSON Schema must be a JSON object; fix the schema")
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        at = "/".join(str(p) for p in exc.absolute_path) or "the top level"
        raise PersonaError(f"{target}: not a valid JSON Schema (Draft 2020-12) at {at}: {exc.message:.300}; fix the schema") from None
    except RecursionError:
        raise PersonaError(f"{target}: nested too deeply to check as a JSON Schema; simplify it") from None
    if schema.get("type") != "object":
        raise PersonaError(f"{target}: the schema describes a terminal tool's arguments, so its top level needs \"type\": \"object\"; fix the schema")
    return schema, str(target)


def parse_persona(path: Path, source: Source, *, workspace_root: Path | None = None) -> Persona:
    """The persona in the file at `path` from layer `source`. Raises PersonaError for a missing,
    unreadable or invalid file. `workspace_root` confines a project persona's files."""
    persona = _load(path, source, workspace_root)
    if persona is None:
        raise PersonaError(f"{path}: no such persona file")
    return persona


def _load(path: Path, source: Source, workspace_root: Path | None) -> Persona | None:
    """The persona at `path`, or None when no file is there."""
    within = workspace_root if source == "project" else None
    data = _read(path, MAX_PERSONA_BYTES, "a persona", within=within)
    if data is None:
        return None
    block, body = frontmatter.split(_text(data, path), str(path))
    fields = frontmatter.parse(block, str(path))

    name = fields.get("name")
    if name is None or name == "":
        raise PersonaError(f"{path}: the frontmatter has no name; add 'name: {path.stem}'")
    if not isinstance(name, str):
        raise PersonaError(f"{path}: 'name' must be text, not {type(name).__name__}; write 'name: {path.stem}'")
    if name != path.stem:
        raise PersonaError(f"{path}: the name {name!r:.80} differs from the file name; rename the file to {name}.md or write 'name: {path.stem}'")
    if not valid_name(name):
        raise PersonaError(f"{path}: {name!r:.80} is not a persona name ({NAME_RULE}); rename the persona and its file")

    description = (_optional(fields, "description", str, "text", path) or "").strip()
    terminal_tool = _optional(fields, "terminal_tool", str, "a tool name", path)
    if terminal_tool is not None and TOOL_NAME_RE.fullmatch(terminal_tool) is None:
        raise PersonaError(f"{path}: terminal_tool {terminal_tool!r:.80} is not a tool name (1 to 64 letters, digits, hyphens and underscores); fix it")
    spawnable = _optional(fields, "spawnable", bool, "true or false", path) or False
    dev_tooling = _optional(fields, "dev_tooling", bool, "true or false", path) or False
    toolset = _optional(fields, "toolset", str, "the name of a toolset from toolsets.toml", path)
    if toolset is not None and not toolset.strip():
        raise PersonaError(f"{path}: 'toolset' is empty; name a toolset from toolsets.toml or remove the field")
    tools = _tools(fields, path)
    if spawnable and tools is None:
        raise PersonaError(f"{path}: a spawnable persona must declare a tools list; add 'tools: [...]' or set 'spawnable: false'")

    schema: dict[str, Any] | None = None
    schema_path: str | None = None
    raw_schema = _optional(fields, "schema_path", str, "a path to a JSON Schema file", path)
    if raw_schema is not None:
        if not raw_schema.strip():
            raise PersonaError(f"{path}: 'schema_path' is empty; name a JSON Schema file or remove the field")
        if "\x00" in raw_schema:
            raise PersonaError(f"{path}: 'schema_path' holds a NUL character, which no path can; fix it")
        schema, schema_path = _schema(raw_schema, path.parent, path, within=within)

    return Persona(name=name, description=description, prompt=body.strip("\n").rstrip(), source=source, path=str(path),
                   terminal_tool=terminal_tool, schema=schema, schema_path=schema_path, spawnable=spawnable, tools=tools,
                   toolset=toolset, dev_tooling=dev_tooling)


def _names_in(folder: Path) -> Iterator[str]:
    """Up to MAX_LISTED_FILES persona names from the `.md` files of `folder`, in directory order
    (nothing when it cannot be listed)."""
    try:
        with os.scandir(folder) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_LISTED_FILES:
                    return
                if entry.name.endswith(".md") and not entry.name.startswith("."):
                    yield entry.name[:-3]
    except OSError:
        return


def available_names(*, workspace_root: Path, home: Path) -> list[str]:
    """Every name a persona file suggests in the three layers (files are not parsed), sorted."""
    names = set(BUNDLED_NAMES)
    for _source, folder in _layers(workspace_root, home)[:2]:
        names.update(n for n in _names_in(folder) if valid_name(n))
    return sorted(names)


def resolve_persona(name: str, *, workspace_root: Path, home: Path) -> Persona:
    """The persona called `name`: the project's `.osprey/personas/NAME.md`, else
    `<home>/personas/NAME.md`, else the bundled one. Raises PersonaError for a name that is not a
    persona name, an unknown name (listing the available ones) or an invalid nearest file."""
    if not valid_name(name):
        raise PersonaError(f"{name!r:.80} is not a persona name ({NAME_RULE}); name a persona, not a path")
    for source, folder in _layers(workspace_root, home):
        persona = _load(folder / f"{name}.md", source, workspace_root)
        if persona is not None:
            return persona
    names = available_names(workspace_root=workspace_root, home=home)
    shown = ", ".join(names[:MAX_NAMES_SHOWN]) + (f" and {len(names) - MAX_NAMES_SHOWN} more" if len(names) > MAX_NAMES_SHOWN else "")
    raise PersonaError(f"unknown persona {name!r}; available: {shown} (a persona is a NAME.md file in "
                       f"{workspace_root / '.osprey' / 'personas'} or {home / 'personas'})")


def list_personas(*, workspace_root: Path, home: Path, warn: Callable[[str], None]) -> list[Persona]:
    """The personas the TUI picker offers: the project's, then the user's (each sorted by name),
    then the bundled default and coding. A name appears once, from its nearest layer; a broken file
    is reported through `warn` and left out, and still hides farther personas of its name (choosing
    that name would resolve to the broken file)."""
    found: list[Persona] = []
    seen: set[str] = set()
    for source, folder in _layers(workspace_root, home):
        if source == "bundled":
            candidates = list(PICKER_BUNDLED)
        else:
            candidates = sorted(set(_names_in(folder)))
        for stem in candidates:
            path = folder / f"{stem}.md"
            if not valid_name(stem):
                warn(f"{path}: left out of the personas: {stem!r:.80} is not a persona name ({NAME_RULE}); rename the file")
                continue
            if stem in seen:
                continue
            try:
                persona = _load(path, source, workspace_root)
            except PersonaError as exc:
                seen.add(stem)
                warn(f"persona {stem!r} left out: {exc}")
                continue
            if persona is not None:  # None: a folder named like a persona file, or a file just removed
                seen.add(stem)
                found.append(persona)
    return found


def check_tools(persona: Persona, inventory: Collection[str]) -> list[str]:
    """The names in the persona's tools list that `inventory` does not have, in the list's order."""
    return [t for t in persona.tools or () if t not in inventory]
