"""A sandbox lane managed by testcontainers, for a project's own CI.

    from osprey.testing.lane import TestLane

    with TestLane("/path/to/workspace") as lane:
        subprocess.run(["osprey", "agent", *lane.agent_args(), "-C", lane.workspace, "fix the build"])

The container is the one `osprey agent --sandbox` provisions (same image, same hardening,
same labels, so `osprey sandbox prune` reaps it if the test process dies); testcontainers
starts and stops it, and `osprey agent --sandbox-socket` attaches to it.

Where the engine is on another machine (`DOCKER_HOST`, `DOCKER_CONTEXT` or `[sandbox] engine`
naming one), the lane is the one `osprey agent --sandbox` makes there (a copy of the workspace in
a volume, its sidecar behind TLS), `agent_args()` names a lane file (0600: it holds the lane's
client key and token) for `osprey agent --sandbox-lane`, which syncs the workspace with the lane
when it starts and ends, and `stop()` brings back what the lane changed before removing it.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from ..config import SandboxSettings
from ..errors import SandboxError

# Osprey reaps its lanes by their own labels, so testcontainers' reaper container (which
# would have to be pulled from a registry) is not needed.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


class TestLane:
    """A lane for `workspace` run by testcontainers; attach with `agent_args()`."""

    __test__ = False  # not a pytest test class

    def __init__(self, workspace: str | os.PathLike[str], options: SandboxSettings | None = None, *, home: Path | None = None) -> None:
        self.workspace = os.path.realpath(workspace)
        self.options = options or SandboxSettings(enabled=True)
        self.home = home
        self.session_id = f"test-{uuid.uuid4().hex[:10]}"
        self.container: Any = None
        self.socket_dir: Path | None = None
        self.remote: Any = None  # on another machine's engine: (backend, lane, the lane file's directory)

    @property
    def socket_path(self) -> str:
        assert self.socket_dir is not None, "the lane is not started"
        return str(self.socket_dir / "tools.sock")

    @property
    def token_file(self) -> str:
        """A host-only copy of the lane's token (0600, beside the socket dir, never in the lane)."""
        assert self.socket_dir is not None, "the lane is not started"
        return str(self.socket_dir.with_name(self.socket_dir.name + ".token"))

    @property
    def lane_file(self) -> str:
        """On another machine's engine: the file `osprey agent --sandbox-lane` attaches with."""
        assert self.remote is not None, "the lane is not started, or not on another machine's engine"
        return str(self.remote[2] / "lane.json")

    def agent_args(self) -> list[str]:
        """Options that make `osprey agent` use this lane."""
        if self.remote is not None:
            return ["--sandbox-lane", self.lane_file]
        return ["--sandbox-socket", self.socket_path, "--sandbox-token-file", self.token_file]

    def sync(self) -> Any:
        """On another machine's engine: bring back what the lane changed and send it what changed
        here (`workspace_sync.SyncReport`); None for a local lane, which works on the workspace."""
        if self.remote is None:
            return None
        backend, lane, _ = self.remote
        return backend._sync(lane)

    def start(self) -> TestLane:
        import asyncio

        from ..toolservice.homes import docker_backend
        from ..toolservice.remote_lanes import RemoteDockerBackend

        backend = asyncio.run(docker_backend(self.options))
        if isinstance(backend, RemoteDockerBackend):
            return self._start_remote(backend)
        return self._start_local()

    def _start_remote(self, backend: Any) -> TestLane:
        import asyncio
        import tempfile

        from ..toolservice.backend import LaneRequest
        from ..toolservice.remote_lanes import LaneAttachment

        async def up() -> Any:
            lane = await backend.provision(LaneRequest(workspace=self.workspace, session_id=self.session_id, options=self.options, home=self.home))
            await lane.connection.close()  # its channel belongs to this event loop; `osprey agent` makes its own
            return lane

        lane = asyncio.run(up())
        directory = Path(tempfile.mkdtemp(prefix="osprey-test-lane-"))
        self.remote = (backend, lane, directory)
        try:
            LaneAttachment.of(lane).write(self.lane_file)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_local(self) -> TestLane:
        from testcontainers.core.container import DockerContainer

        from ..toolservice.images import docker_client, ensure_image
        from ..toolservice.lanes import SOCKET_NAME, lane_run_options, lock_down, make_socket_dir, reap_orphans

        client = docker_client()
        reap_orphans(client)
        image = ensure_image(client, self.options.base_image, home=self.home)
        self.socket_dir, token = make_socket_dir(self.workspace)
        # `--sandbox-token-file` reads this copy; the lane's own is deleted once it answers.
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(token + "\n")
        opts = lane_run_options(image, self.workspace, self.session_id, self.options, self.socket_dir)
        container = DockerContainer(image, name=opts.pop("name"))
        container.with_command(opts.pop("command"))
        for key, value in opts.pop("environment").items():
            container.with_env(key, value)
        for host, mount in opts.pop("volumes").items():
            container.with_volume_mapping(host, mount["bind"], mount["mode"])
        for path, spec in opts.pop("tmpfs").items():
            container.with_tmpfs_mount(path, spec)  # stored as docker's mount options string
        container.with_kwargs(**opts)
        self.container = container
        try:
            container.start()
            wrapped = container.get_wrapped_container()
            wrapped.reload()
            # testcontainers may attach a container to the network it finds itself in; a lane
            # must keep the network mode it was given.
            mode = wrapped.attrs["HostConfig"]["NetworkMode"]
            if mode != opts["network_mode"]:
                raise SandboxError(f"the test lane got network mode {mode!r} instead of {opts['network_mode']!r}; set DOCKER_HOST so testcontainers does not pick a network")
            socket = self.socket_dir / SOCKET_NAME
            deadline = time.monotonic() + self.options.ready_timeout
            while not socket.exists():
                wrapped.reload()
                if wrapped.status in ("exited", "dead") or time.monotonic() > deadline:
                    logs = wrapped.logs(tail=20).decode("utf-8", "replace")
                    raise SandboxError(f"the test lane did not start; its last log lines:\n{logs}")
                time.sleep(0.01)
            lock_down(wrapped, self.socket_dir)
        except BaseException as exc:
            self.stop()
            if isinstance(exc, Exception) and not isinstance(exc, SandboxError):
                raise SandboxError(f"the test lane could not start: {exc}") from exc
            raise
        return self

    def stop(self) -> None:
        """Remove the lane; on another machine's engine, bring back what it changed first."""
        from ..toolservice.lanes import remove_socket_dir

        if self.remote is not None:
            import shutil

            (backend, lane, directory), self.remote = self.remote, None
            shutil.rmtree(directory, ignore_errors=True)
            backend._destroy(lane)

        if self.container is not None:
            container, self.container = self.container, None
            try:
                wrapped = container.get_wrapped_container()
                if wrapped is not None:
                    wrapped.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self.socket_dir is not None:
            Path(self.token_file).unlink(missing_ok=True)
            remove_socket_dir(self.socket_dir)

    def __enter__(self) -> TestLane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
