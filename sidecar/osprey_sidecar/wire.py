"""What both ends of the ToolService agree on besides the proto: metadata keys, the message
size limit, the service's name, and the defaults and caps a client needs to set its deadlines.

The sidecar owns this module (it never imports the host); the host's client imports it, so
each value exists once.
"""

from __future__ import annotations

# Every call presents the home's token under this metadata key.
TOKEN_KEY = "x-osprey-token"
# A failed call's trailing metadata carries its stable category (not_found, ...) under this key.
CATEGORY_KEY = "osprey-error-category"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# write_file: content of up to this many characters goes in one WriteFile message; longer
# content goes through WriteFileStream in chunks of this many characters, up to WRITE_MAX_BYTES
# bytes in all. (256 KiB: 1 and 10 MB writes took a third less time than with 512 KiB chunks,
# 50 MB about the same; most of a chunk's cost is the client's fresh memory for its copies.)
WRITE_CHUNK_BYTES = 256 * 1024
WRITE_MAX_BYTES = MAX_MESSAGE_BYTES
READ_FILES_MAX_ITEMS = 64  # reads in one ReadFiles call (the client sends more in several)
# The gRPC health service reports SERVING for this name once the ToolService answers.
SERVICE_NAME = "osprey.sandbox.v1.ToolService"
CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
)

# bash and exec: what 0 means, and the longest a caller may ask for.
BASH_DEFAULT_TIMEOUT_MS = 120_000
BASH_MAX_TIMEOUT_MS = 600_000
EXEC_DEFAULT_TIMEOUT_MS = 120_000
EXEC_MAX_TIMEOUT_MS = 3_600_000
# Output bytes kept per stream when a call gives 0 (half from the head, half from the tail).
DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024
# Bounds on what one exec call may hand the service or ask it to keep.
EXEC_MAX_STDIN_BYTES = 8 * 1024 * 1024
EXEC_MAX_OUTPUT_BYTES = 16 * 1024 * 1024

# Program streams: the most running at once in one service (each holds a server thread for its
# life), the largest stdin or output chunk in one message, the caller's extra environment, and
# how long a program has between SIGTERM and SIGKILL when its stream ends.
PROGRAM_MAX_RUNNING = 16
PROGRAM_STDIN_CHUNK_BYTES = 64 * 1024
PROGRAM_OUTPUT_CHUNK_BYTES = 64 * 1024
PROGRAM_MAX_ENV_VARS = 64
PROGRAM_MAX_ENV_BYTES = 64 * 1024
PROGRAM_KILL_GRACE_S = 2.0
