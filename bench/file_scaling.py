"""How read_file and write_file scale with file size, through the local dispatcher, floors beside.

read_file's default window (2,000 lines) of a 1, 10, 50 and 200 MB file against `head -n 2000`
of the same file: wall time (interleaved call by call) and peak RSS (the dispatcher's VmHWM,
a fresh dispatcher per size, against head's own ru_maxrss). Goal: the 200 MB figures within 2x
of the 1 MB ones.

write_file of 1, 10 and 50 MB against writing the same bytes to a file and fsyncing it
(interleaved). Goal: within 2x of the floor.

16 concurrent calls: read_file's default window of the largest file against 16 `head`
processes at once, and write_file of 1 MB to 16 paths against 16 threads writing and fsyncing.

    python bench/file_scaling.py [--sizes 1,10,50,200] [--concurrent-mb 200] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import figure, median  # noqa: E402

from osprey.toolservice.homes import LocalDispatcher, open_tool_service  # noqa: E402

MB = 1024 * 1024
CONCURRENT = 16


def make_text_file(path: Path, size: int) -> None:
    """`size` bytes of numbered-looking source lines, written as repeated 1 MB blocks."""
    lines = []
    total = 0
    i = 0
    while total < MB:
        line = f"    value_{i:06d} = compute(alpha, beta, gamma)  # a line of about seventy bytes\n"
        lines.append(line)
        total += len(line)
        i += 1
    block = "".join(lines).encode()[:MB]
    block = block[: block.rindex(b"\n") + 1]
    with open(path, "wb") as fh:
        written = 0
        while written < size:
            fh.write(block)
            written += len(block)
        fh.flush()
        os.fsync(fh.fileno())  # its writeback would otherwise run during the timed calls


def vm_hwm_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for {pid}")


def head_run(path: Path) -> float:
    """Wall time of one `head -n 2000 path` (posix_spawn: no copy of this process to fork)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        start = time.perf_counter()
        pid = os.posix_spawnp("head", ["head", "-n", "2000", str(path)], os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
        os.waitpid(pid, 0)
        return time.perf_counter() - start
    finally:
        os.close(devnull)


def head_rss_kb(path: Path) -> int:
    """Peak RSS (KB) of `head -n 2000 path`, read from /proc while head is blocked writing its
    output into a pipe nobody reads yet (a child's ru_maxrss would count the memory of this
    process it was forked from)."""
    head = shutil.which("head")
    proc = subprocess.Popen([head or "head", "-n", "2000", str(path)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if os.readlink(f"/proc/{proc.pid}/exe") == os.path.realpath(head or ""):
                    break
            except OSError:
                pass
            time.sleep(0.001)
        time.sleep(0.05)  # its output (about 140 KB) fills the 64 KB pipe: it waits there
        rss = vm_hwm_kb(proc.pid)
    finally:
        proc.stdout.read()
        proc.wait()
    return rss


def write_fsync(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def dispatcher_pid(service: object) -> int:
    assert isinstance(service, LocalDispatcher) and service.proc is not None
    return service.proc.pid


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.2f} ms"


async def bench_reads(tmp: Path, sizes: list[int], rounds: int) -> None:
    print(f"read_file default window (2000 lines), {rounds} rounds interleaved with head -n 2000; medians")
    print(f"{'size':>7} | {'read_file':>11} {'head':>11} {'ratio':>6} | {'dispatcher peak RSS':>20} {'growth':>10} {'head RSS':>9} | time and growth vs the first size")
    first: tuple[float, int] | None = None
    for size_mb in sizes:
        path = tmp / f"big_{size_mb}.txt"
        make_text_file(path, size_mb * MB)
        async with open_tool_service([str(tmp)]) as service:
            client = service.client
            pid = dispatcher_pid(service)
            await client.read_file("small.txt")  # the first call's one-time costs stay out of the peak
            base = vm_hwm_kb(pid)
            await client.read_file(path.name)  # warm up, alike for both
            head_run(path)
            ours, floor = [], []
            for _ in range(rounds):
                start = time.perf_counter()
                result = await client.read_file(path.name)
                ours.append(time.perf_counter() - start)
                assert result.end_line == 2000, result.end_line
                floor.append(head_run(path))
            peak = vm_hwm_kb(pid)
        head_rss = head_rss_kb(path)
        path.unlink()
        o, f = median(ours), median(floor)
        first = first or (o, peak - base)
        print(
            f"{size_mb:>4} MB | {fmt_ms(o)} {fmt_ms(f)} {o / f:5.1f}x | {peak / 1024:17.1f} MB {(peak - base) / 1024:7.1f} MB {head_rss / 1024:6.1f} MB"
            f" | {o / first[0]:4.2f}x {max(peak - base, 1) / max(first[1], 1):6.2f}x"
        )
        figure(f"read_file window of a {size_mb} MB file against head -n 2000", o / f, "x", floor=1.0)


async def bench_writes(tmp: Path, sizes: list[int], rounds: int) -> None:
    print(f"\nwrite_file, {rounds} rounds interleaved with write + fsync of the same bytes; medians")
    print(f"{'size':>7} | {'write_file':>11} {'write+fsync':>11} {'ratio':>6}")
    async with open_tool_service([str(tmp)]) as service:
        client = service.client
        for size_mb in sizes:
            content = ("x" * 79 + "\n") * (size_mb * MB // 80)
            data = content.encode()
            ours, floor = [], []
            for _ in range(rounds):
                start = time.perf_counter()
                result = await client.write_file(f"out_{size_mb}.txt", content)
                ours.append(time.perf_counter() - start)
                assert result.bytes_written == len(data)
                start = time.perf_counter()
                write_fsync(tmp / f"floor_{size_mb}.txt", data)
                floor.append(time.perf_counter() - start)
            (tmp / f"out_{size_mb}.txt").unlink()
            (tmp / f"floor_{size_mb}.txt").unlink()
            o, f = median(ours), median(floor)
            print(f"{size_mb:>4} MB | {fmt_ms(o)} {fmt_ms(f)} {o / f:5.1f}x")
            figure(f"write_file {size_mb} MB against write + fsync", o / f, "x", floor=1.0)


async def head_many(path: Path) -> None:
    procs = [await asyncio.create_subprocess_exec("head", "-n", "2000", str(path), stdout=subprocess.DEVNULL) for _ in range(CONCURRENT)]
    await asyncio.gather(*(p.wait() for p in procs))


async def bench_concurrent(tmp: Path, size_mb: int, rounds: int) -> None:
    print(f"\n{CONCURRENT} concurrent calls, {rounds} rounds interleaved; medians of the wall time of all {CONCURRENT}")
    path = tmp / f"big_{size_mb}.txt"
    make_text_file(path, size_mb * MB)
    content = ("y" * 79 + "\n") * (MB // 80)
    data = content.encode()
    async with open_tool_service([str(tmp)]) as service:
        client = service.client
        pid = dispatcher_pid(service)
        await client.read_file("small.txt")
        base = vm_hwm_kb(pid)
        reads, heads = [], []
        for _ in range(rounds):
            start = time.perf_counter()
            results = await asyncio.gather(*(client.read_file(path.name) for _ in range(CONCURRENT)))
            reads.append(time.perf_counter() - start)
            assert all(r.end_line == 2000 for r in results)
            start = time.perf_counter()
            await head_many(path)
            heads.append(time.perf_counter() - start)
        peak = vm_hwm_kb(pid)
        writes, floors = [], []
        with ThreadPoolExecutor(CONCURRENT) as pool:
            loop = asyncio.get_running_loop()
            for _ in range(rounds):
                start = time.perf_counter()
                await asyncio.gather(*(client.write_file(f"c_{i}.txt", content) for i in range(CONCURRENT)))
                writes.append(time.perf_counter() - start)
                start = time.perf_counter()
                await asyncio.gather(*(loop.run_in_executor(pool, write_fsync, tmp / f"f_{i}.txt", data) for i in range(CONCURRENT)))
                floors.append(time.perf_counter() - start)
    path.unlink()
    r, h = median(reads), median(heads)
    print(f"read_file window of {size_mb} MB x{CONCURRENT}: {fmt_ms(r)}   {CONCURRENT} x head -n 2000: {fmt_ms(h)}  ratio {r / h:5.1f}x   dispatcher peak RSS {peak / 1024:.1f} MB (growth {(peak - base) / 1024:.1f} MB)")
    figure(f"read_file window of {size_mb} MB x{CONCURRENT} at once", r * 1e3, "ms", floor=h * 1e3)
    w, f = median(writes), median(floors)
    print(f"write_file 1 MB x{CONCURRENT}:       {fmt_ms(w)}   {CONCURRENT} x write+fsync:    {fmt_ms(f)}  ratio {w / f:5.1f}x")
    figure(f"write_file 1 MB x{CONCURRENT} at once against write + fsync", w / f, "x", floor=1.0)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,50,200", help="read_file sizes in MB")
    parser.add_argument("--write-sizes", default="1,10,50", help="write_file sizes in MB")
    parser.add_argument("--concurrent-mb", type=int, default=200, help="size of the file the concurrent reads read")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="osprey-file-scaling-") as name:
        tmp = Path(name)
        (tmp / "small.txt").write_text("a small file\n")
        await bench_reads(tmp, [int(s) for s in args.sizes.split(",")], args.rounds)
        await bench_writes(tmp, [int(s) for s in args.write_sizes.split(",")], args.rounds)
        await bench_concurrent(tmp, args.concurrent_mb, args.rounds)


if __name__ == "__main__":
    asyncio.run(main())
