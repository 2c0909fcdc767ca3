"""Run every benchmark and print its figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

SCRIPTS = (
    "toolservice_overhead.py", "file_scaling.py", "bash_latency.py", "policy_overhead.py", "grep_vs_rg.py", "grep_memory.py",
    "provider_connections.py", "loop_overhead.py", "cli_startup.py", "tool_service_overlap.py", "extension_discovery.py", "lane_ready.py",
    "image_build.py", "tui_latency.py", "skills_startup.py",
)

for script in SCRIPTS:
    print(f"== {script}", flush=True)
    subprocess.run([sys.executable, str(HERE / script)], check=True)
