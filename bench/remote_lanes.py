"""Lanes on another machine's engine against lanes on this machine's, side by side in one run.

The remote engine is a second dockerd the script starts on loopback with mutual TLS and a data
root of its own (tests/remote_engine.py), reached as a remote one: the workspace is copied there
and back, the sidecar answers over TLS through the lane's gateway. Rounds alternate local and
remote. Each figure prints its floor beside it:

- lane ready, p50: `LaneSupervisor.start()` with the remote backend against the local lane's
  (goal: <= 1.5x);
- the first tool result with the model answering in 1 s: the home starts behind a 1 s wait (the
  model), then one `read_file`; what the start adds over the 1 s, local and remote (goal: hidden,
  as locally: about 0);
- a 1,000-file, 50 MB workspace there and back: `pack` plus the engine's archive upload, then
  the archive download read by `bring_back` (nothing changed), against `tar c | tar x` through
  the same engine calls on the same volume (goal: <= 2x);
- a `read_file` round trip over TLS through the gateway against the unix socket of a local lane,
  p50 (goal: <= +0.5 ms).

    .venv/bin/python bench/remote_lanes.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _stats import figure, median, percentile  # noqa: E402
from remote_engine import RemoteEngine  # noqa: E402

from osprey.config import SandboxSettings  # noqa: E402
from osprey.toolservice.engines import EngineTarget  # noqa: E402
from osprey.toolservice.homes import LaneSupervisor  # noqa: E402
from osprey.toolservice.remote_lanes import RemoteDockerBackend, _ChunkReader  # noqa: E402
from osprey.toolservice.workspace_sync import bring_back, pack  # noqa: E402

CALLS = 300
FILES = 1000
FILE_BYTES = 50 * 1024 * 1024 // FILES


def big_workspace(root: Path) -> Path:
    ws = root / "big"
    for i in range(FILES):
        path = ws / f"d{i % 20:02d}" / f"f{i:04d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(FILE_BYTES))
    return ws


async def lane_ready(make: object, workspace: Path, home: Path, n: int) -> tuple[float, LaneSupervisor]:
    supervisor: LaneSupervisor = make(f"bench-{os.getpid()}-{n}")  # type: ignore[operator]
    start = time.perf_counter()
    await supervisor.start()
    return time.perf_counter() - start, supervisor


async def first_result_behind_a_model(make: object, n: int) -> float:
    """What the home's start adds to the first tool result when the model takes 1 s."""
    supervisor: LaneSupervisor = make(f"bench-first-{os.getpid()}-{n}")  # type: ignore[operator]
    start = time.perf_counter()
    starting = asyncio.ensure_future(supervisor.start())
    await asyncio.sleep(1.0)  # the model thinking
    await starting
    await supervisor.client.read_file("a.txt")
    added = time.perf_counter() - start - 1.0
    await supervisor.close()
    return added


def transfer_osprey(backend: RemoteDockerBackend, ws: Path, image: str) -> float:
    """`pack` into the engine's archive upload, then the download read by `bring_back`."""
    client = backend.client()
    volume = client.volumes.create(labels={"osprey.bench": "1"}).name
    try:
        container = client.api.create_container(image, command=["true"], entrypoint=[], labels={"osprey.bench": "1"},
                                                host_config=client.api.create_host_config(mounts=[{"Type": "volume", "Source": volume, "Target": str(ws)}]))["Id"]
        try:
            start = time.perf_counter()
            with tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024) as packed:
                manifest = pack(ws, packed, prefix=str(ws).lstrip("/") + "/")
                packed.seek(0)
                client.api.put_archive(container, "/", packed)
            chunks, _ = client.api.get_archive(container, str(ws), chunk_size=1024 * 1024)
            report = bring_back(ws, manifest, io.BufferedReader(_ChunkReader(iter(chunks)), buffer_size=1024 * 1024), prefix=ws.name + "/")
            took = time.perf_counter() - start
            assert report.complete and not report.changed, report
            return took
        finally:
            client.api.remove_container(container, force=True)
    finally:
        client.api.remove_volume(volume, force=True)


def transfer_floor(backend: RemoteDockerBackend, ws: Path, image: str, scratch: Path) -> float:
    """`tar c` streamed into the same upload, the download streamed into `tar x`."""
    client = backend.client()
    volume = client.volumes.create(labels={"osprey.bench": "1"}).name
    try:
        container = client.api.create_container(image, command=["true"], entrypoint=[], labels={"osprey.bench": "1"},
                                                host_config=client.api.create_host_config(mounts=[{"Type": "volume", "Source": volume, "Target": "/w"}]))["Id"]
        try:
            out = scratch / "floor-out"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            start = time.perf_counter()
            tar = subprocess.Popen(["tar", "-c", "-C", str(ws), "."], stdout=subprocess.PIPE)
            assert tar.stdout is not None
            client.api.put_archive(container, "/w", tar.stdout)
            tar.wait()
            chunks, _ = client.api.get_archive(container, "/w", chunk_size=1024 * 1024)
            untar = subprocess.Popen(["tar", "-x", "-C", str(out)], stdin=subprocess.PIPE)
            assert untar.stdin is not None
            for chunk in chunks:
                untar.stdin.write(chunk)
            untar.stdin.close()
            untar.wait()
            return time.perf_counter() - start
        finally:
            client.api.remove_container(container, force=True)
    finally:
        client.api.remove_volume(volume, force=True)


async def round_trips(supervisor: LaneSupervisor) -> list[float]:
    client = supervisor.client
    for _ in range(20):
        await client.read_file("a.txt")
    samples = []
    for _ in range(CALLS):
        start = time.perf_counter()
        await client.read_file("a.txt")
        samples.append(time.perf_counter() - start)
    return samples


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="osprey-bench-remote-"))
    workspace = scratch / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n" * 200)
    home = scratch / "home"
    home.mkdir()
    big = big_workspace(scratch)
    options = SandboxSettings(enabled=True)
    with RemoteEngine() as engine:
        target = EngineTarget(host=engine.host, tls_verify=True, cert_path=str(engine.cert_dir), source="the benchmark's engine")
        remote = RemoteDockerBackend(target)

        def local_home(session: str) -> LaneSupervisor:
            return LaneSupervisor(str(workspace), session, options, home=home)

        def remote_home(session: str) -> LaneSupervisor:
            return LaneSupervisor(str(workspace), session, options, home=home, backend=remote)

        # Warm both: the image is copied to the new engine once, outside the figures.
        for make in (local_home, remote_home):
            _, warm = await lane_ready(make, workspace, home, 0)
            await warm.close()
        ready: dict[str, list[float]] = {"local": [], "remote": []}
        first: dict[str, list[float]] = {"local": [], "remote": []}
        calls: dict[str, list[float]] = {"local": [], "remote": []}
        moved: dict[str, list[float]] = {"osprey": [], "floor": []}
        image = await asyncio.to_thread(remote._image, options, home, lambda _: None)
        for n in range(1, args.rounds + 1):
            for name, make in (("local", local_home), ("remote", remote_home)) if n % 2 else (("remote", remote_home), ("local", local_home)):
                took, supervisor = await lane_ready(make, workspace, home, n)
                ready[name].append(took)
                calls[name] += await round_trips(supervisor)
                await supervisor.close()
                first[name].append(await first_result_behind_a_model(make, n))
            for name in ("osprey", "floor") if n % 2 else ("floor", "osprey"):
                took = await asyncio.to_thread(transfer_osprey, remote, big, image) if name == "osprey" else \
                    await asyncio.to_thread(transfer_floor, remote, big, image, scratch)
                moved[name].append(took)
            print(f"round {n}: ready local {ms(ready['local'][-1])} remote {ms(ready['remote'][-1])}; "
                  f"first result +{ms(first['local'][-1])} / +{ms(first['remote'][-1])}; "
                  f"50 MB there and back {ms(moved['osprey'][-1])} (floor {ms(moved['floor'][-1])}); load {os.getloadavg()[0]:.2f}", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)

    local_ready, remote_ready = median(ready["local"]), median(ready["remote"])
    print(f"lane ready p50: remote {ms(remote_ready)} against local {ms(local_ready)}: {remote_ready / local_ready:.2f}x (goal <= 1.5x)")
    figure("remote lane ready against a local lane, p50", remote_ready / local_ready, "x", floor=1.0)
    figure("remote lane ready, p50", remote_ready * 1000, "ms", floor=local_ready * 1000)
    print(f"first tool result, model at 1 s: added {ms(median(first['remote']))} remote, {ms(median(first['local']))} local (goal: hidden)")
    figure("first tool result with the model at 1 s, added, remote lane", median(first["remote"]) * 1000, "ms", floor=median(first["local"]) * 1000)
    ratio = median(moved["osprey"]) / median(moved["floor"])
    print(f"1,000 files, 50 MB there and back: {ms(median(moved['osprey']))} against tar c | tar x {ms(median(moved['floor']))}: {ratio:.2f}x (goal <= 2x)")
    figure("1,000-file 50 MB workspace there and back against tar c | tar x", ratio, "x", floor=1.0)
    added = percentile(calls["remote"], 50) - percentile(calls["local"], 50)
    print(f"read_file p50: over TLS {ms(percentile(calls['remote'], 50))}, unix socket {ms(percentile(calls['local'], 50))}: {added * 1000:+.2f} ms (goal <= +0.5 ms)")
    figure("read_file over TLS through the gateway, added over a local lane's socket, p50", added * 1000, "ms",
           floor=percentile(calls["local"], 50) * 1000)


if __name__ == "__main__":
    asyncio.run(main())
