"""`python -m osprey_sidecar.forward --listen HOST:PORT --to HOST:PORT`: a TCP forwarder, the
gateway of a lane on another machine.

A lane without a network of its own sits on an internal network that reaches nothing; its engine
publishes no port from such a network. The gateway is a second container on that network and on
one with a published port, and passes bytes between the two. It holds no key and reads nothing:
TLS runs end to end between the broker and the lane's sidecar, so it forwards ciphertext. At
most `MAX_CONNECTIONS` at once; a connection that cannot reach the lane within `CONNECT_S` is
closed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

MAX_CONNECTIONS = 64
CONNECT_S = 5.0
CHUNK = 64 * 1024


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


async def serve(listen: tuple[str, int], to: tuple[str, int], ready: asyncio.Event | None = None) -> None:
    """Forward connections to `listen` to `to` until cancelled."""
    slots = asyncio.Semaphore(MAX_CONNECTIONS)

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if slots.locked():
            client_writer.close()
            return
        async with slots:
            try:
                lane_reader, lane_writer = await asyncio.wait_for(asyncio.open_connection(*to), CONNECT_S)
            except (TimeoutError, OSError):
                client_writer.close()
                return
            try:
                await asyncio.gather(_pipe(client_reader, lane_writer), _pipe(lane_reader, client_writer))
            finally:
                lane_writer.close()
                client_writer.close()

    server = await asyncio.start_server(handle, *listen, limit=CHUNK)
    port = server.sockets[0].getsockname()[1]
    print(f"osprey_sidecar.forward: forwarding {listen[0]}:{port} to {to[0]}:{to[1]}", file=sys.stderr, flush=True)
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
    parser = argparse.ArgumentParser(prog="osprey_sidecar.forward", description="Forward TCP connections (a lane's gateway).")
    parser.add_argument("--listen", type=_address, required=True, metavar="HOST:PORT")
    parser.add_argument("--to", type=_address, required=True, metavar="HOST:PORT")
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(args.listen, args.to))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
