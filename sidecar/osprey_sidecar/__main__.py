"""`python -m osprey_sidecar --socket PATH --root DIR [--root DIR ...] [--token-file FILE]`, or on
TCP with TLS: `--listen HOST:PORT --tls-cert FILE --tls-key FILE [--tls-client-ca FILE]
--token-file FILE` (port 0 picks a free port; the line on stderr names the one used)."""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
from concurrent import futures

from . import __version__
from .server import MAX_WORKERS, ServerTls, build_server, build_tls_server

# A certificate, chain or key file larger than this is not one.
PEM_MAX_BYTES = 1024 * 1024


def _wait_for(path: str, timeout: float) -> bool:
    """Whether `path` came to exist within `timeout` seconds (checked every 5 ms)."""
    import time

    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def main(argv: list[str] | None = None) -> int:
    # First of all, before a token or key is read: commands run as the sidecar's uid (in a lane,
    # and on the host as the local dispatcher), and without this they could read the token out of
    # /proc/<sidecar>/mem or /proc/<sidecar>/environ, or attach a debugger to it.
    _prctl(PR_SET_DUMPABLE, 0)
    parser = argparse.ArgumentParser(prog="osprey_sidecar", description="Serve Osprey's ToolService on a unix socket, or on a TCP port with TLS.")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", help="unix socket path to listen on")
    where.add_argument("--listen", metavar="HOST:PORT", help="TCP address to listen on with TLS (needs --tls-cert, --tls-key and --token-file); "
                       "`unix:PATH` serves TLS on a unix socket that anyone may connect to (a lane on another machine, reached through its gateway)")
    parser.add_argument("--tls-cert", metavar="FILE", help="with --listen: the server's certificate chain (PEM)")
    parser.add_argument("--tls-key", metavar="FILE", help="with --listen: the server's private key (PEM)")
    parser.add_argument("--tls-client-ca", metavar="FILE", help="with --listen: accept only clients whose certificate this CA (PEM) signed (mutual TLS)")
    parser.add_argument("--root", action="append", required=True, help="allowed root; the first is the working directory")
    parser.add_argument("--token-file", help="file holding the token every call must present")
    parser.add_argument("--create-token", action="store_true", help="with --token-file: write a random token there first if the file does not exist")
    parser.add_argument("--seal", action="append", default=[], metavar="DIR", help="after start-up, make DIR read-only to its owner (chmod 0555); for a lane's /dev and socket dir")
    parser.add_argument("--forget-secrets", action="store_true", help="once read, remove the token file and the TLS key file (a lane on another machine gets them in a volume its commands could read)")
    parser.add_argument("--reap-strays", action="store_true", help="after each command, kill every process it left running outside its process group (only in a lane: a container of its own)")
    parser.add_argument("--parent-pid", type=int, metavar="PID", help="exit (stopping every running command) when process PID, the broker that started this one, ends")
    parser.add_argument("--wait-for", metavar="FILE", help="before reading the token and TLS files, wait until FILE exists (whoever "
                        "provides them writes it last: a lane on another machine starts while its workspace is copied in)")
    parser.add_argument("--wait-timeout", type=float, default=60.0, metavar="SECONDS", help="with --wait-for: give up (exit 1) after this long")
    parser.add_argument("--version", action="version", version=__version__)
    args = parser.parse_args(argv)
    if args.wait_for and not _wait_for(args.wait_for, args.wait_timeout):
        print(f"osprey_sidecar: {args.wait_for} did not appear within {args.wait_timeout:g} s", file=sys.stderr, flush=True)
        return 1
    tls = _server_tls(parser, args)
    _keep_freed_memory()
    if args.parent_pid:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != args.parent_pid:
            return 1  # the parent died before the death signal was armed
    token = None
    if args.create_token and not args.token_file:
        parser.error("--create-token needs --token-file")
    if args.create_token and not os.path.exists(args.token_file):
        import secrets  # only here: a lane's sidecar is given its token and never loads it

        fd = os.open(args.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(secrets.token_hex(32) + "\n")
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as fh:
            token = fh.read().strip()
        if not token:
            parser.error(f"token file {args.token_file} is empty")
    if args.forget_secrets:
        for path in (args.token_file, args.tls_key):
            if path:
                try:
                    os.unlink(path)
                except OSError as exc:
                    print(f"osprey_sidecar: cannot remove {path} after reading it: {exc.strerror}", file=sys.stderr, flush=True)
                    return 1
    executor = futures.ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="osprey-tool")
    if tls is not None and token is not None:
        try:
            server, port = build_tls_server(args.root, args.listen, tls, token, reap_strays=args.reap_strays, executor=executor)
        except OSError as exc:
            print(f"osprey_sidecar: {exc}", file=sys.stderr, flush=True)
            return 1
        if args.listen.startswith("unix:"):
            # The gateway connects as another user; TLS with the client's certificate and the token
            # guard the calls, as on TCP.
            os.chmod(args.listen[len("unix:"):], 0o666)
            where_served = args.listen
        else:
            where_served = f"{args.listen.rpartition(':')[0]}:{port}"
        serving = f"{where_served} (TLS{', clients need a certificate' if tls.client_ca_pem else ''})"
    else:
        server = build_server(args.root, args.socket, token, reap_strays=args.reap_strays, executor=executor)
        serving = args.socket
    for path in args.seal:
        # Without capabilities even root obeys mode bits, so this keeps the lane's commands from
        # writing there; chmod fails harmlessly where the lane's user does not own the path.
        try:
            os.chmod(path, 0o555)
        except OSError:
            pass
    # A stopping signal writes to a pipe the main thread reads: no lock is taken in the handler, so
    # signals arriving together (the parent's death signal, then a SIGHUP) cannot deadlock it, as
    # a threading.Event set from a handler that interrupted another set can.
    wake_read, wake_write = os.pipe()

    def on_stop(signum: int, frame: object) -> None:
        try:
            os.write(wake_write, b"x")
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_stop)
    print(f"osprey_sidecar {__version__} serving on {serving}", file=sys.stderr, flush=True)
    os.read(wake_read, 1)
    # Stopping the server cancels the calls in flight, which kills their commands' process groups.
    server.stop(grace=1).wait()
    executor.shutdown(wait=True)  # every cancelled call has finished killing its commands
    # Nothing is left to clean up: leave now rather than wait for the interpreter's and gRPC's
    # teardown (tens of milliseconds the broker would otherwise wait for at every session end).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _server_tls(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ServerTls | None:
    """The TLS of a --listen server from its files; None for a unix socket."""
    tls_files = (args.tls_cert, args.tls_key, args.tls_client_ca)
    if args.listen is None:
        if any(tls_files):
            parser.error("--tls-cert, --tls-key and --tls-client-ca go with --listen")
        return None
    if not (args.tls_cert and args.tls_key):
        parser.error("--listen needs --tls-cert and --tls-key: the ToolService is served on TCP only with TLS")
    if not args.token_file:
        parser.error("--listen needs --token-file: on TCP, anyone who can reach the port could call without a token")
    return ServerTls(_pem(parser, args.tls_cert), _pem(parser, args.tls_key), _pem(parser, args.tls_client_ca) if args.tls_client_ca else None)


def _pem(parser: argparse.ArgumentParser, path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            data = fh.read(PEM_MAX_BYTES + 1)
    except OSError as exc:
        parser.error(f"cannot read {path}: {exc.strerror or exc}")
    if len(data) > PEM_MAX_BYTES or b"-----BEGIN " not in data:
        parser.error(f"{path} is not a PEM file (a certificate or key between -----BEGIN and -----END lines)")
    return data


# mallopt(3) parameters.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# A freed block up to this size goes back to the heap, and up to this much free memory stays there.
MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 32 * 1024 * 1024


def _keep_freed_memory() -> None:
    """Let the C library keep freed memory for the next call instead of handing it back at
    once: a large write_file arrives in 512 KiB messages, each held in fresh blocks, and with
    glibc's defaults every one of them was mapped (or the heap grown) anew and its pages
    faulted in and zeroed again, which took about as long as the write itself. Freed memory
    beyond TRIM_THRESHOLD_BYTES, and blocks over MMAP_THRESHOLD_BYTES (a whole file read by
    edit_file), still go back to the system. A no-op where mallopt is missing (musl)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, ctypes.c_int(MMAP_THRESHOLD_BYTES))
    mallopt(M_TRIM_THRESHOLD, ctypes.c_int(TRIM_THRESHOLD_BYTES))


PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4


def _prctl(option: int, value: int) -> None:
    """Linux prctl(2); a no-op where it is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0)
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
