"""Osprey: a coding-agent harness whose file and shell tools run behind one gRPC service."""

__version__ = "0.1.0"
