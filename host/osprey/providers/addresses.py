"""Which model servers are local: on this machine or a private network. A local server that refuses
a connection is not running (or listens elsewhere), which waiting does not change, so the request
is not retried; a public one may be restarting or behind a balancer, so it is."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
from collections.abc import Iterable

# Loopback, the private ranges (RFC 1918, unique local IPv6), and the unspecified addresses, which
# a connection reaches this machine through.
LOCAL_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7", "0.0.0.0/32", "::/128",
))
# Seconds to wait for a host name's addresses before calling it not local.
RESOLVE_TIMEOUT_S = 1.0
_MAX_CAUSES = 64


def local_address(address: str) -> bool:
    """Whether the IP literal `address` is this machine or a private network (an IPv4-mapped IPv6
    address counts as its IPv4 one). False for anything that is not an IP literal."""
    try:
        ip = ipaddress.ip_address(address.strip("[]").split("%", 1)[0])  # a zone (fe80::1%eth0) is not part of the address
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in network for network in LOCAL_NETWORKS)


def local_name(host: str) -> bool | None:
    """Whether `host` is local when that shows without resolving it: an IP literal, `localhost` or
    a name under `.localhost` (always loopback). None for any other name."""
    name = host.strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return None
    return local_address(name)


def local_target(host: str, addresses: Iterable[str]) -> bool:
    """Whether a server named `host`, which resolves to `addresses`, is local: by its name alone
    when that tells, else when it resolves to at least one address and every one is local."""
    by_name = local_name(host)
    if by_name is not None:
        return by_name
    found = list(addresses)
    return bool(found) and all(local_address(a) for a in found)


async def resolves_locally(host: str, timeout: float = RESOLVE_TIMEOUT_S) -> bool:
    """`local_target` for `host` with the addresses the system resolves it to (within `timeout`;
    a name that does not resolve in time is not local)."""
    if local_name(host) is not None:
        return local_target(host, ())
    try:
        async with asyncio.timeout(timeout):
            infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError, UnicodeError):
        return False
    return local_target(host, {str(info[4][0]) for info in infos})


def refused(exc: BaseException) -> bool:
    """Whether a connection failure (`exc`, with its causes and any exception group in them) holds
    a refused connection: nothing listened on the port."""
    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending and len(seen) < _MAX_CAUSES:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError) or (isinstance(current, OSError) and current.errno == errno.ECONNREFUSED):
            return True
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False
