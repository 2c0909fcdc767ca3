"""The ToolService servicer: the eight sandboxed tools, served on a unix socket.

This package depends on grpcio and protobuf only, so it installs alone into a
lane image. It never imports the host package `osprey`.
"""

__version__ = "0.1.0"
