"""Extension discovery: every layer's artifacts resolved by the spec's rule for their kind, with
trust for the executable ones, into what a session uses and a report of everything found.

| artifact | where | resolution |
| --- | --- | --- |
| custom tools | `tools/*.toml` | the first valid and trusted manifest with a name wins |
| lifecycle hooks | `hooks.toml` | the user's own file always runs (when valid and trusted); the nearest project file runs in addition once trusted, after the user's (a malformed or untrusted one: no project hooks, never a farther one) |
| replacement prompt | `SYSTEM.md` | `OSPREY_SYSTEM_PROMPT_FILE`, then the nearest file |
| prompt appends | `APPEND_SYSTEM.md` | every readable file, in layer order |
| tool descriptions | `tool-descriptions.toml` | `OSPREY_TOOL_DESCRIPTIONS_FILE`, then the nearest file, then the built-in ones |
| toolsets | `toolsets.toml` | the nearest file; malformed: none (never a farther one) |
| configuration | `config.toml` | the configuration's own merge rules (`osprey.config.layers`) |

Trust: a project's executable artifacts (tools, hooks) are active only with a matching pin in
`$OSPREY_HOME/trust.toml` (`osprey extensions trust NAME`); the pin covers the artifact's
project-relative path and bytes, and the bytes of every workspace file its commands name (the
program, an interpreter's script, a file read through `<`, `--option=FILE`; the path of a program
outside the workspace), found by `pins.plan_hook` and `pins.plan_tool`. A command that cannot be
pinned (inline code, a module run by name, unresolvable expansions) makes the artifact skipped.
Before each host run the files are checked again and private copies of the checked bytes run
(`pins.prepare_hook`, `pins.prepare_tool`). Bundled ones are trusted; the user's are trusted
unless the agent wrote them (a provenance sidecar), which takes a pin too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .layers import MAX_DESCRIPTIONS_BYTES, MAX_TOOLSETS_BYTES, ArtifactError, Layer, forget_real_paths, layers, list_dir, read_inside, real_path
from .prompts import PromptParts, resolve_prompt
from .provenance import read_provenance
from .report import Artifact, Report, Trust, sanitize, sha256

if TYPE_CHECKING:
    from ..config import Settings
    from ..trust import TrustStore
    from .pins import Pin, Plan, Scope  # the pins load with the first tool manifest or hooks file
    from .toolsets import ToolsetsFile  # with the first toolsets.toml

MAX_MANIFEST_BYTES = 64 * 1024
MAX_HOOKS_BYTES = 64 * 1024
MAX_TOOLS_PER_LAYER = 200
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")  # a path may hold them; a notice is one line


@dataclass
class FoundTool:
    """A custom tool to offer the model."""

    manifest: Any  # custom_tools.ToolManifest
    manifest_dir: Path
    path: Path
    layer: Layer
    program: Any = None  # custom_tools.ProgramRef, the one its pin covers
    pin: Pin | None = None  # what is checked before each host run (None: trusted without a pin)


@dataclass
class Extensions:
    """What a session takes from its layers, and the report of everything found."""

    layers: list[Layer]
    tools: list[FoundTool] = field(default_factory=list)
    hooks: Any = None  # hooks.HooksFile: the active hooks files' groups together (the user's first)
    hook_sets: list[Any] = field(default_factory=list)  # hooks.HookSet of each active hooks.toml, in run order
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
            artifacts=self.artifacts, warnings=self.warnings, trust_agent_authored=settings.extensions.trust_agent_authored,
        )

    @property
    def hooks_path(self) -> Path | None:
        """The first active hooks file (`hook_sets` has them all)."""
        return Path(self.hook_sets[0].source) if self.hook_sets else None

    @property
    def hooks_paths(self) -> list[Path]:
        return [Path(item.source) for item in self.hook_sets]

    def find(self, name: str) -> list[Artifact]:
        """Report entries by tool name, or by file name or path."""
        return [a for a in self.artifacts if name in (a.name, a.path) or a.path.endswith(os.sep + name)]

    def trust_command(self, artifact: Artifact) -> str:
        """The command that trusts an executable artifact: by its name (`hooks` for a hooks file)
        when that picks it alone, as `osprey extensions trust` does, else by its path."""
        name = "hooks" if artifact.kind == "hooks" else artifact.name
        same = [a for a in self.find("hooks.toml" if name == "hooks" else name) if a.kind in ("tool", "hooks") and a.status != "skipped"]
        unique = len(same) <= 1 or len([a for a in same if a.trust != "trusted"]) == 1
        return f"osprey extensions trust {name if unique and name.isprintable() and ' ' not in name else shlex.quote(artifact.path)}"

    def trust_hint(self, artifact: Artifact) -> str | None:
        """The trust command for a tool or hooks file that does not run and needs a pin to run (a
        malformed file of yours needs only fixing); None otherwise."""
        if artifact.kind not in ("tool", "hooks") or artifact.status not in ("inactive", "skipped"):
            return None
        if artifact.status == "inactive" or artifact.layer == "project" or artifact.provenance == "agent" or artifact.trust != "not_required":
            return self.trust_command(artifact)
        return None

    def inactive(self) -> list[Artifact]:
        """The custom tools and hooks files that are present but do not run: untrusted, modified,
        malformed, or not pinnable (shadowed copies aside)."""
        return [a for a in self.artifacts if a.kind in ("tool", "hooks") and a.status in ("inactive", "skipped")]

    def notice(self, artifact: Artifact) -> str:
        """One line for the person: which file does not run, why, and how to make it run."""
        if artifact.status == "inactive" and artifact.trust == "modified":
            why = "it changed since it was trusted"
        elif artifact.status == "inactive" and artifact.trust == "untrusted" and "need trust" in (artifact.reason or ""):
            why = "it was written by the agent and is not trusted" if artifact.provenance == "agent" else "it is not trusted"
        else:
            why = artifact.reason or artifact.status
        command = self.trust_hint(artifact)
        if command is None:
            todo = "fix it"
        else:
            todo = f"{'review' if artifact.status == 'inactive' else 'fix'} it, then run `{command}`"
        if artifact.kind == "hooks":
            text = f"the hooks in {artifact.path} do not run ({why}): nothing they would block is blocked; {todo}"
        else:
            text = f"the custom tool {artifact.name!r} ({artifact.path}) is not offered ({why}); {todo}"
        return _CONTROL.sub(" ", text)


def pin_digest(key: str, manifest: bytes, programs: list[tuple[str, str]]) -> str:
    """The trust pin of an executable artifact: its key (project-relative path), its bytes, and
    each file its commands name, as ("bytes", "<path>:<sha256>") inside the boundary or ("path", path)
    (`pins.Plan.identities`)."""
    framed = json.dumps({"key": key, "manifest": sha256(manifest), "programs": programs}, sort_keys=True)
    return "sha256:" + hashlib.sha256(b"osprey-extension-pin-v1\n" + framed.encode()).hexdigest()


class _Context:
    def __init__(self, settings: Settings, store: TrustStore) -> None:
        self.settings = settings
        self.store = store
        self.root = Path(real_path(settings.workspace_root))

    def scope(self, layer: Layer) -> Scope:
        """Where the files an artifact's commands name count with their bytes: the workspace,
        and for the user's own artifacts $OSPREY_HOME too."""
        from .pins import scope_of

        if layer.kind == "project":
            return scope_of([self.root], self.root)
        return scope_of([layer.boundary, self.root], layer.root)

    def pinned(self, layer: Layer, path: Path) -> bool:
        """Whether the artifact is trusted only through a pin (so it is checked before each run)."""
        if layer.kind == "bundled":
            return False
        return layer.kind == "project" or read_provenance(path, layer.boundary)[0] != "legacy"

    def trust(self, layer: Layer, path: Path, data: bytes, identities: list[tuple[str, str]]) -> tuple[Trust, str | None, str]:
        """(trust, reason when not trusted, pin digest) of an executable artifact."""
        key = layer.key(path, self.root)
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
            return "modified", "it (or a file its commands name) changed since it was trusted: review it, then `osprey extensions trust`", digest
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
            # Loaded only when there are manifests: a session without custom tools never needs them.
            from .custom_tools import ManifestError, check_name, parse_manifest, resolve_program
            from .pins import Pin, Unpinnable, plan_tool
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
            ref = resolve_program(manifest, path.parent)
            scope = context.scope(layer)
            pinned = context.pinned(layer, path) and not manifest.sandbox  # a lane run stays in the lane
            try:
                plan = plan_tool(manifest.command, None if ref.path is None else str(ref.path), workdir=str(ref.workdir), scope=scope)
                trust, why, pin = context.trust(layer, path, data, plan.identities())
            except Unpinnable as exc:
                if context.pinned(layer, path):
                    entry.trust, entry.status, entry.reason = "untrusted", "skipped", sanitize(f"it cannot be pinned: {exc}")
                    continue
                plan, (trust, why, pin) = None, context.trust(layer, path, data, [])
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
            checked = Pin(tuple(plan.identities()), scope) if pinned and plan is not None else None
            found.tools.append(FoundTool(manifest, path.parent, path, layer, ref, checked))


def _hooks(found: Extensions, context: _Context) -> None:
    """The user's hooks.toml (and a bundled one) always run when valid and trusted; the nearest
    project hooks.toml runs in addition once trusted (a farther project file never instead)."""
    nearest: Artifact | None = None
    own: list[HookSet] = []
    project: list[HookSet] = []
    for layer in found.layers:
        path = layer.root / "hooks.toml"
        problem: str | None = None
        try:
            data = read_inside(path, layer.boundary, MAX_HOOKS_BYTES)
        except ArtifactError as exc:
            data, problem = b"", sanitize(str(exc))
        if data is None:
            continue
        # Loaded only when there is a hooks file: a session without hooks never needs it.
        from .hooks import HooksError, HookSet, hook_commands, parse_hooks
        from .pins import Pin, Unpinnable, plan_hook

        entry = Artifact(kind="hooks", name="hooks.toml", layer=layer.kind, path=str(path), digest=sha256(data) if data else None)
        found.artifacts.append(entry)
        farther = ""
        if layer.kind == "project":
            if nearest is not None:
                entry.status, entry.reason = "shadowed", "a nearer project hooks.toml comes first"
                nearest.shadowed.append(str(path))
                continue
            nearest, farther = entry, "; farther project hooks files are not used"
        # A hooks file that does not run is announced once, by its notice (`Extensions.inactive`).
        if problem is not None:
            entry.status, entry.reason = "skipped", problem + farther
            continue
        try:
            hooks = parse_hooks(data, source=str(path))
        except HooksError as exc:
            entry.status, entry.reason = "skipped", sanitize(str(exc).removeprefix(f"{path}: ") + farther)
            continue
        commands = hook_commands(hooks)
        entry.runs = commands
        entry.provenance = read_provenance(path, layer.boundary)[0] if layer.kind == "user" else "none"
        scope = context.scope(layer)
        plans: dict[str, Plan] | None = None
        try:
            made: dict[str, Plan] = {}
            for command in commands:
                if command not in made:
                    made[command] = plan_hook(command, cwd=str(context.settings.cwd), project_dir=str(context.root), scope=scope)
            identities = [item for command in commands for item in made[command].identities()]
            plans = made
        except Unpinnable as exc:
            if context.pinned(layer, path):
                entry.trust, entry.status, entry.reason = "untrusted", "skipped", sanitize(f"it cannot be pinned: {exc}{farther}")
                entry.digest = None
                continue
            plans, identities = None, []
        except ArtifactError as exc:
            entry.trust, entry.status, entry.reason = "untrusted", "inactive", sanitize(f"{exc}{farther}")
            continue
        trust, why, pin = context.trust(layer, path, data, identities)
        entry.trust, entry.digest = trust, pin
        if trust != "trusted":
            entry.status, entry.reason = "inactive", f"{why}{farther}"
            continue
        checked = None
        if plans is not None and context.pinned(layer, path):
            checked = {command: Pin(tuple(plan.identities()), scope) for command, plan in plans.items()}
        (project if layer.kind == "project" else own).append(HookSet(hooks, str(path), checked))
    found.hook_sets = own + project  # the user's own hooks (and bundled ones) run first
    found.hooks = None
    if found.hook_sets:
        from .hooks import merge_hooks

        found.hooks = merge_hooks(found.hook_sets)


def _descriptions(found: Extensions, env_file: Path | None) -> None:
    if env_file is not None:
        entry = Artifact(kind="tool_descriptions", name="OSPREY_TOOL_DESCRIPTIONS_FILE", layer="environment", path=str(env_file))
        found.artifacts.append(entry)
        try:
            data = read_inside(env_file, Path(os.path.realpath(env_file)).parent, MAX_DESCRIPTIONS_BYTES)
            if data is None:
                raise ArtifactError("no such file")
            from .descriptions import parse_descriptions

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
        from .descriptions import parse_descriptions

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
            from .toolsets import parse_toolsets

            found.toolsets = parse_toolsets(data)
        except (ArtifactError, ConfigError) as exc:  # ConfigError: the parser's ToolsetError
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

