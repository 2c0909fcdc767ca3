"""Lane image identity: a content hash of what goes in, reuse when present, a custom base."""

from __future__ import annotations

import docker
import pytest
from homes import require_docker

from osprey import lane_image
from osprey.lane_image import BASE_TAG, docker_client, ensure_image, image_tag, recipe_hash


def test_the_recipe_hash_follows_every_input(monkeypatch: pytest.MonkeyPatch) -> None:
    first = recipe_hash("sha256:aaa")
    assert recipe_hash("sha256:aaa") == first
    assert recipe_hash("sha256:bbb") != first  # the base image
    monkeypatch.setattr(lane_image, "wheel_pins", lambda: ["grpcio==0.0.1"])
    assert recipe_hash("sha256:aaa") != first  # the wheels


def test_the_recipe_hash_follows_the_sidecar_code(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    fake = tmp_path / "osprey_sidecar"
    fake.mkdir()
    (fake / "server.py").write_text("A = 1\n")
    monkeypatch.setattr(lane_image, "sidecar_dir", lambda: fake)
    before = recipe_hash("sha256:aaa")
    (fake / "server.py").write_text("A = 2\n")
    assert recipe_hash("sha256:aaa") != before
    (fake / "__pycache__").mkdir()
    (fake / "__pycache__" / "server.cpython-311.pyc").write_bytes(b"junk")
    assert recipe_hash("sha256:aaa") == recipe_hash("sha256:aaa")


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
