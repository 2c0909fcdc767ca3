#!/usr/bin/env python3
"""Regenerate the committed protobuf and gRPC modules from protos/ (needs grpcio-tools).

    python scripts/gen_protos.py [--out DIR]

The proto file is mapped to the virtual path `osprey_sidecar/_proto/tools.proto`, so the
generated gRPC module imports `osprey_sidecar._proto.tools_pb2` and nothing named `osprey`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos" / "osprey" / "sandbox" / "v1"
VIRTUAL = "osprey_sidecar/_proto"


def generate(out: Path) -> None:
    from grpc_tools import protoc

    args = [
        "protoc",
        f"-I{VIRTUAL}={PROTO_DIR}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        f"{VIRTUAL}/tools.proto",
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed; see the messages above")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "sidecar", help="directory that holds osprey_sidecar/")
    args = parser.parse_args()
    generate(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
