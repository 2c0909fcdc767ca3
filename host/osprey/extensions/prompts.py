"""The system prompt's layered parts: a replacement base (`OSPREY_SYSTEM_PROMPT_FILE`, else the
nearest `SYSTEM.md`), every readable `APPEND_SYSTEM.md` in layer order, then the project's
instructions (`AGENTS.md`, or `CLAUDE.md` where there is none, from the workspace root down to
the working directory, within a 32 KiB budget).

Fallbacks: an environment file that cannot be read gives way to the layered file; a nearest
`SYSTEM.md` that cannot be read gives way to the built-in base (never to a farther `SYSTEM.md`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .layers import ArtifactError, Layer, read_inside
from .report import Artifact, sanitize, sha256

MAX_PROMPT_BYTES = 256 * 1024
INSTRUCTIONS_BUDGET = 32 * 1024
TRUNCATED = "[truncated]"
INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md")


@dataclass
class PromptParts:
    """What the layers add to the system prompt."""

    base: str | None = None  # replaces the built-in base when set
    appends: list[str] = field(default_factory=list)
    instructions: str = ""

    def compose(self, builtin_base: str) -> str:
        parts = [self.base if self.base is not None else builtin_base, *self.appends]
        if self.instructions:
            parts.append(self.instructions)
        return "\n\n".join(part.strip("\n") for part in parts if part.strip())


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"not UTF-8 text (byte {exc.start})") from None


def resolve_prompt(layers: list[Layer], env_file: Path | None, cwd: Path, workspace_root: Path,
                   report: list[Artifact], warnings: list[str]) -> PromptParts:
    parts = PromptParts()
    base_found = False
    if env_file is not None:
        try:
            data = _read_any(env_file)
            if data is None:
                raise ArtifactError("no such file")
            parts.base = _text(data)
            base_found = True
            report.append(Artifact(kind="system_prompt", name="OSPREY_SYSTEM_PROMPT_FILE", layer="environment", path=str(env_file),
                                   digest=sha256(data)))
        except ArtifactError as exc:
            reason = sanitize(f"OSPREY_SYSTEM_PROMPT_FILE cannot be used: {exc}; the layered SYSTEM.md applies")
            warnings.append(f"{env_file}: {reason}")
            report.append(Artifact(kind="system_prompt", name="OSPREY_SYSTEM_PROMPT_FILE", layer="environment", path=str(env_file),
                                   status="skipped", reason=reason))
    nearest_seen = False
    for layer in layers:
        path = layer.root / "SYSTEM.md"
        if (base_found or nearest_seen) and os.path.lexists(path):
            # A farther copy is only reported: it is not read.
            _shadow(report, "system_prompt", path)
            why = "a nearer replacement prompt applies" if base_found else "the nearest SYSTEM.md could not be read, so the built-in base applies"
            report.append(Artifact(kind="system_prompt", name="SYSTEM.md", layer=layer.kind, path=str(path), status="shadowed", reason=why))
            continue
        try:
            data = read_inside(path, layer.boundary, MAX_PROMPT_BYTES)
            if data is None:
                continue
            text = _text(data)
        except ArtifactError as exc:
            nearest_seen = True  # a nearest file that cannot be read: the built-in base, not a farther one
            reason = sanitize(f"{exc}; the built-in base prompt applies")
            warnings.append(f"{path}: {reason}")
            report.append(Artifact(kind="system_prompt", name="SYSTEM.md", layer=layer.kind, path=str(path), status="skipped", reason=reason))
            continue
        parts.base = text
        base_found = True
        report.append(Artifact(kind="system_prompt", name="SYSTEM.md", layer=layer.kind, path=str(path), digest=sha256(data)))
    for layer in layers:
        path = layer.root / "APPEND_SYSTEM.md"
        try:
            data = read_inside(path, layer.boundary, MAX_PROMPT_BYTES)
            if data is None:
                continue
            parts.appends.append(_text(data))
        except ArtifactError as exc:
            reason = sanitize(str(exc))
            warnings.append(f"{path}: {reason}; it is not appended")
            report.append(Artifact(kind="append_system", name="APPEND_SYSTEM.md", layer=layer.kind, path=str(path), status="skipped", reason=reason))
            continue
        report.append(Artifact(kind="append_system", name="APPEND_SYSTEM.md", layer=layer.kind, path=str(path), digest=sha256(data)))
    parts.instructions = project_instructions(cwd, workspace_root, report, warnings)
    return parts


def _shadow(report: list[Artifact], kind: str, path: Path) -> None:
    """Note on the active artifact of `kind` that `path` is a farther copy it hides."""
    for item in report:
        if item.kind == kind and item.status == "active":
            item.shadowed.append(str(path))
            return


def _read_any(path: Path) -> bytes | None:
    """A file the person named in the environment: read wherever it is, bounded."""
    return read_inside(path, Path(os.path.realpath(path)).parent, MAX_PROMPT_BYTES)


def project_instructions(cwd: Path, workspace_root: Path, report: list[Artifact], warnings: list[str]) -> str:
    """AGENTS.md (or CLAUDE.md) of each directory from the workspace root down to `cwd`, within
    the budget: past it the tail is cut and `[truncated]` ends the text."""
    root = Path(os.path.realpath(workspace_root))
    here = Path(os.path.realpath(cwd))
    chain = [here]
    while chain[-1] != root and chain[-1].parent != chain[-1]:
        chain.append(chain[-1].parent)
    if chain[-1] != root:
        chain = [here]
    sections: list[str] = []
    for directory in reversed(chain):
        for name in INSTRUCTION_FILES:
            path = directory / name
            try:
                data = read_inside(path, root, INSTRUCTIONS_BUDGET * 4)
            except ArtifactError as exc:
                reason = sanitize(str(exc))
                warnings.append(f"{path}: {reason}; its instructions are not used")
                report.append(Artifact(kind="project_instructions", name=name, layer="project", path=str(path), status="skipped", reason=reason))
                break  # it is there: CLAUDE.md does not stand in for it
            if data is None:
                continue
            text = data.decode("utf-8", "replace")
            rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
            sections.append(f"## {rel}\n\n{text.strip()}")
            report.append(Artifact(kind="project_instructions", name=name, layer="project", path=str(path), digest=sha256(data)))
            break
    if not sections:
        return ""
    text = "# Project instructions\n\n" + "\n\n".join(sections)
    encoded = text.encode("utf-8")
    if len(encoded) <= INSTRUCTIONS_BUDGET:
        return text
    marker = "\n" + TRUNCATED
    kept = encoded[: INSTRUCTIONS_BUDGET - len(marker.encode())].decode("utf-8", "ignore")
    for item in report:
        if item.kind == "project_instructions" and item.status == "active":
            item.reason = f"the project instructions together are over the {INSTRUCTIONS_BUDGET // 1024} KiB budget: the tail is cut"
    return kept + marker
