"""The YAML frontmatter of a persona file: a block between `---` lines at the top, then the body."""

from __future__ import annotations

from typing import Any

from .model import PersonaError


def split(text: str, where: str) -> tuple[str, str]:
    """The frontmatter text and the body of `text` (line endings normalised, a BOM dropped).
    Raises PersonaError when the text does not open with a `---` line or the block is not closed."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    if lines[0].rstrip() != "---":
        raise PersonaError(f"{where}: no frontmatter; start the file with a '---' line, then 'name: ...' and the other fields, "
                           "then a closing '---' line before the prompt")
    for i in range(1, len(lines)):
        if lines[i].rstrip() in ("---", "..."):
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1:])
    raise PersonaError(f"{where}: the frontmatter is not closed; add a '---' line after its last field")


def parse(block: str, where: str) -> dict[str, Any]:
    """The fields of a frontmatter block, parsed as YAML with a safe loader (libyaml's when there).
    Raises PersonaError for invalid YAML or a block that is not a mapping of fields."""
    from ..lazy import imported

    yaml = imported("yaml")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(block, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.MarkedYAMLError as exc:
        # The problem and its place only: the message never quotes the file's text.
        line = f" at line {exc.problem_mark.line + 2}" if exc.problem_mark is not None else ""
        raise PersonaError(f"{where}: the frontmatter is not valid YAML{line}: {exc.problem or exc.context}; fix it") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise PersonaError(f"{where}: the frontmatter is not valid YAML ({type(exc).__name__}); fix it") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PersonaError(f"{where}: the frontmatter is not a set of 'field: value' lines; write it as YAML fields such as 'name: ...'")
    return {k: v for k, v in data.items() if isinstance(k, str)}
