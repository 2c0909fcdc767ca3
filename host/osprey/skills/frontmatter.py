"""A SKILL.md's frontmatter: the YAML block between its first line `---` and the next line `---`.

Discovery reads only that block (`read_head` stops at its closing line, and never goes past
`MAX_FRONTMATTER_BYTES`); the body is read when the skill is loaded. The YAML is parsed by
PyYAML (its libyaml parser when it has one), so folded and literal descriptions, lists and nested
maps parse as they do for other agents: `skill_yaml` parses the whole block and types only `name`
and `description` as the safe loader would (the other fields are ignored, and turning them into
values would be most of the time a safe load takes); `load_yaml` is the full safe load.
`skill_fields` applies the rules every skill must meet.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..files import FileRefused, open_regular

MAX_FRONTMATTER_BYTES = 16 * 1024  # from the opening `---` line to the closing one
HEAD_CHUNK_BYTES = 1024  # one read at discovery: most frontmatter fits in it, and little of the body is read with it
MAX_DESCRIPTION_CHARS = 1024
MAX_NAME_CHARS = 64
_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_BOM = b"\xef\xbb\xbf"
_DELIMITER = b"---"
_BLANK = b" \t\r"


class FrontmatterError(Exception):
    """A SKILL.md that is not a valid skill; the message says why, in a few words."""


_NO_FRONTMATTER = "no frontmatter: a SKILL.md starts with a line `---`, then `name:` and `description:`, then a line `---`"


def _first_line_end(data: bytes) -> int | None:
    """The offset just past the opening `---` line, or None while that line is not complete;
    raises FrontmatterError when the text does not start with one."""
    eol = data.find(b"\n")
    line = data if eol < 0 else data[:eol]
    if eol < 0 and len(line) < len(_DELIMITER) and _DELIMITER.startswith(line):
        return None
    if line[:3] != _DELIMITER or line[3:].strip(_BLANK):
        raise FrontmatterError(_NO_FRONTMATTER)
    return None if eol < 0 else eol + 1


def _closing(data: bytes, start: int, eof: bool) -> tuple[int, int] | None:
    """(where the YAML ends, where the body starts) once the closing `---` line is in `data`."""
    pos = start
    while True:
        at = data.find(_DELIMITER, pos)
        if at < 0:
            return None
        if at == start or data[at - 1] == 0x0A:  # at the start of a line
            eol = data.find(b"\n", at)
            if eol < 0:
                if eof and not data[at + 3:].strip(_BLANK):
                    return at, len(data)  # the closing line ends the file
            elif not data[at + 3:eol].strip(_BLANK):
                return at, eol + 1
        pos = at + 3


@dataclass(frozen=True)
class Head:
    """The first bytes of a SKILL.md, and whether they are the whole file."""

    data: bytes
    eof: bool


def split(data: bytes, *, eof: bool = True) -> tuple[str, int]:
    """The frontmatter's YAML text, and the offset of the body in `data` (the whole file, or with
    `eof` False only its head). Raises FrontmatterError when `data` does not start with a
    frontmatter block closed within MAX_FRONTMATTER_BYTES."""
    offset = len(_BOM) if data.startswith(_BOM) else 0
    head = data[offset:]
    start = _first_line_end(head)
    if start is None:
        if eof or len(head) > MAX_FRONTMATTER_BYTES:
            raise FrontmatterError(_NO_FRONTMATTER)
        raise FrontmatterError("the frontmatter was not read whole")  # read_head reads on until it is
    found = _closing(head, start, eof)
    if found is None or found[0] > MAX_FRONTMATTER_BYTES:
        raise FrontmatterError(f"the frontmatter has no closing `---` line within its first {MAX_FRONTMATTER_BYTES // 1024} KiB")
    try:
        text = head[start:found[0]].decode("utf-8")
    except UnicodeDecodeError:
        raise FrontmatterError("the frontmatter is not UTF-8 text") from None
    return text, offset + found[1]


def read_head(path: Path | str, *, follow_symlinks: bool = True) -> Head | None:
    """The start of the file at `path`, read in chunks of HEAD_CHUNK_BYTES until its frontmatter is
    whole (or is known to be missing, or longer than MAX_FRONTMATTER_BYTES): the body is not read.
    None when nothing (or a directory) is there. As `osprey.files.read_file` does, raises
    FileRefused for a FIFO, device or socket (never opened), a symbolic link when not following
    them, and an OS error."""
    fd = open_regular(path, follow_symlinks=follow_symlinks)
    if fd is None:
        return None
    data = b""
    eof = False
    try:
        while len(data) <= MAX_FRONTMATTER_BYTES + len(_BOM) + 8:
            chunk = os.read(fd, HEAD_CHUNK_BYTES)
            if not chunk:
                eof = True
                break
            data += chunk
            if _settled(data):
                break
    except OSError as exc:
        raise FileRefused("unreadable", error=exc) from None
    finally:
        os.close(fd)
    return Head(data, eof)


def _settled(data: bytes) -> bool:
    """Whether the bytes read so far settle the frontmatter: its closing line is among them, or
    the file does not start with an opening one."""
    head = data[len(_BOM):] if data.startswith(_BOM) else data
    try:
        start = _first_line_end(head)
    except FrontmatterError:
        return True
    return start is not None and _closing(head, start, False) is not None


def parse(head: Head) -> tuple[dict[str, Any], int]:
    """The name and description fields of the frontmatter at the start of `head` (those present),
    and where the body starts."""
    text, body = split(head.data, eof=head.eof)
    return skill_yaml(text), body


_PLAIN = "tag:osprey.invalid,2025:plain"  # a plain scalar whose type is worked out only if it is read
_SKILL_KEYS = ("name", "description")


def _yaml() -> Any:
    """PyYAML, imported when the first frontmatter is parsed (it is not needed before)."""
    from ..lazy import imported

    return imported("yaml")


@functools.cache
def _composer() -> Any:
    """A YAML loader class that only composes (libyaml's parser when PyYAML has it), tagging plain
    scalars `_PLAIN` instead of resolving each to a type: most of a safe load's time goes to
    resolving and constructing fields a skill does not use."""
    yaml = _yaml()
    base_resolver = yaml.resolver.BaseResolver

    def resolve(self: Any, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:
            return _PLAIN
        return base_resolver.resolve(self, kind, value, implicit)

    if getattr(yaml, "__with_libyaml__", False):
        parts: tuple[Any, ...] = (yaml.cyaml.CParser,)
    else:
        parts = (yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, yaml.composer.Composer)

    def init(self: Any, stream: str) -> None:
        parts[0].__init__(self, stream)
        for part in parts[1:]:
            part.__init__(self)
        base_resolver.__init__(self)

    return type("SkillComposer", (*parts, base_resolver), {"__init__": init, "resolve": resolve})


def skill_yaml(text: str) -> dict[str, Any]:
    """The `name` and `description` fields of a frontmatter's YAML (those present), typed as a
    safe load types them. The whole text is parsed, so YAML that is not valid anywhere in it is
    refused; the other fields are not turned into values (they are ignored)."""
    yaml = _yaml()
    loader = _composer()(text)
    try:
        node = loader.get_single_node()
    except yaml.YAMLError as exc:
        raise _yaml_error(exc) from None
    except RecursionError:
        raise FrontmatterError("the frontmatter is not valid YAML: it is nested too deeply") from None
    finally:
        loader.dispose()
    if node is None:
        return {}
    if not isinstance(node, yaml.MappingNode):
        return load_yaml(text)  # says what it is instead of a mapping
    fields: dict[str, Any] = {}
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag not in (_PLAIN, "tag:yaml.org,2002:str"):
            continue
        if key.value == "<<" and key.tag == _PLAIN:
            return load_yaml(text)  # a merge key may bring fields in: the full safe load applies it
        if key.value not in _SKILL_KEYS:
            continue
        if isinstance(value, yaml.SequenceNode) and value.tag == "tag:yaml.org,2002:seq":
            fields[key.value] = []
        elif isinstance(value, yaml.MappingNode) and value.tag == "tag:yaml.org,2002:map":
            fields[key.value] = {}
        elif isinstance(value, yaml.ScalarNode):
            fields[key.value] = _scalar(value)
        else:
            raise FrontmatterError(f"the frontmatter is not valid YAML: its {key.value} has the tag {value.tag[:80]!r}, which is not read")
    return fields


def _scalar(node: Any) -> Any:
    """A scalar node's value, typed as the safe loader types it."""
    yaml = _yaml()
    if node.tag == _PLAIN:
        node.tag = yaml.resolver.Resolver().resolve(yaml.ScalarNode, node.value, (True, False))
    try:
        return yaml.constructor.SafeConstructor().construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        raise _yaml_error(exc) from None
    except (ValueError, TypeError, OverflowError) as exc:  # an impossible date
        raise FrontmatterError(f"the frontmatter is not valid YAML: {type(exc).__name__}: {str(exc)[:200]}") from None


def _yaml_error(exc: Any) -> FrontmatterError:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f" at line {mark.line + 2}" if mark is not None else ""  # +1: 0-based; +1: the opening `---`
    return FrontmatterError(f"the frontmatter is not valid YAML{where}: {problem}")


def load_yaml(text: str) -> dict[str, Any]:
    """All the fields of a frontmatter's YAML, by a safe load: the YAML must be a mapping (empty
    YAML has no fields)."""
    yaml = _yaml()
    loader = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    try:
        value = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise _yaml_error(exc) from None
    except (RecursionError, ValueError, TypeError, OverflowError) as exc:  # nesting too deep, an impossible date
        raise FrontmatterError(f"the frontmatter is not valid YAML: {type(exc).__name__}: {str(exc)[:200]}") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FrontmatterError(f"the frontmatter is a YAML {_kind(value)}, not a mapping of fields such as `name: ...`")
    return value


def _kind(value: object) -> str:
    kinds = {bool: "true/false value", int: "number", float: "number", str: "string", list: "list", dict: "mapping"}
    return kinds.get(type(value), type(value).__name__)


def name_problem(name: str, directory: str) -> str | None:
    """Why `name` is not a valid skill name in a directory named `directory`, or None.

    Plain: lowercase letters, digits and single hyphens, 1 to 64 characters, equal to the
    directory's name. Namespaced: exactly one colon between two such parts, the second equal to
    the directory's name."""
    parts = name.split(":")
    if len(parts) > 2:
        return f"the name {name[:80]!r} has more than one colon: a namespaced name is `namespace:name`"
    for part in parts:
        if not 1 <= len(part) <= MAX_NAME_CHARS or not _NAME.fullmatch(part):
            return (f"the name {name[:80]!r} is not valid: lowercase letters, digits and single hyphens, 1 to {MAX_NAME_CHARS} "
                    "characters (or `namespace:name`, each part so)")
    if parts[-1] != directory:
        return f"the name {name[:80]!r} does not match its directory {directory[:80]!r}: the name (after any `namespace:`) is the directory's name"
    return None


def skill_fields(fields: dict[str, Any], directory: str) -> tuple[str, str]:
    """The skill's name and description (stripped) from its frontmatter's fields, checked against
    the rules; raises FrontmatterError with the first rule broken."""
    name = fields.get("name")
    description = fields.get("description")
    if name is None or name == "":
        raise FrontmatterError("the frontmatter has no name")
    if not isinstance(name, str):
        raise FrontmatterError(f"the frontmatter's name is a {_kind(name)}, not text")
    problem = name_problem(name, directory)
    if problem is not None:
        raise FrontmatterError(problem)
    if description is None:
        raise FrontmatterError("the frontmatter has no description")
    if not isinstance(description, str):
        raise FrontmatterError(f"the frontmatter's description is a {_kind(description)}, not text")
    description = description.strip()
    if not description:
        raise FrontmatterError("the frontmatter's description is empty")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise FrontmatterError(f"the description is {len(description)} characters; at most {MAX_DESCRIPTION_CHARS} are allowed")
    return name, description
