"""The broker's packages import only downwards: `lint-imports` keeps the contracts in
pyproject.toml, and a back-reference planted in a scratch copy of the code breaks them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def run_lint(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the code under `root` (a copy of host/ and sidecar/ with the config)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{root / 'host'}:{root / 'sidecar'}", "HOME": str(root)}
    return subprocess.run([str(LINT), str(root / "pyproject.toml"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def scratch_copy(tmp_path: Path) -> Path:
    root = tmp_path / "copy"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "host", root / "host", ignore=ignore)
    shutil.copytree(REPO / "sidecar", root / "sidecar", ignore=ignore)
    shutil.copy2(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_layers_hold_and_an_upward_import_breaks_them(tmp_path: Path) -> None:
    root = scratch_copy(tmp_path)
    clean = run_lint(root)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "BROKEN" not in clean.stdout and "KEPT" in clean.stdout
    # The copy is what was checked, not the installed package.
    messages = root / "host" / "osprey" / "messages.py"
    messages.write_text(messages.read_text() + "\n\ndef _planted() -> object:\n    from .session import core\n\n    return core\n")
    broken = run_lint(root)
    assert broken.returncode != 0
    assert "osprey.messages is not allowed to import osprey.session" in broken.stdout, broken.stdout


def test_the_sidecar_may_not_import_the_broker(tmp_path: Path) -> None:
    root = scratch_copy(tmp_path)
    server = root / "sidecar" / "osprey_sidecar" / "errors.py"
    server.write_text(server.read_text() + "\n\ndef _planted() -> object:\n    import osprey.messages\n\n    return osprey.messages\n")
    broken = run_lint(root)
    assert broken.returncode != 0
    assert "osprey_sidecar.errors -> osprey.messages" in broken.stdout, broken.stdout
