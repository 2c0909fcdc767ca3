"""`osprey --help` and `osprey agent --help` wall time versus `python -c pass`. Goal: <= 4x."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import median, time_command  # noqa: E402

RUNS = 25


def main() -> None:
    osprey = str(Path(sys.executable).with_name("osprey"))
    base = median(time_command([sys.executable, "-c", "pass"], RUNS))
    print(f"python -c pass: {base * 1e3:.1f} ms")
    for args in (["--help"], ["agent", "--help"]):
        t = median(time_command([osprey, *args], RUNS))
        print(f"osprey {' '.join(args)}: {t * 1e3:.1f} ms, ratio {t / base:.2f} (goal <= 4)")


if __name__ == "__main__":
    main()
