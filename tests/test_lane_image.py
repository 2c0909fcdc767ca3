"""Lane image identity: a content hash of what goes in, reuse when present, a custom base."""

from __future__ import annotations

import docker
import pytest
from helpers import require_docker

from osprey.toolservice import images as lane_image
from osprey.toolservice.images import BASE_TAG, docker_client, ensure_image, image_tag, recipe_hash


def test_the_recipe_hash_follows_every_input(monkeypatch: pytest.MonkeyPatch) -> None:
    first = recipe_hash("sha256:aaa")
    assert recipe_hash("sha256:aaa") == first
    assert recipe_hash("sha256:bbb") != first  # the base image
    monkeypatch.setattr(lane_image, "wheel_pins", lambda: ["grpcio==0.0.1"])
    assert recipe_hash("sha256:aaa") != first  # the wheels


def _fake_sidecar(parent, files: dict[str, str]):  # type: ignore[no-untyped-def]
    root = parent / "osprey_sidecar"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_recipe_hash_follows_the_sidecar_code(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    code = {"server.py": "A = 1\n", "wire.py": "B = 2\n", "_proto/tools_pb2.py": "C = 3\n"}
    original = _fake_sidecar(tmp_path / "one", code)
    twin = _fake_sidecar(tmp_path / "two", code)  # the same code in another place
    changed = _fake_sidecar(tmp_path / "three", {**code, "_proto/tools_pb2.py": "C = 4\n"})
    hashes = {}
    for name, root in (("original", original), ("twin", twin), ("changed", changed)):
        monkeypatch.setattr(lane_image, "sidecar_dir", lambda root=root: root)
        hashes[name] = recipe_hash("sha256:aaa")
    assert hashes["twin"] == hashes["original"], "where the sidecar lives must not matter, only what it holds"
    assert hashes["changed"] != hashes["original"], "one changed file must give a new image"
    # Bytecode caches are not part of the image's recipe.
    monkeypatch.setattr(lane_image, "sidecar_dir", lambda: original)
    (original / "__pycache__").mkdir()
    (original / "__pycache__" / "server.cpython-311.pyc").write_bytes(b"junk")
    assert recipe_hash("sha256:aaa") == hashes["original"]


def test_a_lane_builds_on_a_configured_base_image(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A user's own base (here: Osprey's base with an extra file, under another name) without a registry."""
    require_docker()
    client = docker_client()
    ensure_image(client)  # makes sure Osprey's own base exists
    custom = "osprey-test-custom-base:1"
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE_TAG}\nRUN echo toolchain > /etc/my-toolchain\n")
    client.images.build(path=str(tmp_path), tag=custom, rm=True)
    tag = None
    try:
        tag = ensure_image(client, custom)
        default_tag, _ = image_tag(client, None)
        assert tag != default_tag
        image = client.images.get(tag)
        assert image.labels["osprey.base"] == custom
        out = client.containers.run(tag, ["cat", "/etc/my-toolchain"], entrypoint=[], remove=True, network_mode="none")
        assert out.decode().strip() == "toolchain"
        assert ensure_image(client, custom) == tag  # reused, not rebuilt
    finally:
        for ref in (tag, custom):
            if ref is None:
                continue
            try:
                client.images.remove(ref, force=True)
            except docker.errors.DockerException:
                pass


def test_a_base_build_stops_when_cancelled(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C during the (long, quiet) debootstrap build ends it instead of waiting for it."""
    import os
    import shutil
    import threading
    import time

    from osprey.errors import SandboxError

    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        pytest.skip("build_base needs root and debootstrap")
    script = tmp_path / "build-base.sh"
    marker = tmp_path / "still-running"
    script.write_text(f"#!/bin/bash\necho starting\nsleep 30\ntouch {marker}\n")
    monkeypatch.setattr(lane_image, "repo_file", lambda *parts: script)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    start = time.monotonic()
    with pytest.raises(SandboxError, match="cancelled"):
        lane_image.build_base(None, tag="osprey-test-never:1", cancel=cancel)
    assert time.monotonic() - start < 10
    time.sleep(0.5)
    assert not marker.exists()
