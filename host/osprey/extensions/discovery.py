"""Extension discovery: every layer's artifacts resolved by the spec's rule for their kind, with
trust for the executable ones, into what a session uses and a report of everything found.

| artifact | where | resolution |
| --- | --- | --- |
| custom tools | `tools/*.toml` | the first valid and trusted manifest with a name wins |
| lifecycle hooks | `hooks.toml` | the nearest file; malformed or untrusted: none (never a farther one) |
| replacement prompt | `SYSTEM.md` | `OSPREY_SYSTEM_PROMPT_FILE`, then the nearest file |
| prompt appends | `APPEND_SYSTEM.md` | every readable file, in layer order |
| tool descriptions | `tool-descriptions.toml` | `OSPREY_TOOL_DESCRIPTIONS_FILE`, then the nearest file, then the built-in ones |
| toolsets | `toolsets.toml` | the nearest file; malformed: none (never a farther one) |
| configuration | `config.toml` | the configuration's own merge rules (`osprey.config.layers`) |

Trust: a project's executable artifacts (tools, hooks) are active only with a matching pin in
`$OSPREY_HOME/trust.toml` (`osprey extensions trust NAME`); the pin covers the artifact's
project-relative path and bytes, and the bytes of the program it runs when that is inside the
workspace (the path of one outside it). Bundled ones are trusted; the user's are trusted unless
the agent wrote them (a provenance sidecar), which takes a pin too.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .descriptions import MAX_DESCRIPTIONS_BYTES, parse_descriptions
from .layers import ArtifactError, Layer, forget_real_paths, inside, layers, list_dir, read_inside, real_path
from .prompts import PromptParts, resolve_prompt
from .provenance import read_provenance
from .report import Artifact, Report, Trust, sanitize, sha256
from .toolsets import MAX_TOOLSETS_BYTES, ToolsetError, ToolsetsFile, parse_toolsets

if TYPE_CHECKING:
    from ..config import Settings
    from ..trust import TrustStore

MAX_MANIFEST_BYTES = 64 * 1024
MAX_HOOKS_BYTES = 64 * 1024
MAX_TOOLS_PER_LAYER = 200
MAX_PROGRAM_BYTES = 64 * 1024 * 1024


@dataclass
class FoundTool:
    """A custom tool to offer the model."""

    manifest: Any  # custom_tools.ToolManifest
    manifest_dir: Path
    path: Path
    layer: Layer


@dataclass
class Extensions:
    """What a session takes from its layers, and the report of everything found."""

    layers: list[Layer]
    tools: list[FoundTool] = field(default_factory=list)
    hooks: Any = None  # hooks.HooksFile of the active hooks.toml
    hooks_path: Path | None = None
    prompt: PromptParts = field(default_factory=PromptParts)
    descriptions: dict[str, str] = field(default_factory=dict)
    toolsets: ToolsetsFile | None = None
    toolsets_problem: str | None = None
    artifacts: list[Artifact] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def report(self, settings: Settings) -> Report:
        return Report(
            workspace_root=str(settings.workspace_root), cwd=str(settings.cwd), home=str(settings.home),
            layers=[{"kind": layer.kind, "path": str(layer.root)} for layer in self.layers],
            artifacts=self.artifacts, warnings=self.warnings,
        )

    def find(self, name: str) -> list[Artifact]:
        """Report entries by tool name, or by file name or path."""
        return [a for a in self.artifacts if name in (a.name, a.path) or a.path.endswith(os.sep + name)]


def pin_digest(key: str, manifest: bytes, programs: list[tuple[str, str]]) -> str:
    """The trust pin of an executable artifact: its key (project-relative path), its bytes, and
    each program it runs, as ("bytes", "<path>:<sha256>") inside the boundary or ("path", path)."""
    framed = json.dumps({"key": key, "manifest": sha256(manifest), "programs": programs}, sort_keys=True)
    return "sha256:" + hashlib.sha256(b"osprey-extension-pin-v1\n" + framed.encode()).hexdigest()


def _program_identity(program: Path, boundary: Path, base: Path) -> tuple[str, str]:
    """How a program counts in a pin: its bytes when it lies inside `boundary`, else its path."""
    real = Path(real_path(program))
    if inside(str(real), boundary):
        try:
            data = read_inside(real, boundary, MAX_PROGRAM_BYTES)
        except ArtifactError as exc:
            raise ArtifactError(f"its program {program} {exc}") from None
        rel = real.relative_to(base).as_posix() if real.is_relative_to(base) else str(real)
        return ("bytes", f"{rel}:{sha256(data or b'')}")
    return ("path", str(program))


class _Context:
    def __init__(self, settings: Settings, store: TrustStore) -> None:
        self.settings = settings
        self.store = store
        self.root = Path(real_path(settings.workspace_root))

    def trust(self, layer: Layer, path: Path, data: bytes, programs: list[Path]) -> tuple[Trust, str | None, str]:
        """(trust, reason when not trusted, pin digest) of an executable artifact."""
        key = layer.key(path, self.root)
        base = self.root if layer.kind == "project" else layer.root
        identities = [_program_identity(p, layer.boundary if layer.kind != "project" else self.root, base) for p in programs]
        digest = pin_digest(key, data, identities)
        if layer.kind == "bundled":
            return "trusted", None, digest
        if layer.kind == "user":
            provenance, record = read_provenance(path, layer.boundary)
            if provenance == "legacy":
                return "trusted", None, digest
            if provenance == "unknown":
                return "untrusted", "its provenance sidecar cannot be read or understood", digest
        if self.store.problem:
            return "untrusted", sanitize(f"the trust file is broken ({self.store.problem})"), digest
        status = self.store.pin_status(layer.scope(self.root), key, digest)
        if status == "trusted":
            return "trusted", None, digest
        if status == "modified":
            return "modified", "it (or the program it runs) changed since it was trusted: review it, then `osprey extensions trust`", digest
        who = "agent-written " if layer.kind == "user" else ""
        return "untrusted", f"{who}executable artifacts need trust: review it, then `osprey extensions trust {path.stem if path.name != 'hooks.toml' else 'hooks'}`", digest


def discover(settings: Settings, builtin_tools: Collection[str]) -> Extensions:
    """Every layer's artifacts for a session in `settings.cwd`, resolved."""
    from ..trust import load_trust

    forget_real_paths()
    found = Extensions(layers=layers(settings.cwd, settings.workspace_root, settings.home))
    context = _Context(settings, load_trust(settings.home))
    _tools(found, context, builtin_tools)
    _hooks(found, context)
    found.prompt = resolve_prompt(found.layers, settings.system_prompt_file, settings.cwd, settings.workspace_root,
                                  found.artifacts, found.warnings)
    _descriptions(found, settings.tool_descriptions_file)
    _toolsets(found)
    _configs(found, settings)
    return found


def _tools(found: Extensions, context: _Context, builtin: Collection[str]) -> None:
    active: dict[str, Artifact] = {}
    for layer in found.layers:
        paths, more = list_dir(layer.root / "tools", ".toml", MAX_TOOLS_PER_LAYER)
        if more:
            found.warnings.append(f"{layer.root / 'tools'}: more than {MAX_TOOLS_PER_LAYER} manifests; only the first {MAX_TOOLS_PER_LAYER} by name are read")
        if paths:
            # Loaded only when there are manifests: a session without custom tools never needs it.
            from .custom_tools import ManifestError, check_name, parse_manifest, program_paths
        for path in paths:
            entry = Artifact(kind="tool", name=path.stem, layer=layer.kind, path=str(path), activation="session_start")
            found.artifacts.append(entry)
            try:
                data = read_inside(path, layer.boundary, MAX_MANIFEST_BYTES)
                if data is None:
                    found.artifacts.remove(entry)
                    continue
                entry.digest = sha256(data)
                manifest = parse_manifest(data, source=str(path))
            except (ArtifactError, ManifestError) as exc:
                entry.status, entry.reason = "skipped", sanitize(str(exc))
                continue
            entry.name = manifest.name
            entry.runs = list(manifest.command)
            try:
                check_name(manifest, builtin, source=str(path))
            except ManifestError as exc:
                entry.status, entry.reason = "skipped", sanitize(str(exc))
                continue
            try:
                trust, why, pin = context.trust(layer, path, data, program_paths(manifest, path.parent))
            except ArtifactError as exc:
                entry.trust, entry.status, entry.reason = "untrusted", "inactive", sanitize(str(exc))
                continue
            entry.trust, entry.digest = trust, pin
            entry.provenance = read_provenance(path, layer.boundary)[0] if layer.kind == "user" else "none"
            if manifest.name in active:
                entry.status, entry.reason = "shadowed", f"a nearer tool named {manifest.name!r} is used"
                active[manifest.name].shadowed.append(str(path))
                continue
            if trust != "trusted":
                entry.status, entry.reason = "inactive", why
                continue
            active[manifest.name] = entry
            found.tools.append(FoundTool(manifest, path.parent, path, layer))


def _hooks(found: Extensions, context: _Context) -> None:
    chosen: Artifact | None = None
    for layer in found.layers:
        path = layer.root / "hooks.toml"
        problem: str | None = None
        try:
            data = read_inside(path, layer.boundary, MAX_HOOKS_BYTES)
        except ArtifactError as exc:
            data, problem = b"", sanitize(str(exc))
        if data is None:
            continue
        from .hooks import HooksError, hook_commands, parse_hooks, referenced_program

        entry = Artifact(kind="hooks", name="hooks.toml", layer=layer.kind, path=str(path), digest=sha256(data) if data else None)
        found.artifacts.append(entry)
        if chosen is not None:
            entry.status, entry.reason = "shadowed", "a nearer hooks.toml comes first"
            chosen.shadowed.append(str(path))
            continue
        chosen = entry
        if problem is not None:
            entry.status, entry.reason = "skipped", problem
            continue
        try:
            hooks = parse_hooks(data, source=str(path))
        except HooksError as exc:
            entry.status, entry.reason = "skipped", sanitize(f"{exc}; farther hooks files are not used")
            found.warnings.append(f"{path}: {entry.reason}")
            continue
        commands = hook_commands(hooks)
        entry.runs = commands
        programs = []
        for command in commands:
            program = referenced_program(command, project_dir=str(context.root))
            if program is not None:
                programs.append(Path(program) if os.path.isabs(program) else Path(context.settings.cwd) / program)
        try:
            trust, why, pin = context.trust(layer, path, data, programs)
        except ArtifactError as exc:
            trust, why, pin = "untrusted", sanitize(str(exc)), entry.digest or ""
        entry.trust, entry.digest = trust, pin
        entry.provenance = read_provenance(path, layer.boundary)[0] if layer.kind == "user" else "none"
        if trust != "trusted":
            entry.status, entry.reason = "inactive", f"{why}; farther hooks files are not used"
            continue
        found.hooks, found.hooks_path = hooks, path


def _descriptions(found: Extensions, env_file: Path | None) -> None:
    if env_file is not None:
        entry = Artifact(kind="tool_descriptions", name="OSPREY_TOOL_DESCRIPTIONS_FILE", layer="environment", path=str(env_file))
        found.artifacts.append(entry)
        try:
            data = read_inside(env_file, Path(os.path.realpath(env_file)).parent, MAX_DESCRIPTIONS_BYTES)
            if data is None:
                raise ArtifactError("no such file")
            found.descriptions = parse_descriptions(data)
            entry.digest = sha256(data)
            _mark_rest(found, "tool-descriptions.toml", "OSPREY_TOOL_DESCRIPTIONS_FILE applies")
            return
        except (ArtifactError, ConfigError) as exc:
            entry.status, entry.reason = "skipped", sanitize(f"{exc}; the layered file applies")
            found.warnings.append(f"{env_file}: {entry.reason}")
    for layer in found.layers:
        path = layer.root / "tool-descriptions.toml"
        try:
            data = read_inside(path, layer.boundary, MAX_DESCRIPTIONS_BYTES)
        except ArtifactError as exc:
            found.artifacts.append(Artifact(kind="tool_descriptions", name=path.name, layer=layer.kind, path=str(path), status="skipped",
                                            reason=sanitize(f"{exc}; the built-in descriptions apply")))
            _mark_rest(found, path.name, "the nearest tool-descriptions.toml could not be used", after=layer.rank)
            return
        if data is None:
            continue
        entry = Artifact(kind="tool_descriptions", name=path.name, layer=layer.kind, path=str(path), digest=sha256(data))
        found.artifacts.append(entry)
        try:
            found.descriptions = parse_descriptions(data)
        except ConfigError as exc:
            entry.status, entry.reason = "skipped", sanitize(f"{exc}; the built-in descriptions apply")
            found.warnings.append(f"{path}: {entry.reason}")
        _mark_rest(found, path.name, "a nearer tool-descriptions.toml comes first", after=layer.rank)
        return


def _mark_rest(found: Extensions, name: str, reason: str, after: int = -1) -> None:
    """Report the farther copies of a nearest-wins file as shadowed."""
    for layer in found.layers[after + 1:]:
        path = layer.root / name
        if os.path.lexists(path):
            found.artifacts.append(Artifact(kind="tool_descriptions" if name == "tool-descriptions.toml" else "toolsets", name=name,
                                            layer=layer.kind, path=str(path), status="shadowed", reason=reason))


def _toolsets(found: Extensions) -> None:
    for layer in found.layers:
        path = layer.root / "toolsets.toml"
        try:
            data = read_inside(path, layer.boundary, MAX_TOOLSETS_BYTES)
            if data is None:
                continue
            entry = Artifact(kind="toolsets", name=path.name, layer=layer.kind, path=str(path), digest=sha256(data))
            found.artifacts.append(entry)
            found.toolsets = parse_toolsets(data)
        except (ArtifactError, ToolsetError) as exc:
            found.toolsets_problem = sanitize(f"{path}: {exc}")
            if not found.artifacts or found.artifacts[-1].path != str(path):
                found.artifacts.append(Artifact(kind="toolsets", name=path.name, layer=layer.kind, path=str(path)))
            found.artifacts[-1].status = "skipped"
            found.artifacts[-1].reason = sanitize(f"{exc}; farther toolsets files are not used")
            found.warnings.append(f"{path}: {found.artifacts[-1].reason}")
        _mark_rest(found, path.name, "a nearer toolsets.toml comes first", after=layer.rank)
        return


def _configs(found: Extensions, settings: Settings) -> None:
    """config.toml files are merged by the configuration's own rules; reported here too."""
    used = set(settings.sources)
    for layer in found.layers:
        path = layer.root / "config.toml"
        if not os.path.lexists(path):
            continue
        found.artifacts.append(Artifact(
            kind="config", name="config.toml", layer=layer.kind, path=str(path),
            status="active" if any(str(path) in source for source in used) else "inactive",
            reason=None if any(str(path) in source for source in used) else "not used by the configuration (see `osprey trust` for project files)",
        ))

