"""The committed generated code is exactly what grpcio-tools makes from the proto."""

from __future__ import annotations

import filecmp
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO

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


def test_the_generated_code_is_imported_only_by_the_servicer_side_and_the_client() -> None:
    host = REPO / "host" / "osprey"
    generated = re.compile(r"osprey_sidecar\._proto\b|from \._proto\b|import _proto\b")
    importers = sorted(str(p.relative_to(host)) for p in host.rglob("*.py") if generated.search(p.read_text()))
    assert importers == ["toolservice/client.py", "toolservice/wire.py"], importers


def test_wire_constants_exist_once() -> None:
    from osprey_sidecar import wire
    from osprey_sidecar._proto import tools_pb2 as pb

    assert wire.SERVICE_NAME == pb.DESCRIPTOR.services_by_name["ToolService"].full_name
    for path in [*(REPO / "host" / "osprey").rglob("*.py"), *(REPO / "sidecar" / "osprey_sidecar").glob("*.py")]:
        if path.name == "wire.py":
            continue
        text = path.read_text()
        for value in (wire.TOKEN_KEY, wire.CATEGORY_KEY, wire.SERVICE_NAME):
            assert f'"{value}"' not in text, f"{path.name} spells out {value!r}; import it from osprey_sidecar.wire"


def test_every_result_has_a_host_model_that_matches_its_message() -> None:
    from osprey.toolservice import wire as toolwire
    from osprey_sidecar._proto import tools_pb2 as pb

    models = {m.wire_message.DESCRIPTOR.full_name: m for m in vars(toolwire).values()
              if isinstance(m, type) and issubclass(m, toolwire.WireModel) and m.wire_message is not None}
    service = pb.DESCRIPTOR.services_by_name["ToolService"]
    for method in service.methods:
        # Bash streams its output; its result is the exit event (with the output joined on the host).
        # ReadFiles, ListDirectories and Trees answer several calls: each item's result is the result of one.
        result = {"Bash": pb.BashExit.DESCRIPTOR, "ReadFiles": pb.ReadFileResponse.DESCRIPTOR, "ListDirectories": pb.ListDirectoryResponse.DESCRIPTOR,
                  "Trees": pb.TreeResponse.DESCRIPTOR}.get(method.name, method.output_type)
        assert result.full_name in models, f"{method.name} returns {result.full_name}, which no host model reads"
    for model in models.values():
        assert toolwire.wire_mismatches(model) == [], model


def test_a_host_model_that_drifts_from_its_message_is_refused() -> None:
    from pydantic import BaseModel

    from osprey.toolservice.wire import WireModel
    from osprey_sidecar._proto import tools_pb2 as pb

    with pytest.raises(TypeError, match="missing fields \\['truncated'\\]; fields not in the message \\['renamed'\\]; files must be int"):
        class Drifted(WireModel):  # noqa: F841 - defining it is the test
            wire_message = pb.TreeResponse

            rendered: str
            directories: int
            files: str
            renamed: bool

    with pytest.raises(TypeError, match="entries must be the model of osprey.sandbox.v1.DirEntry"):
        class Entry(BaseModel):
            name: str

        class Listing(WireModel):  # noqa: F841
            wire_message = pb.ListDirectoryResponse

            resolved_path: str
            entries: list[Entry]


def test_results_are_read_from_messages_field_for_field() -> None:
    from osprey.toolservice.wire import BashResult, ExecResult, GrepResult, ListDirectoryResult
    from osprey_sidecar._proto import tools_pb2 as pb

    grep = GrepResult.from_wire(pb.GrepResponse(matches=[pb.GrepMatch(path="a.py", line=3, text="x")], truncated=True, total=9, engine="python"))
    assert grep.model_dump() == {"matches": [{"path": "a.py", "line": 3, "text": "x"}], "truncated": True, "total": 9, "engine": "python"}
    listing = ListDirectoryResult.from_wire(pb.ListDirectoryResponse(resolved_path="/w", entries=[
        pb.DirEntry(name=n, kind=k, size=1) for n, k in (("d", pb.DirEntry.DIRECTORY), ("f", pb.DirEntry.FILE), ("l", pb.DirEntry.SYMLINK), ("o", pb.DirEntry.OTHER))]))
    assert [e.kind for e in listing.entries] == ["directory", "file", "symlink", "other"]
    bash = BashResult.from_wire(pb.BashExit(exit_code=-1, signal=9, tail=b"ignored", dropped_bytes=5), output="joined")
    assert (bash.output, bash.exit_code, bash.signal, bash.dropped_bytes) == ("joined", -1, 9, 5)
    run = ExecResult.from_wire(pb.ExecResponse(stdout=pb.CapturedOutput(head=b"he", tail=b"ad", dropped_bytes=2), exit_code=3))
    assert (run.stdout.head, run.stdout.tail, run.stdout.dropped_bytes, run.stderr.head, run.exit_code) == (b"he", b"ad", 2, b"", 3)
