"""Where workflows are found, and whether each may run.

Workflows are `*.js` files in `workflows/` of the extension layers, nearest first: the project's
`.osprey/workflows/` (the nearest directory first, up to the workspace boundary), then
`$OSPREY_HOME/workflows/`, then the bundled ones. A file's stem is its name (and its slash
command); the nearest file with a name wins. A project workflow runs only with a trust pin in
`$OSPREY_HOME/trust.toml` (`osprey extensions trust NAME`) that covers its project-relative path
and bytes, as a custom tool's does: a changed file is `modified` and does not run until it is
trusted again. Your own workflows run, unless the agent wrote them (a provenance sidecar), which
takes a pin too; bundled ones always run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ...errors import OspreyError
from ...extensions.discovery import pin_digest
from ...extensions.layers import ArtifactError, Layer, forget_real_paths, layers, list_dir, read_inside, real_path
from ...extensions.provenance import read_provenance
from ...extensions.report import sanitize
from ...terminal_text import clean

if TYPE_CHECKING:
    from ...trust import TrustStore

BUNDLED = Path(__file__).resolve().parent / "bundled"
MAX_WORKFLOW_BYTES = 256 * 1024  # one workflow file at most
MAX_WORKFLOWS_PER_LAYER = 200
MAX_DESCRIPTION = 200
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")

Scope = Literal["project", "user", "bundled"]
WorkflowTrust = Literal["trusted", "untrusted", "modified"]


class WorkflowError(OspreyError):
    """A workflow that cannot be found or may not run; the message says why and what to do."""


@dataclass(frozen=True)
class WorkflowFile:
    """One discovered workflow file. `runnable` says whether it may run now; `why_not` why not."""

    name: str  # the file's stem: its slash command
    path: Path
    scope: Scope
    description: str  # the file's first `//` comment line (bounded)
    runnable: bool
    why_not: str | None = None
    trust: WorkflowTrust = "trusted"
    status: Literal["active", "inactive", "shadowed", "skipped"] = "active"
    digest: str | None = None  # the trust pin digest (project and agent-written files)
    key: str = ""  # its name in trust pins: project-relative for a project file, else layer-relative
    pin_scope: str = ""  # the trust pins' scope: the workspace root, or "user"
    external: bool = False  # a file outside the workspace and $OSPREY_HOME that the person named (`/run PATH`)


def trust_command(name: str) -> str:
    return f"osprey extensions trust {name}"


def describe(source: bytes) -> str:
    """The first `//` comment line among a file's first lines, bounded, on one line, without
    control characters or bidi overrides (it is drawn in menus and listings)."""
    head = source[:16 * 1024].decode("utf-8", "replace")
    for line in head.splitlines()[:40]:
        text = line.strip()
        if text.startswith("//"):
            text = clean(_CONTROL.sub(" ", text.lstrip("/").strip())).strip()
            return text if len(text) <= MAX_DESCRIPTION else text[: MAX_DESCRIPTION - 1] + "…"
    return ""


def _trust(layer: Layer, path: Path, data: bytes, root: Path, store: TrustStore) -> tuple[WorkflowTrust, str | None, str | None]:
    """(trust, why it does not run, pin digest) of one workflow file."""
    key = layer.key(path, root)
    digest = pin_digest(key, data, [])
    if layer.kind == "bundled":
        return "trusted", None, None
    if layer.kind == "user":
        provenance, _ = read_provenance(path, layer.boundary)
        if provenance == "legacy":
            return "trusted", None, None
        if provenance == "unknown":
            return "untrusted", "its provenance sidecar cannot be read or understood", digest
    if store.problem:
        return "untrusted", sanitize(f"the trust file is broken ({store.problem})"), digest
    status = store.pin_status(layer.scope(root), key, digest)
    name = path.stem
    if status == "trusted":
        return "trusted", None, digest
    if status == "modified":
        return "modified", f"it changed since it was trusted: review it, then run `{trust_command(name)}`", digest
    who = "it was written by the agent and is " if layer.kind == "user" else "it is "
    return "untrusted", f"{who}not trusted: review it, then run `{trust_command(name)}`", digest


def discover_workflows(workspace_root: Path | str, home: Path | str, *, cwd: Path | str | None = None,
                       trusted: TrustStore | None = None) -> list[WorkflowFile]:
    """Every workflow file of the layers of a session in `cwd` (default: the workspace root),
    nearest first, each with whether it may run. `trusted`: the trust pins (default: read from
    `home`'s trust.toml)."""
    from ...trust import load_trust

    root_path, home_path = Path(workspace_root), Path(home)
    forget_real_paths()
    store = trusted if trusted is not None else load_trust(home_path)
    root = Path(real_path(root_path))
    found: list[WorkflowFile] = []
    active: dict[str, WorkflowFile] = {}
    places = [layer for layer in layers(Path(cwd) if cwd is not None else root_path, root_path, home_path) if layer.kind != "bundled"]
    if BUNDLED.is_dir():
        places.append(Layer("bundled", BUNDLED, BUNDLED, len(places)))
    for layer in places:
        directory = layer.root if layer.kind == "bundled" else layer.root / "workflows"
        paths, _more = list_dir(directory, ".js", MAX_WORKFLOWS_PER_LAYER)
        for path in paths:
            scope: Scope = layer.kind
            key, pin_scope = layer.key(path, root), layer.scope(root)
            try:
                data = read_inside(path, layer.boundary, MAX_WORKFLOW_BYTES)
            except ArtifactError as exc:
                found.append(WorkflowFile(path.stem, path, scope, "", False, sanitize(str(exc)), "untrusted", "skipped", key=key, pin_scope=pin_scope))
                continue
            if data is None:
                continue
            description = describe(data)
            if not NAME.match(path.stem):
                found.append(WorkflowFile(path.stem, path, scope, description, False,
                                          "its name is not 1-64 lowercase letters, digits, '-' or '_' (starting with a letter or digit)",
                                          "untrusted", "skipped", key=key, pin_scope=pin_scope))
                continue
            trust, why, digest = _trust(layer, path, data, root, store)
            if path.stem in active:
                found.append(WorkflowFile(path.stem, path, scope, description, False, f"a nearer workflow named {path.stem!r} is used: "
                                          f"{active[path.stem].path}", trust, "shadowed", digest, key, pin_scope))
                continue
            if trust != "trusted":
                found.append(WorkflowFile(path.stem, path, scope, description, False, why, trust, "inactive", digest, key, pin_scope))
                continue
            entry = WorkflowFile(path.stem, path, scope, description, True, None, trust, "active", digest, key, pin_scope)
            active[path.stem] = entry
            found.append(entry)
    return found


def find_workflow(found: list[WorkflowFile], target: str) -> WorkflowFile:
    """The discovered workflow named `target` (or at the path `target`), runnable or not; a
    WorkflowError says what is there when none is."""
    wanted = target.strip()
    named = [item for item in found if item.name == wanted or str(item.path) == wanted]
    # The one that runs (the nearest trusted file, as for custom tools), else why the nearest does not.
    for item in sorted(named, key=lambda item: item.status != "active"):
        if item.status != "shadowed":
            return item
    names = sorted({item.name for item in found if item.runnable})
    raise WorkflowError(f"no workflow named {wanted!r} was found" + (f"; runnable: {', '.join(names)}" if names else
                        "; workflows are .js files in .osprey/workflows/ or $OSPREY_HOME/workflows/"))


def bundled_workflow(name: str) -> WorkflowFile:
    """The bundled workflow `name` itself, whatever nearer file shares its name (a built-in
    command runs the bundled file); a WorkflowError when there is none."""
    path = BUNDLED / f"{name}.js"
    try:
        data = read_inside(path, BUNDLED, MAX_WORKFLOW_BYTES) if NAME.match(name) else None
    except ArtifactError as exc:
        raise WorkflowError(f"the bundled workflow {name!r} cannot be read: {exc}") from None
    if data is None:
        raise WorkflowError(f"the bundled workflow {name!r} was not found in {BUNDLED}")
    return WorkflowFile(name, path, "bundled", describe(data), True, key=f"{name}.js")


def load_source(item: WorkflowFile, workspace_root: Path | str, home: Path | str, *, trusted: TrustStore | None = None) -> str:
    """The text of a discovered workflow, read again and checked again right before it runs: the
    bytes that run are the bytes whose trust was checked. A WorkflowError says why it may not run."""
    from ...trust import load_trust

    if not item.runnable:
        raise WorkflowError(f"the workflow {item.name!r} ({item.path}) does not run: {item.why_not}")
    root = Path(real_path(Path(workspace_root)))
    if item.scope == "bundled":
        layer = Layer("bundled", BUNDLED, BUNDLED, 0)
    elif item.scope == "user":
        user = Path(real_path(Path(home)))
        layer = Layer("user", user, user, 0)
    else:
        layer = Layer("project", item.path.parent.parent, root, 0)
    try:
        data = read_inside(item.path, layer.boundary, MAX_WORKFLOW_BYTES)
    except ArtifactError as exc:
        raise WorkflowError(f"the workflow {item.name!r} ({item.path}) cannot be read: {exc}") from None
    if data is None:
        raise WorkflowError(f"the workflow {item.name!r} ({item.path}) is gone")
    trust, why, _ = _trust(layer, item.path, data, root, trusted if trusted is not None else load_trust(Path(home)))
    if trust != "trusted":
        raise WorkflowError(f"the workflow {item.name!r} ({item.path}) does not run: {why}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise WorkflowError(f"the workflow {item.name!r} ({item.path}) is not UTF-8 text") from None
