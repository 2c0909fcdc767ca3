"""Run every benchmark and print its figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

for script in ("toolservice_overhead.py", "policy_overhead.py", "grep_vs_rg.py", "grep_memory.py", "cli_startup.py", "lane_ready.py", "image_build.py", "tui_latency.py"):
    print(f"== {script}", flush=True)
    subprocess.run([sys.executable, str(HERE / script)], check=True)
