"""`python -m osprey_sidecar.forward --listen HOST:PORT --suffix .lane.osprey.invalid --sockets /lanes`:
the gateway of lanes on another machine's engine, routing by the TLS server name.

A lane has no network (as on this machine), so an engine publishes no port of it. The gateway is
one container on the engine's default bridge with a published port and a volume of sockets:
each lane mounts its own directory of that volume, `LANE`, where its sidecar serves TLS on
`tools.sock`. The gateway reads the TLS ClientHello of each connection for its server name
(`LANE.SUFFIX`: the name the lane's certificate carries), connects to `SOCKETS/LANE/tools.sock`,
and passes bytes both ways, the ClientHello first. It holds no key and decrypts nothing: TLS
runs end to end between the broker and the lane's sidecar, which checks the broker's
certificate and token (a lane that swapped its socket for a link to another's reaches a sidecar
whose certificate the broker refuses).

Bounds: at most `MAX_CONNECTIONS` at once; the ClientHello must arrive within `HELLO_S` and fit
in one TLS record; the lane must accept within `CONNECT_S`. Anything else is closed.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import struct
import sys

MAX_CONNECTIONS = 256
SOCKET_NAME = "tools.sock"
CONNECT_S = 5.0
HELLO_S = 5.0
CHUNK = 64 * 1024
MAX_RECORD = 16384 + 2048  # a TLS record's largest body, with room for a compressed or encrypted one
_LANE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


def server_name(record: bytes) -> str | None:
    """The server name (SNI) of a TLS ClientHello record, or None when it is not one or has none."""
    try:
        if record[0] != 0x16 or record[5] != 0x01:  # a handshake record holding a ClientHello
            return None
        at = 9 + 2 + 32  # record header, handshake header, client version, random
        at += 1 + record[at]  # session id
        at += 2 + struct.unpack_from("!H", record, at)[0]  # cipher suites
        at += 1 + record[at]  # compression methods
        end = at + 2 + struct.unpack_from("!H", record, at)[0]
        at += 2
        while at + 4 <= end:
            kind, size = struct.unpack_from("!HH", record, at)
            at += 4
            if kind == 0:  # server_name: a list of (type, name); type 0 is a host name
                inner = at + 2
                while inner + 3 <= at + size:
                    name_type, length = record[inner], struct.unpack_from("!H", record, inner + 1)[0]
                    if name_type == 0:
                        if inner + 3 + length > len(record):
                            return None  # cut short
                        return record[inner + 3:inner + 3 + length].decode("ascii")
                    inner += 3 + length
                return None
            at += size
    except (IndexError, struct.error, UnicodeDecodeError):
        return None
    return None


async def _read_hello(reader: asyncio.StreamReader) -> bytes | None:
    header = await reader.readexactly(5)
    length = struct.unpack("!H", header[3:5])[0]
    if header[0] != 0x16 or length > MAX_RECORD:
        return None
    return header + await reader.readexactly(length)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()  # a slow reader on the other side holds this one: memory stays bounded
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            if writer.can_write_eof():
                writer.write_eof()
        except (ConnectionError, OSError):
            writer.close()


async def serve(listen: tuple[str, int], suffix: str, sockets: str, ready: asyncio.Event | None = None) -> None:
    """Route connections to `listen` by their server name until cancelled."""
    slots = asyncio.Semaphore(MAX_CONNECTIONS)

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if slots.locked():
            client_writer.close()
            return
        async with slots:
            try:
                hello = await asyncio.wait_for(_read_hello(client_reader), HELLO_S)
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError):
                hello = None
            name = server_name(hello) if hello else None
            lane = name[:-len(suffix)] if name and name.endswith(suffix) else ""
            if not _LANE.fullmatch(lane):
                client_writer.close()
                return
            try:
                lane_reader, lane_writer = await asyncio.wait_for(asyncio.open_unix_connection(f"{sockets}/{lane}/{SOCKET_NAME}", limit=CHUNK), CONNECT_S)
            except (TimeoutError, OSError):
                client_writer.close()
                return
            pipes = [asyncio.ensure_future(_pipe(client_reader, lane_writer)), asyncio.ensure_future(_pipe(lane_reader, client_writer))]
            try:
                lane_writer.write(hello)  # type: ignore[arg-type]  # checked above: a ClientHello
                # When either side ends, both do: a peer that keeps its half open holds no slot.
                await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pipe in pipes:
                    pipe.cancel()
                lane_writer.close()
                client_writer.close()

    server = await asyncio.start_server(handle, *listen, limit=CHUNK)
    bound = server.sockets[0].getsockname()[1]
    print(f"osprey_sidecar.forward: routing {listen[0]}:{bound} to {sockets}/LANE/{SOCKET_NAME} by the server name LANE{suffix}",
          file=sys.stderr, flush=True)
    if ready is not None:
        ready.set()
    async with server:
        await server.serve_forever()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="osprey_sidecar.forward", description="Route TLS connections to lanes by server name (a lanes' gateway).")
    parser.add_argument("--listen", type=_address, required=True, metavar="HOST:PORT")
    parser.add_argument("--suffix", required=True, help="the server names' common suffix; what comes before it names the lane's container")
    parser.add_argument("--sockets", required=True, metavar="DIR", help="the directory holding each lane's directory, where its sidecar's socket is")
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args.listen, args.suffix, args.sockets))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
