"""Personas: named roles, each a Markdown file whose YAML frontmatter sets its tools, its output
contract (a terminal tool and a JSON Schema) and whether it may run as a child agent, and whose
body is its prompt. Resolved from the project, then the user's home, then the bundled four
(`default`, `coding`, `architect`, `verifier`)."""

from __future__ import annotations

from .model import Persona, PersonaError, Source
from .resolve import (
    BUNDLED_DIR,
    BUNDLED_NAMES,
    BUNDLED_SCHEMAS,
    NAME_RULE,
    available_names,
    check_tools,
    list_personas,
    parse_persona,
    resolve_persona,
    valid_name,
)

__all__ = [
    "BUNDLED_DIR", "BUNDLED_NAMES", "BUNDLED_SCHEMAS", "NAME_RULE", "Persona", "PersonaError", "Source",
    "available_names", "check_tools", "list_personas", "parse_persona", "resolve_persona", "valid_name",
]
