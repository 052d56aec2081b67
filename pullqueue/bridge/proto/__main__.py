"""Regenerates `messages.binpb` and the `_pb2.pyi` stubs from the `.proto` files (needs
grpcio-tools): `python -m pullqueue.bridge.proto`, run from the repository root."""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

HERE = Path(__file__).parent
ROOT = HERE.parents[2]


def main() -> int:
    """Run protoc over the .proto files; returns its exit status."""
    protos = sorted(str(p.relative_to(ROOT)) for p in HERE.glob("*.proto"))
    args = [
        "protoc",
        f"-I{ROOT}",
        "--include_imports",
        f"--descriptor_set_out={HERE / 'messages.binpb'}",
        f"--pyi_out={ROOT}",
        *protos,
    ]
    return int(protoc.main(args))


if __name__ == "__main__":
    sys.exit(main())
