"""`osprey sandbox build|status|prune|recover`: lane images and lanes. The work happens in
toolservice/ (images.py; engines.py, which names the engine; lanes.py and remote_lanes.py, whose
backends reap; `remote_lanes.recover_lanes`)."""

from __future__ import annotations

import sys

import click


def _settings(base_image: str | None = None):
    from ..config import load_settings

    flags = {"sandbox": {"base_image": base_image}} if base_image else {}
    settings = load_settings(None, flags, need_provider=False)
    for warning in settings.warnings:
        click.echo(f"osprey: warning: {warning}", err=True)
    return settings


def _fail(exc: Exception) -> None:
    click.echo(f"osprey: error: {exc}", err=True)
    sys.exit(1)


@click.group()
def sandbox() -> None:
    """Sandbox lanes: Docker containers that run the ToolService with only the workspace in sight."""


@sandbox.command()
@click.option("--force", is_flag=True, help="Rebuild even when an image for this recipe exists.")
@click.option("--base-image", help="Build on this image instead of [sandbox] base_image (Debian- or Ubuntu-based).")
@click.option("--quiet", "-q", is_flag=True, help="Print only the image tag.")
@click.option("--compose-env", is_flag=True, help="Also build the broker image; print both tags as an env file for compose.yaml.")
@click.option("--push", is_flag=True, help="Also push the lane image to [sandbox] registry (where lanes on other machines' engines "
                                           "pull it from, by digest) and print its reference by digest.")
def build(force: bool, base_image: str | None, quiet: bool, compose_env: bool, push: bool) -> None:
    """Build the lane image (and, once, its Debian base) unless it is already there, on the engine
    lanes run on ([sandbox] engine, DOCKER_CONTEXT, DOCKER_HOST, else this machine's). An engine
    on another machine gets the images copied from this machine's engine, where one runs (as a
    lane start copies them), else builds them itself."""
    import os

    from ..errors import OspreyError, SandboxError
    from ..toolservice.engines import local_client, open_engine
    from ..toolservice.images import copy_image, ensure_broker_image, ensure_image, push_image

    pushed = None
    try:
        settings = _settings(base_image)
        if push and not settings.sandbox.registry:
            raise SandboxError("--push needs a registry: set [sandbox] registry = \"HOST[:PORT][/PATH]\" in your config.toml")
        client, engine = open_engine(settings.sandbox.engine, os.environ)
        progress = (lambda _: None) if quiet else (lambda line: click.echo(f"  {line}", err=True))
        builder = client
        if not engine.local:
            try:
                builder = local_client()
            except SandboxError:
                progress("this machine has no Docker engine: the images are built on the remote engine")
        tag = ensure_image(builder, settings.sandbox.base_image, force=force, progress=progress, home=settings.home)
        broker = ensure_broker_image(builder, tag, force=force, progress=progress, home=settings.home) if compose_env else None
        if push:
            assert settings.sandbox.registry is not None
            pushed = push_image(builder, tag, settings.sandbox.registry, progress=progress, home=settings.home)
        if builder is not client:
            copy_image(builder, client, tag, progress=progress)
            if broker:
                copy_image(builder, client, broker, progress=progress, what="the broker image")
    except OspreyError as exc:
        _fail(exc)
    if pushed:
        click.echo(f"pushed {pushed}", err=True)
    if broker:
        click.echo(f"OSPREY_LANE_IMAGE={tag}\nOSPREY_BROKER_IMAGE={broker}")
    else:
        click.echo(tag)


@sandbox.command()
def status() -> None:
    """Name the engine lanes run on, list its lanes (live and orphaned), and say whether the
    current lane image is built."""
    import os

    from ..errors import OspreyError
    from ..toolservice.engines import open_engine
    from ..toolservice.images import image_tag
    from ..toolservice.lanes import list_lanes

    try:
        settings = _settings()
        client, engine = open_engine(settings.sandbox.engine, os.environ)
        lanes = list_lanes(client)
        if not engine.local:
            image = "copied from this machine's engine when a lane first needs it"
        else:
            try:
                tag, base = image_tag(client, settings.sandbox.base_image) if _have_base(client, settings) else ("(base image not built yet)", "")
                client.images.get(tag)
                image = f"{tag} (built)"
            except Exception:  # noqa: BLE001 - only for display
                image = f"{tag} (not built; `osprey sandbox build` or the first --sandbox run builds it)"
    except OspreyError as exc:
        _fail(exc)
    click.echo(f"engine: {engine.described}")
    click.echo(f"lane image: {image}")
    if not lanes:
        click.echo("no lanes")
        return
    width = max(28, *(len(lane["name"]) for lane in lanes))
    click.echo(f"{'NAME':{width}} {'STATUS':10} {'OWNER':22} WORKSPACE")
    for lane in lanes:
        if lane["gateway"]:
            owner, workspace = "(gateway)", f"routes calls to {'this' if lane['owner_alive'] is not None else 'another'} machine's lanes"
        elif lane["owner_alive"] is None:
            owner, workspace = f"{lane['owner_pid']} (host {lane['owner_host'][:8]})", lane["workspace"]
        else:
            owner, workspace = f"{lane['owner_pid']} ({'alive' if lane['owner_alive'] else 'gone'})", lane["workspace"]
        click.echo(f"{lane['name']:{width}} {lane['status']:10} {owner:22} {workspace}")


def _have_base(client, settings) -> bool:
    from ..toolservice.images import BASE_TAG, image_exists

    return image_exists(client, settings.sandbox.base_image or BASE_TAG)


@sandbox.command()
@click.option("--images", is_flag=True, help="Also remove lane images other than the current one.")
def prune(images: bool) -> None:
    """Remove lanes whose owner process is gone (each start does this too); on another machine's
    engine, only this machine's lanes (their workspace volumes stay for `osprey sandbox recover`)."""
    import asyncio
    import os

    from ..errors import OspreyError
    from ..toolservice.engines import open_engine
    from ..toolservice.images import prune_images
    from ..toolservice.lanes import LocalDockerBackend
    from ..toolservice.remote_lanes import RemoteDockerBackend

    try:
        settings = _settings()
        client, engine = open_engine(settings.sandbox.engine, os.environ)
        backend = LocalDockerBackend(client) if engine.local else RemoteDockerBackend(engine.target, client=client, engine=engine)
        removed = asyncio.run(backend.reap())
        if isinstance(backend, RemoteDockerBackend) and backend.prune_gateway():
            removed.append("the lanes' gateway (no lane used it)")
        dropped = prune_images(client, settings.sandbox.base_image) if images else []
    except OspreyError as exc:
        _fail(exc)
    click.echo(f"removed {len(removed)} orphaned lane{'s' if len(removed) != 1 else ''}" + (": " + ", ".join(removed) if removed else ""))
    if images:
        click.echo(f"removed {len(dropped)} old lane image{'s' if len(dropped) != 1 else ''}" + (": " + ", ".join(dropped) if dropped else ""))


@sandbox.command()
def recover() -> None:
    """Bring back what lanes on another machine changed, where their session ended without doing it
    (a broker that crashed or was killed leaves the lane's workspace volume on the engine)."""
    from ..config import size_bytes
    from ..errors import OspreyError
    from ..toolservice.remote_lanes import recover_lanes
    from ..toolservice.workspace_sync import SyncLimits

    try:
        settings = _settings()
        limits = SyncLimits(max_files=settings.sandbox.sync_max_files, max_bytes=size_bytes(settings.sandbox.sync_max_bytes))
        lines = recover_lanes(settings.home, limits)
    except OspreyError as exc:
        _fail(exc)
    if not lines:
        click.echo("no lane left anything to bring back")
    for line in lines:
        click.echo(line)
