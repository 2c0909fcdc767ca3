"""Lane images: tagged by a content hash of what goes into them, built only when missing.

What goes in: the Dockerfile, the sidecar's code (which holds the generated protobuf code
of the proto), the base image's id, and the pinned wheels of grpcio, protobuf and
grpcio-health-checking for the image's Python. The wheels are downloaded on the host,
so nothing inside the build needs a package index.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

from ..errors import SandboxError

LANE_REPOSITORY = "osprey-lane"
BASE_TAG = "osprey-base:bookworm"
WHEEL_PACKAGES = ("grpcio", "protobuf", "grpcio-health-checking")
RECIPE_VERSION = "1"

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


DEMO_SESSION = ("examples", "demo", "session.jsonl")  # in the broker image: compose.yaml's default job replays it


def repo_file(*parts: str) -> Path:
    """A file of the source checkout or of the installed share dir (the Dockerfile, images/)."""
    here = Path(__file__).resolve()
    for root in (here.parents[3], Path(sys.prefix) / "share" / "osprey"):
        candidate = root.joinpath(*parts)
        if candidate.exists():
            return candidate
    raise SandboxError(f"{'/'.join(parts)} is missing from this installation; install Osprey from its source checkout")


def sidecar_dir() -> Path:
    import osprey_sidecar

    return Path(osprey_sidecar.__file__).resolve().parent


def _sidecar_files() -> list[Path]:
    root = sidecar_dir()
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]  # not walked at all: it holds most of the entries
        found += [Path(folder, name) for name in files if os.path.splitext(name)[1] in (".py", ".pyi", ".typed")]
    return sorted(found)


def wheel_pins() -> list[str]:
    """The host's versions of the sidecar's dependencies; the lane gets the same ones."""
    pins = []
    for name in WHEEL_PACKAGES:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            raise SandboxError(f"{name} is not installed on the host; reinstall Osprey") from None
    return pins


def recipe_hash(base_id: str) -> str:
    h = hashlib.sha256()
    h.update(f"recipe {RECIPE_VERSION}\nbase {base_id}\narch {platform.machine()}\n".encode())
    h.update("\n".join(wheel_pins()).encode())
    h.update(repo_file("Dockerfile").read_bytes())
    _hash_files(h, sidecar_dir(), _sidecar_files())
    return h.hexdigest()[:16]


# Which lane image a recipe made, for later processes: keyed by what the recipe's hash reads,
# by file identity (path, size, mtime) instead of content, so a start checks it with a few stats.
LANE_IMAGE_CACHE = "lane-images.json"
LANE_IMAGE_CACHE_MAX_BYTES = 64 * 1024
LANE_IMAGE_CACHE_ENTRIES = 16
_LANE_TAG = re.compile(rf"{LANE_REPOSITORY}:[0-9a-f]{{16}}")


def engine_key() -> tuple[str, ...]:
    """Which engine the environment names (its address and TLS settings)."""
    return tuple(os.environ.get(name, "") for name in ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT"))


def _cache_file(home: Path | None, name: str) -> Path:
    return (home or Path.home() / ".osprey") / "cache" / name


def _read_cache(path: Path) -> dict[str, Any]:
    """The small JSON map at `path` (empty when it is missing, too big or not a map)."""
    from ..files import read_no_follow

    raw = read_no_follow(path, LANE_IMAGE_CACHE_MAX_BYTES)
    try:
        known = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return known if isinstance(known, dict) else {}


def recipe_fingerprint(configured_base: str | None, engine: tuple[str, ...]) -> str:
    """What the lane image's tag depends on, cheaply: the recipe's version, the configured base,
    the engine, the wheel pins, and the identity of the Dockerfile and of each sidecar file."""
    h = hashlib.sha256(f"recipe {RECIPE_VERSION}\nbase {configured_base}\narch {platform.machine()}\nengine {engine}\n".encode())
    h.update("\n".join(wheel_pins()).encode())
    for path in [repo_file("Dockerfile"), *_sidecar_files()]:
        st = path.stat()
        h.update(f"\0{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}".encode())
    return h.hexdigest()[:32]


def known_lane_image(home: Path | None, fingerprint: str) -> str | None:
    """The lane image an earlier start found or built for this fingerprint, if any (not checked
    against the engine: a start whose image is gone checks again)."""
    tag = _read_cache(_cache_file(home, LANE_IMAGE_CACHE)).get(fingerprint)
    return tag if isinstance(tag, str) and _LANE_TAG.fullmatch(tag) else None


def remember_lane_image(home: Path | None, fingerprint: str, tag: str | None) -> None:
    """Record (or, with None, forget) the lane image of a fingerprint; best effort."""
    _update_cache(_cache_file(home, LANE_IMAGE_CACHE), fingerprint, tag)


def _update_cache(path: Path, key: str, value: str | None) -> None:
    """Set (or, with None, drop) `key` in the small JSON map at `path`, keeping its newest
    `LANE_IMAGE_CACHE_ENTRIES`; best effort."""
    known = _read_cache(path)
    known.pop(key, None)
    if value is not None:
        known[key] = value
    entries = dict(list(known.items())[-LANE_IMAGE_CACHE_ENTRIES:])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".lane-images-", dir=path.parent)
        with os.fdopen(fd, "w") as fh:
            json.dump(entries, fh)
        os.replace(tmp, path)
    except OSError:
        pass  # only a cache: the next start checks the image again


def _hash_files(h: Any, root: Path, files: list[Path]) -> None:
    """Feed each file's path (relative to `root`) and content into the hash `h`."""
    for path in files:
        h.update(b"\0" + str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())


def docker_client() -> Any:
    """A docker SDK client, or a SandboxError saying how to get an engine."""
    try:
        import docker
    except ImportError:  # pragma: no cover - docker is a dependency
        raise SandboxError("the docker Python package is missing; reinstall Osprey") from None
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except docker.errors.DockerException as exc:
        raise SandboxError(
            f"no Docker engine answers ({_short(exc)}). Start it (e.g. `dockerd &` or Docker Desktop), "
            "check DOCKER_HOST, or run without --sandbox"
        ) from None
    return client


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


def image_exists(client: Any, ref: str) -> bool:
    """Whether the engine `client` has the image `ref`."""
    import docker

    try:
        client.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def build_base(client: Any, progress: Progress = _quiet, tag: str = BASE_TAG, cancel: threading.Event | None = None) -> str:
    """Osprey's own Debian base, from debootstrap and `docker import` (no registry needed)."""
    script = repo_file("images", "build-base.sh")
    if os.geteuid() != 0:
        raise SandboxError(f"building the lane base image needs root (debootstrap): run `sudo {script} {tag}` once, then retry")
    if shutil.which("debootstrap") is None:
        raise SandboxError("building the lane base image needs debootstrap: `apt-get install debootstrap`, or set [sandbox] base_image to an image you have")
    progress(f"building the base image {tag} with debootstrap (a minute or two, once) ...")
    proc = subprocess.Popen(["bash", str(script), tag], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert proc.stdout is not None
    if cancel is not None:
        # debootstrap is quiet for a long time, so a watcher ends it when the caller gives up.
        def stop_when_cancelled() -> None:
            while proc.poll() is None:
                if cancel.wait(0.2):
                    try:
                        os.killpg(proc.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
                    return

        threading.Thread(target=stop_when_cancelled, daemon=True).start()
    tail: deque[str] = deque(maxlen=20)
    for line in proc.stdout:
        line = line.rstrip()
        tail.append(line)
        progress(line)
    if proc.wait() != 0:
        if cancel is not None and cancel.is_set():
            raise SandboxError("building the base image was cancelled")
        raise SandboxError("building the base image failed:\n" + "\n".join(tail))
    return tag


def resolve_base(client: Any, configured: str | None, progress: Progress = _quiet, cancel: threading.Event | None = None) -> str:
    """The base image to build on: the configured one (pulled if needed), else Osprey's own."""
    import docker

    if configured:
        if image_exists(client, configured):
            return configured
        progress(f"pulling {configured} ...")
        try:
            client.images.pull(configured)
            return configured
        except docker.errors.DockerException as exc:
            progress(f"cannot pull {configured} ({_short(exc)}); building on Osprey's own Debian base instead")
    if image_exists(client, BASE_TAG):
        return BASE_TAG
    return build_base(client, progress, cancel=cancel)


def _python_version(client: Any, image: str) -> str:
    out = client.containers.run(image, ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], remove=True, network_mode="none", entrypoint=[])
    return out.decode().strip()


def fetch_wheels(python_version: str, dest: Path, progress: Progress = _quiet, pins: list[str] | None = None) -> list[Path]:
    """Download wheels (default: the sidecar's) for the lane's Python and this machine's architecture."""
    pins = pins or wheel_pins()
    cache = dest
    cache.mkdir(parents=True, exist_ok=True)
    arch = platform.machine()
    abi = "cp" + python_version.replace(".", "")
    cmd = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:",
        "--python-version", python_version, "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none",
        "--platform", f"manylinux2014_{arch}",
        # pip takes only the platforms named: every glibc from 2.17 to 2.28 (a configured base image
        # may be older than Osprey's own Debian base).
        *(arg for minor in range(17, 29) for arg in ("--platform", f"manylinux_2_{minor}_{arch}")),
        "--platform", "any", "--dest", str(cache), *pins,
    ]
    # What an earlier build downloaded is enough when nothing changed, even offline.
    offline = subprocess.run(cmd + ["--no-index", "--find-links", str(cache)], capture_output=True, text=True)
    if offline.returncode == 0:
        return sorted(cache.glob("*.whl"))
    progress(f"downloading wheels for Python {python_version} ({', '.join(pins)}) ...")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SandboxError("downloading the lane's Python wheels failed:\n" + (proc.stderr or proc.stdout).strip()[-2000:])
    # pip resolved the pins' own dependencies too (e.g. typing_extensions): take them all.
    return sorted(cache.glob("*.whl"))


def cached_wheels(home: Path | None, python_version: str, pins: list[str], progress: Progress = _quiet) -> list[Path]:
    """Wheels for `pins`, downloaded once into `$OSPREY_HOME/cache/wheels/`."""
    digest = hashlib.sha256("\n".join(pins).encode()).hexdigest()[:12]
    cache = (home or Path.home() / ".osprey") / "cache" / "wheels" / f"py{python_version}-{platform.machine()}-{digest}"
    return fetch_wheels(python_version, cache, progress, pins)


def _build_context(context: Path, python_version: str, home: Path | None, progress: Progress, *, broker: bool = False) -> list[Path]:
    """Add to a build context holding the Dockerfile: the sidecar, its wheels (and the broker's)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(sidecar_dir(), context / "sidecar" / "osprey_sidecar", ignore=ignore)
    wheels = cached_wheels(home, python_version, wheel_pins(), progress)
    (context / "wheels").mkdir()
    for wheel in wheels:
        shutil.copy2(wheel, context / "wheels" / wheel.name)
    if broker:
        shutil.copytree(_host_dir(), context / "host" / "osprey", ignore=ignore)
        (context / "examples" / "demo").mkdir(parents=True)
        shutil.copy2(repo_file(*DEMO_SESSION), context / "examples" / "demo" / DEMO_SESSION[-1])
        (context / "broker-wheels").mkdir()
        for wheel in cached_wheels(home, python_version, broker_pins(), progress):
            shutil.copy2(wheel, context / "broker-wheels" / wheel.name)
    return wheels


def _stream_build(client: Any, progress: Progress, cancel: threading.Event | None = None, **kwargs: Any) -> None:
    import docker

    tail: deque[str] = deque(maxlen=15)
    try:
        for chunk in client.api.build(decode=True, rm=True, forcerm=True, **kwargs):
            if cancel is not None and cancel.is_set():
                raise SandboxError("building the lane image was cancelled")
            if "error" in chunk:
                raise SandboxError("the lane image build failed: " + str(chunk["error"]).strip() + ("\n" + "\n".join(tail) if tail else ""))
            text = str(chunk.get("stream", "")).rstrip()
            if text:
                tail.append(text)
                progress(text)
    except docker.errors.DockerException as exc:
        raise SandboxError(f"the lane image build failed: {_short(exc)}") from None


def image_tag(client: Any, configured_base: str | None, progress: Progress = _quiet, cancel: threading.Event | None = None) -> tuple[str, str]:
    """(lane tag, base image) for the current recipe, building the base if it is missing."""
    base = resolve_base(client, configured_base, progress, cancel)
    base_id = client.images.get(base).id
    return f"{LANE_REPOSITORY}:{recipe_hash(base_id)}", base


def ensure_image(client: Any, configured_base: str | None = None, *, force: bool = False, progress: Progress = _quiet, home: Path | None = None, cancel: threading.Event | None = None) -> str:
    """The lane image for this recipe: reused when its tag exists, built otherwise; recorded in
    `home` for later lane starts (`known_lane_image`).

    Setting `cancel` (from another thread) stops a build that is under way."""
    tag, base = image_tag(client, configured_base, progress, cancel)
    if not force and image_exists(client, tag):
        remember_lane_image(home, recipe_fingerprint(configured_base, engine_key()), tag)
        return tag
    with tempfile.TemporaryDirectory(prefix="osprey-lane-build-") as tmp:
        context = Path(tmp)
        shutil.copy2(repo_file("Dockerfile"), context / "Dockerfile")
        progress(f"building the lane image {tag} on {base} ...")
        tools_tag = f"{tag}-tools-{os.getpid()}"  # per build, so concurrent builds cannot remove each other's
        # The tools stage tells which Python the lane has, and so which wheels it needs.
        _stream_build(client, progress, cancel, path=str(context), tag=tools_tag, target="tools", buildargs={"BASE_IMAGE": base})
        python_version = _python_version(client, tools_tag)
        wheels = _build_context(context, python_version, home, progress)
        labels = {
            "osprey.lane-image": "1",
            "osprey.recipe": tag.split(":", 1)[1],
            "osprey.base": base,
            "osprey.wheels": json.dumps(sorted(w.name for w in wheels)),
        }
        _stream_build(client, progress, cancel, path=str(context), tag=tag, target="lane", buildargs={"BASE_IMAGE": base}, labels=labels)
        try:
            client.images.remove(tools_tag, noprune=True)
        except Exception:  # noqa: BLE001 - only a tag to tidy away
            pass
    progress(f"built {tag}")
    # Later lane starts take this image without asking the engine while the recipe's files stay as they are.
    remember_lane_image(home, recipe_fingerprint(configured_base, engine_key()), tag)
    return tag


def prune_images(client: Any, configured_base: str | None = None) -> list[str]:
    """Remove lane images other than the current recipe's that no container uses."""
    import docker

    current = None
    if image_exists(client, configured_base or BASE_TAG):
        current, _ = image_tag(client, configured_base)
    in_use = {c.image.id for c in client.containers.list(all=True)}
    removed = []
    for image in client.images.list(name=LANE_REPOSITORY):
        tags = [t for t in image.tags if t.startswith(LANE_REPOSITORY + ":")]
        if current in tags or image.id in in_use:
            continue
        for tag in tags:
            try:
                client.images.remove(tag)
                removed.append(tag)
            except docker.errors.APIError:
                pass
    return removed


BROKER_REPOSITORY = "osprey-broker"


def broker_pins() -> list[str]:
    """`osprey`'s own runtime dependencies at the host's versions."""
    import re

    pins = []
    for requirement in importlib.metadata.requires("osprey") or []:
        if "extra ==" in requirement:
            continue
        name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
        pins.append(f"{name}=={importlib.metadata.version(name)}")
    return pins


def _host_dir() -> Path:
    """The `osprey` package's folder (this module lives in its `toolservice` package)."""
    return Path(__file__).resolve().parents[1]


def _host_files() -> list[Path]:
    root = _host_dir()
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def ensure_broker_image(client: Any, lane_tag: str, *, force: bool = False, progress: Progress = _quiet, home: Path | None = None) -> str:
    """The headless broker image compose.yaml runs: `osprey` on top of the lane image."""
    h = hashlib.sha256(f"broker {RECIPE_VERSION}\n{lane_tag}\n".encode() + "\n".join(broker_pins()).encode())
    _hash_files(h, _host_dir(), _host_files())  # the broker's code is part of what the tag names
    h.update(repo_file(*DEMO_SESSION).read_bytes())
    tag = f"{BROKER_REPOSITORY}:{h.hexdigest()[:16]}"
    if not force and image_exists(client, tag):
        return tag
    base = client.images.get(lane_tag).labels.get("osprey.base", BASE_TAG)
    python_version = _python_version(client, lane_tag)
    with tempfile.TemporaryDirectory(prefix="osprey-broker-build-") as tmp:
        context = Path(tmp)
        shutil.copy2(repo_file("Dockerfile"), context / "Dockerfile")
        _build_context(context, python_version, home, progress, broker=True)
        progress(f"building the broker image {tag} ...")
        _stream_build(client, progress, path=str(context), tag=tag, target="broker", buildargs={"BASE_IMAGE": base}, labels={"osprey.broker-image": "1"})
    return tag


COPY_CHUNK = 1024 * 1024
COPY_PROGRESS_EVERY = 32 * 1024 * 1024


def copy_image(source: Any, target: Any, tag: str, *, progress: Progress = _quiet, what: str = "the lane image") -> bool:
    """Copy the image `tag` from the `source` engine to `target` (the engine's save streamed into
    the other's load, nothing on disk) unless `target` has it already; True when it copied. The
    tag names the image's content, so an image of that tag is the same image. `what` names it in messages."""
    import docker

    if image_exists(target, tag):
        return False
    try:
        size = int(source.api.inspect_image(tag).get("Size") or 0)
    except docker.errors.ImageNotFound:
        raise SandboxError(f"{what} {tag} is not on this machine's engine, so it cannot be copied; run `osprey sandbox build`") from None
    total = f" of about {size / 1e6:,.0f} MB" if size else ""
    progress(f"copying {what} {tag} to the engine{total} (once: later lanes reuse it) ...")
    sent = [0]

    def chunks() -> Iterator[bytes]:
        shown = 0
        for chunk in source.api.get_image(tag, chunk_size=COPY_CHUNK):
            sent[0] += len(chunk)
            if sent[0] - shown >= COPY_PROGRESS_EVERY:
                shown = sent[0]
                progress(f"copying {what}: {sent[0] / 1e6:,.0f} MB{total}")
            yield chunk

    try:
        for status in target.api.load_image(chunks()):
            if isinstance(status, dict) and status.get("error"):
                raise SandboxError(f"copying {what} to the engine failed: {str(status['error'])[:300]}")
    except docker.errors.DockerException as exc:
        raise SandboxError(f"copying {what} to the engine failed: {_short(exc)}") from None
    if not image_exists(target, tag):
        raise SandboxError(f"the engine did not keep {what} {tag} it was sent")
    progress(f"copied {what} ({sent[0] / 1e6:,.0f} MB)")
    return True


def registry_ref(registry: str, tag: str) -> str:
    """Where the image `tag` (REPOSITORY:HASH) is kept in `registry` (HOST[:PORT]/PATH)."""
    return f"{registry.rstrip('/')}/{tag}"


PUSHED_CACHE = "pushed-images.json"
_PINNED = re.compile(r"[a-z0-9][a-z0-9.:/_-]{0,255}@sha256:[0-9a-f]{64}")


def pushed_image(home: Path | None, ref: str) -> str | None:
    """The reference by digest this machine pushed the image `ref` (`REGISTRY/REPOSITORY:HASH`)
    as, if it did."""
    pinned = _read_cache(_cache_file(home, PUSHED_CACHE)).get(ref)
    return pinned if isinstance(pinned, str) and _PINNED.fullmatch(pinned) and pinned.startswith(ref.rpartition(":")[0] + "@") else None


def push_image(client: Any, tag: str, registry: str, *, progress: Progress = _quiet, home: Path | None = None) -> str:
    """Push the image `tag` from the engine `client` to `registry`; its reference by digest
    (`REGISTRY/REPOSITORY@sha256:...`), which names exactly these bytes, recorded in `home` for
    this machine's later pulls (`pull_by_digest`)."""
    import docker

    repository, _, version = registry_ref(registry, tag).rpartition(":")
    progress(f"pushing {tag} to {repository} ...")
    digest = None
    try:
        client.api.tag(tag, repository, version)
        for status in client.api.push(repository, tag=version, stream=True, decode=True):
            if isinstance(status, dict) and status.get("error"):
                raise SandboxError(f"pushing {tag} to {registry} failed: {str(status['error'])[:300]}")
            if isinstance(status, dict):
                digest = (status.get("aux") or {}).get("Digest") or digest
    except docker.errors.DockerException as exc:
        raise SandboxError(f"pushing {tag} to {registry} failed: {_short(exc)}") from None
    finally:
        with suppress(docker.errors.DockerException):
            client.api.remove_image(f"{repository}:{version}")  # the name it was pushed by; `tag` keeps the image
    if not isinstance(digest, str) or not digest.startswith("sha256:"):
        raise SandboxError(f"the registry {registry} did not say the digest of {tag} it was sent")
    _update_cache(_cache_file(home, PUSHED_CACHE), f"{repository}:{version}", f"{repository}@{digest}")
    return f"{repository}@{digest}"


def pull_by_digest(client: Any, tag: str, registry: str, *, expected_id: str | None = None, home: Path | None = None,
                   progress: Progress = _quiet) -> bool:
    """Put the image `tag` on the engine `client` from `registry`, pulled by digest (the engine
    checks the bytes against it) and tagged `tag`. The digest is the one this machine pushed
    (`push_image`), else the one the registry names for `tag`, whose image must then have the
    id `expected_id` (of the image built here): no one who can push to the registry chooses what
    runs the tools. False, with a message, when that cannot be done (the caller copies instead)."""
    import docker

    repository, _, version = registry_ref(registry, tag).rpartition(":")
    pinned = pushed_image(home, f"{repository}:{version}")
    if pinned is None:
        if expected_id is None:
            progress(f"the lane image is not pulled from {registry}: this machine did not push it and has not built it to check it against")
            return False
        try:
            digest = client.api.inspect_distribution(f"{repository}:{version}")["Descriptor"]["digest"]
        except (docker.errors.DockerException, KeyError, TypeError) as exc:
            progress(f"the registry {registry} has no {tag} ({_short(exc)}); `osprey sandbox build --push` puts it there")
            return False
        pinned = f"{repository}@{digest}"
    progress(f"pulling the lane image {pinned} ...")
    try:
        for status in client.api.pull(repository, tag=pinned.rpartition("@")[2], stream=True, decode=True):
            if isinstance(status, dict) and status.get("error"):
                raise SandboxError(str(status["error"])[:300])
        pulled = client.api.inspect_image(pinned)["Id"]
        if expected_id is not None and pulled != expected_id:
            with suppress(docker.errors.DockerException):
                client.api.remove_image(pinned)
            raise SandboxError(f"it is not the image built here (id {pulled[:19]}, expected {expected_id[:19]})")
        client.api.tag(pinned, *tag.split(":", 1))
    except (docker.errors.DockerException, SandboxError) as exc:
        progress(f"pulling {pinned} failed: {exc if isinstance(exc, SandboxError) else _short(exc)}")
        return False
    return image_exists(client, tag)
