"""Sandbox lane start-up against the engine's own create+start, like for like, and round trips.

- Lane ready: `LaneSupervisor.start()` (everything a session pays: the engine checks, the image
  check, the container, the sidecar answering its gRPC health check), against the floor: a
  container of the same image, with the same run options, created and started through the same
  Docker SDK (`create_container` + `start`, two API calls) whose process, started by the same
  entry method (tini, then python3), answers on a unix socket in the same bind-mounted
  directory. Rounds alternate lane and floor. Teardown (`close()`; `remove_container`) is timed
  apart. Goal (issue 8): lane ready p50 <= 1.5x the floor's.
- Also in the rotation, to split the gap: the same create+start of the lane's own container (its
  sidecar, its options) up to the sidecar's health answer, with none of Osprey's host-side
  steps: what the sidecar's own start-up costs over the floor's listener.
- `read_file` round trip through the lane versus through the local dispatcher. Goal: <= +1 ms p50.

`--rounds N` (default 12) scales the run (about 3 s a round on two cores).

`--timeline N` instead starts N lanes, each in a fresh process as `osprey agent --sandbox` does,
and prints where the time goes, step by step (median, min-max, over the N), beside what a fresh
process pays to import the docker SDK and make its client (which a lane start no longer does
once the image is known).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import figure, percentile  # noqa: E402

from osprey.config import SandboxSettings  # noqa: E402
from osprey.toolservice.homes import make_home, open_tool_service  # noqa: E402
from osprey.toolservice.images import docker_client, ensure_image  # noqa: E402
from osprey.toolservice.lanes import SOCKET_IN_LANE, SOCKET_NAME, lane_run_options, make_socket_dir, remove_socket_dir  # noqa: E402

CALLS = 2000
LISTENER = (
    "import socket\n"
    f"s = socket.socket(socket.AF_UNIX); s.bind('{SOCKET_IN_LANE}/{SOCKET_NAME}'); s.listen(8)\n"
    "while True:\n"
    "    c, _ = s.accept(); c.sendall(b'ok'); c.close()\n"
)


def floor_create_args(client: Any, image: str, workspace: str, name: str, socket_dir: Path) -> dict[str, Any]:
    """The lane's own run options, with the listener in place of the sidecar, as the SDK's
    low-level `create_container` takes them."""
    from docker.models.containers import _create_container_args

    options = lane_run_options(image, workspace, name, SandboxSettings(enabled=True), socket_dir)
    options.update(name=f"osprey-bench-floor-{os.getpid()}-{name}", labels={"osprey.bench": "lane_ready"},
                   entrypoint=["/usr/bin/tini", "--", "python3", "-I", "-S", "-c", LISTENER], command=None)
    return _create_container_args({"image": image, "version": client.api._version, **options})


def floor_once(client: Any, image: str, workspace: str, name: str) -> tuple[float, float]:
    """(seconds to a started container whose process answered, seconds to remove it)."""
    socket_dir, _ = make_socket_dir(workspace)
    path = str(socket_dir / SOCKET_NAME)
    container_id = None
    try:
        start = time.perf_counter()
        container_id = client.api.create_container(**floor_create_args(client, image, workspace, name, socket_dir))["Id"]
        client.api.start(container_id)
        while True:
            if os.path.exists(path):
                with socket.socket(socket.AF_UNIX) as s:
                    try:
                        s.connect(path)
                        if s.recv(2) == b"ok":
                            break
                    except OSError:
                        pass
            time.sleep(0.002)
        ready = time.perf_counter() - start
        start = time.perf_counter()
        client.api.remove_container(container_id, force=True)
        container_id = None
        return ready, time.perf_counter() - start
    finally:
        if container_id is not None:
            client.api.remove_container(container_id, force=True)
        remove_socket_dir(socket_dir)


async def sidecar_once(client: Any, image: str, workspace: str, name: str) -> float:
    """Seconds from create_container to the health answer of a bare lane container (no reaping,
    no image check, no lock-down); it is removed afterwards."""
    from docker.models.containers import _create_container_args

    from osprey.toolservice.client import Connection
    from osprey.toolservice.client import accepts_connections as _listening

    socket_dir, token = make_socket_dir(workspace)
    path = str(socket_dir / SOCKET_NAME)
    options = lane_run_options(image, workspace, name, SandboxSettings(enabled=True), socket_dir)
    options.update(name=f"osprey-bench-sidecar-{os.getpid()}-{name}", labels={"osprey.bench": "lane_ready"})
    args = _create_container_args({"image": image, "version": client.api._version, **options})
    connection = Connection(path, token=token)
    container_id = None
    try:
        start = time.perf_counter()
        container_id = (await asyncio.to_thread(client.api.create_container, **args))["Id"]
        await asyncio.to_thread(client.api.start, container_id)
        while not (_listening(path) and await connection.healthy(timeout=0.5)):
            await asyncio.sleep(0.002)
        return time.perf_counter() - start
    finally:
        await connection.close()
        if container_id is not None:
            await asyncio.to_thread(client.api.remove_container, container_id, force=True)
        remove_socket_dir(socket_dir)


async def lane_once(workspace: str, name: str) -> tuple[float, float]:
    """(seconds until the lane's sidecar answers its health check, seconds to close the lane)."""
    home = make_home([workspace], sandbox=SandboxSettings(enabled=True), session_id=name)
    start = time.perf_counter()
    try:
        await home.start()
        ready = time.perf_counter() - start
    finally:
        start = time.perf_counter()
        await home.close()
    return ready, time.perf_counter() - start


async def round_trips(workspace: str, sandbox: bool) -> list[float]:
    options = SandboxSettings(enabled=True) if sandbox else None
    async with open_tool_service([workspace], sandbox=options, session_id=f"bench-rt-{os.getpid()}") as service:
        samples = []
        for i in range(CALLS + 200):
            start = time.perf_counter()
            await service.client.read_file("small.txt")
            if i >= 200:
                samples.append(time.perf_counter() - start)
        return samples


def ms(samples: list[float], q: float) -> float:
    return percentile(samples, q) * 1e3


async def main(rounds: int) -> None:
    client = docker_client()
    image = ensure_image(client)
    with tempfile.TemporaryDirectory() as workspace:
        workspace = os.path.realpath(workspace)
        (Path(workspace) / "small.txt").write_text("".join(f"line {i}\n" for i in range(40)))
        tag = f"bench-{os.getpid()}"
        await lane_once(workspace, f"{tag}-warm")
        floor_once(client, image, workspace, f"{tag}-warm")
        lane: list[float] = []
        lane_down: list[float] = []
        floor: list[float] = []
        floor_down: list[float] = []
        sidecar: list[float] = []
        subjects = ["lane", "floor", "sidecar"]
        for r in range(rounds):
            for subject in subjects[r % 3:] + subjects[: r % 3]:
                if subject == "sidecar":
                    sidecar.append(await sidecar_once(client, image, workspace, f"{tag}-{r}"))
                elif subject == "lane":
                    ready, down = await lane_once(workspace, f"{tag}-{r}")
                    lane.append(ready)
                    lane_down.append(down)
                else:
                    ready, down = await asyncio.to_thread(floor_once, client, image, workspace, f"{tag}-{r}")
                    floor.append(ready)
                    floor_down.append(down)
        local = await round_trips(workspace, sandbox=False)
        through_lane = await round_trips(workspace, sandbox=True)
    print(f"image {image}; {rounds} interleaved rounds")
    print(f"floor: create_container+start, process answers: p50 {ms(floor, 50):6.0f} ms  p90 {ms(floor, 90):6.0f} ms")
    print(f"lane ready (sidecar answers health):           p50 {ms(lane, 50):6.0f} ms  p90 {ms(lane, 90):6.0f} ms"
          f"  ratio p50 {ms(lane, 50) / ms(floor, 50):.2f}  p90 {ms(lane, 90) / ms(floor, 90):.2f} (goal <= 1.5)")
    print(f"bare lane container, create+start to health:    p50 {ms(sidecar, 50):6.0f} ms  p90 {ms(sidecar, 90):6.0f} ms"
          f"  (sidecar start over the floor's listener: p50 +{ms(sidecar, 50) - ms(floor, 50):.0f} ms; Osprey's host side: p50 {ms(lane, 50) - ms(sidecar, 50):+.0f} ms)")
    print(f"teardown: floor remove_container p50 {ms(floor_down, 50):.0f} ms; lane close p50 {ms(lane_down, 50):.0f} ms"
          f" (ratio {ms(lane_down, 50) / ms(floor_down, 50):.2f})")
    both = [a + b for a, b in zip(lane, lane_down, strict=True)]
    both_floor = [a + b for a, b in zip(floor, floor_down, strict=True)]
    print(f"ready + teardown: lane p50 {ms(both, 50):.0f} ms, floor p50 {ms(both_floor, 50):.0f} ms (ratio {ms(both, 50) / ms(both_floor, 50):.2f})")
    l50, n50 = ms(local, 50), ms(through_lane, 50)
    print(f"read_file local dispatcher:    p50 {l50:.3f} ms  p99 {ms(local, 99):.3f} ms")
    print(f"read_file through the lane:    p50 {n50:.3f} ms  p99 {ms(through_lane, 99):.3f} ms  (+{n50 - l50:.3f} ms p50; goal <= +1 ms)")
    figure("lane ready against create+start of the same image, p50", ms(lane, 50) / ms(floor, 50), "x", floor=1.0)
    figure("lane ready, p50", ms(lane, 50), "ms", floor=ms(floor, 50))
    figure("read_file through the lane, added over the local dispatcher, p50", n50 - l50, "ms", floor=l50)


# One lane start in a fresh process, step by step: the same functions `LocalDockerBackend.provision`
# runs, each stamped (milliseconds since the process started, on stdout as `step ms`).
TIMELINE = """
import time
T0 = time.perf_counter()
def stamp(step):
    print(step, (time.perf_counter() - T0) * 1e3, flush=True)
import asyncio, os, sys
from osprey.config import SandboxSettings
from osprey.toolservice.backend import LaneRequest
from osprey.toolservice import lanes
from osprey.toolservice.client import Connection, accepts_connections
stamp("imports (lanes, config, client)")
api = lanes.engine_api()
request = LaneRequest(workspace=sys.argv[1], session_id=sys.argv[2], options=SandboxSettings(enabled=True), home=None)
image = lanes._known_image(None, None)
assert image is not None, "the lane image is not known yet: run a lane once"
stamp("image known (record of an earlier start)")
socket_dir, token = lanes.make_socket_dir(sys.argv[1])
options = lanes.lane_run_options(image, sys.argv[1], sys.argv[2], request.options, socket_dir)
config = lanes.create_config(image, options)
stamp("socket dir, token, run options")
cid = api.create_container(config, options["name"])
stamp("engine: create")
try:
    api.start(cid)
    stamp("engine: start")
    path = str(socket_dir / lanes.SOCKET_NAME)
    while not accepts_connections(path):
        time.sleep(0.002)
    stamp("sidecar listening (its Python start-up)")
    async def health():
        connection = Connection(path, token=token)
        while not await connection.healthy(timeout=0.5):
            await asyncio.sleep(0.002)
        stamp("gRPC health answered")
        await connection.close()
    asyncio.run(health())
finally:
    api.remove_container(cid)
    lanes.remove_socket_dir(socket_dir)
"""

SDK = """
import time
T0 = time.perf_counter()
import docker
print("import docker", (time.perf_counter() - T0) * 1e3)
client = docker.from_env(timeout=120)
client.ping()
print("docker client and ping", (time.perf_counter() - T0) * 1e3)
"""


def timeline(runs: int) -> None:
    import statistics
    import subprocess

    with tempfile.TemporaryDirectory() as workspace:
        workspace = os.path.realpath(workspace)
        asyncio.run(lane_once(workspace, f"bench-{os.getpid()}-warm"))  # the image is checked and recorded
        steps: dict[str, list[float]] = {}
        for n in range(runs):
            for script, args in ((TIMELINE, [workspace, f"bench-{os.getpid()}-t{n}"]), (SDK, [])):
                out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True).stdout
                before = 0.0
                for line in out.splitlines():
                    step, _, at = line.rpartition(" ")
                    steps.setdefault(step, []).append(float(at) - before)
                    before = float(at)
    print(f"a lane start in a fresh process, {runs} runs (load average {os.getloadavg()[0]:.2f}); each step's own time, ms:")
    for step, samples in steps.items():
        print(f"  {step:42} median {statistics.median(samples):6.1f}  ({min(samples):.1f}-{max(samples):.1f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--timeline", type=int, metavar="N", help="step-by-step timeline of N lane starts in fresh processes")
    parsed = parser.parse_args()
    if parsed.timeline:
        timeline(parsed.timeline)
    else:
        asyncio.run(main(parsed.rounds))
