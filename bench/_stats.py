"""Small helpers the benchmark scripts share."""

from __future__ import annotations

import compileall
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def time_command(cmd: Sequence[str], runs: int, **kwargs: object) -> list[float]:
    """Wall times (seconds) of `runs` runs of a command, output discarded."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, **kwargs)  # type: ignore[arg-type]
        times.append(time.perf_counter() - start)
    return times


def ensure_bytecode() -> None:
    """Compile Osprey's modules to bytecode, as an install has them. Where PYTHONDONTWRITEBYTECODE
    is set (it is on some machines), an editable checkout would otherwise compile every changed
    module from source at each start, and start-up figures would measure the compiler."""
    for package in ("host", "sidecar"):
        compileall.compile_dir(REPO / package, quiet=1)


FIGURE_PREFIX = "FIGURE "


def figure(key: str, value: float, unit: str, *, floor: float | None = None) -> None:
    """Print one headline figure in the form `run_all.py` collects (a line `FIGURE {json}`): `key`
    names it across runs, `value` is in `unit` ("ms", "x" for a ratio, "MB"), `floor` is the
    figure it is compared with, when there is one. The load average at the time goes with it."""
    import json
    import os

    record = {"key": key, "value": value, "unit": unit, "floor": floor, "load": os.getloadavg()[0]}
    print(FIGURE_PREFIX + json.dumps(record), flush=True)
