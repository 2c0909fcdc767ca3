"""The committed generated code is exactly what grpcio-tools makes from the proto."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

from conftest import REPO

GENERATED = ["tools_pb2.py", "tools_pb2.pyi", "tools_pb2_grpc.py"]


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(REPO / "scripts" / "gen_protos.py"), "--out", str(tmp_path)], check=True)
    committed = REPO / "sidecar" / "osprey_sidecar" / "_proto"
    fresh = tmp_path / "osprey_sidecar" / "_proto"
    stale = [name for name in GENERATED if not filecmp.cmp(committed / name, fresh / name, shallow=False)]
    assert not stale, f"regenerate with scripts/gen_protos.py: {stale} differ from the proto"


def test_generated_grpc_module_imports_nothing_named_osprey() -> None:
    text = (REPO / "sidecar" / "osprey_sidecar" / "_proto" / "tools_pb2_grpc.py").read_text()
    imports = [line for line in text.splitlines() if line.startswith(("import ", "from "))]
    assert all("osprey." not in line.replace("osprey_sidecar", "") for line in imports), imports


def test_sidecar_never_imports_the_host_package() -> None:
    code = "import sys, osprey_sidecar.server, osprey_sidecar.__main__; print([m for m in sys.modules if m == 'osprey' or m.startswith('osprey.')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
