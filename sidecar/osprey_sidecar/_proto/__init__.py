"""Generated protobuf and gRPC modules (scripts/gen_protos.py); never edit them by hand."""
