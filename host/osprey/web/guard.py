"""The destination guard of `web_fetch`: a URL from a model is fetched only when it is plain http or
https, carries no credentials, names its host in one unambiguous spelling, and every address that
host resolves to is public. The guard returns the address it checked; the fetcher connects to that
address and nothing else, so a second DNS answer can never move the connection."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import unquote_plus, urlsplit

import idna

from ..errors import ToolError

# A resolver: (host, port) -> the addresses the host has, as text ("93.184.216.34", "2606:2800::1").
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

MAX_URL_CHARS = 8192
MAX_QUERY_PARAMETERS = 256
MAX_ADDRESSES = 64
RESOLVE_TIMEOUT_SECONDS = 10.0

# Query parameter names that carry credentials, compared after lowercasing and dropping "-", "_"
# and ".", so `api_key`, `API-Key` and `apiKey` are one name.
CREDENTIAL_PARAMETERS = frozenset({
    "token", "accesstoken", "refreshtoken", "idtoken", "authtoken", "apitoken", "privatetoken", "bearer", "jwt",
    "auth", "authorization", "authkey",
    "key", "apikey", "accesskey", "accesskeyid", "secretkey", "privatekey", "clientkey", "subscriptionkey",
    "password", "passwd", "pwd", "pass", "passphrase",
    "secret", "clientsecret", "appsecret",
    "signature", "sig", "xamzsignature", "xamzcredential", "xamzsecuritytoken", "xgoogsignature", "xgoogcredential",
    "credential", "credentials", "sessionid", "sessiontoken", "sid",
})
# Any name ending in one of these is treated the same way (`github_token`, `db_password`).
CREDENTIAL_SUFFIXES = ("token", "secret", "password", "passwd", "apikey", "signature", "credential", "credentials", "privatekey", "accesskey")

# Names that only ever mean this machine or its local network.
LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
LOCAL_SUFFIXES = (".localhost", ".local", ".localdomain", ".internal", ".intranet", ".lan", ".home.arpa", ".corp", ".private")

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# Refused whatever the standard library says (its answers have changed between releases).
BLOCKED_V4 = tuple(_V4(n) for n in (
    "0.0.0.0/8",        # this network, unspecified
    "10.0.0.0/8",       # private
    "100.64.0.0/10",    # carrier-grade NAT
    "127.0.0.0/8",      # loopback
    "169.254.0.0/16",   # link-local (cloud metadata lives here)
    "172.16.0.0/12",    # private
    "192.0.0.0/24",     # IETF protocol assignments
    "192.0.2.0/24",     # documentation
    "192.31.196.0/24",  # AS112
    "192.52.193.0/24",  # AMT
    "192.88.99.0/24",   # 6to4 relay anycast
    "192.168.0.0/16",   # private
    "192.175.48.0/24",  # AS112 direct delegation
    "198.18.0.0/15",    # benchmarking
    "198.51.100.0/24",  # documentation
    "203.0.113.0/24",   # documentation
    "224.0.0.0/4",      # multicast
    "240.0.0.0/4",      # reserved, and 255.255.255.255 broadcast
))
# Only global unicast (2000::/3) is ever accepted for IPv6; within it these are refused.
GLOBAL_UNICAST_V6 = _V6("2000::/3")
BLOCKED_V6 = tuple(_V6(n) for n in (
    "2001::/23",        # IETF protocol assignments (Teredo 2001::/32, benchmarking 2001:2::/48, ORCHID)
    "2001:db8::/32",    # documentation
    "2002::/16",        # 6to4: allowed only when the embedded IPv4 address is public (checked below)
    "3fff::/20",        # documentation
))
# 6to4 is checked by its embedded address instead of being refused outright.
SIXTOFOUR = _V6("2002::/16")


class BlockedURL(ToolError):
    """A URL the guard refuses; `category` is invalid_url, credentials_in_url or blocked_destination."""


@dataclass(frozen=True)
class CheckedURL:
    """A URL that passed the syntactic checks, in the one spelling the fetcher sends."""

    url: str          # scheme://host[:port]/path?query, no fragment, host in ASCII (IDNA)
    scheme: str       # http or https
    host: str         # lowercase ASCII name, or the IP address without brackets
    port: int
    target: str       # path and query as sent
    literal: ipaddress.IPv4Address | ipaddress.IPv6Address | None  # the host when it is an IP address


@dataclass(frozen=True)
class Destination:
    """A URL that passed every check, with the address the connection must go to."""

    url: CheckedURL
    address: str                 # the checked address, the only one the fetcher connects to
    addresses: tuple[str, ...]   # every address the name resolved to (all public)


def _invalid(message: str) -> BlockedURL:
    return BlockedURL("invalid_url", message)


def _blocked(message: str) -> BlockedURL:
    return BlockedURL("blocked_destination", message)


def address_problem(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why `ip` is not a public destination, or None when it is."""
    if isinstance(ip, ipaddress.IPv4Address):
        for net in BLOCKED_V4:
            if ip in net:
                return f"{ip} is in {net}, which is not a public network"
        if not ip.is_global:
            return f"{ip} is not a global address"
        return None
    if ip.scope_id:
        return f"{ip} carries a zone index"
    mapped = ip.ipv4_mapped
    if mapped is not None:
        return f"{ip} is an IPv4-mapped IPv6 address (of {mapped})"
    if ip not in GLOBAL_UNICAST_V6:
        # ::/128, ::1, ::/96 (IPv4-compatible), 64:ff9b::/96 and 64:ff9b:1::/48 (NAT64),
        # 100::/64 (discard), fc00::/7 (unique local), fe80::/10 (link-local),
        # fec0::/10 (site-local), ff00::/8 (multicast), 5f00::/16 (SRv6) all lie outside 2000::/3.
        return f"{ip} is not a global unicast IPv6 address"
    if ip in SIXTOFOUR:
        embedded = ip.sixtofour
        if embedded is None:
            return f"{ip} is a 6to4 address without an embedded IPv4 address"
        inner = address_problem(embedded)
        return f"{ip} is a 6to4 address embedding {embedded}: {inner}" if inner else None
    for net6 in BLOCKED_V6:
        if ip in net6:
            return f"{ip} is in {net6}, which is not a public network"
    if not ip.is_global:
        return f"{ip} is not a global address"
    return None


_DECIMAL_OCTET = re.compile(r"(0|[1-9][0-9]{0,2})")
_NUMERIC_LABEL = re.compile(r"(0[xX][0-9a-fA-F]*|[0-9]+)")
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f-\x9f\\]")


def _ipv4_literal(host: str) -> ipaddress.IPv4Address | None:
    """The address when `host` is an IPv4 address in its one accepted spelling (four decimal octets,
    no leading zeros). Any other numeric spelling is refused: `2130706433`, `0x7f.1`, `0177.0.0.1`,
    `127.1` all mean loopback to some parsers and something else to others."""
    labels = host.split(".")
    if not _NUMERIC_LABEL.fullmatch(labels[-1]):
        return None  # a name (WHATWG: a host that does not end in a number is a domain)
    if len(labels) == 4 and all(_DECIMAL_OCTET.fullmatch(p) and int(p) <= 255 for p in labels):
        return ipaddress.IPv4Address(host)
    raise _invalid(f"the host {host!r} is a numeric address in an ambiguous spelling; write it as four decimal octets such as 93.184.216.34")


def _normalise_host(raw: str) -> tuple[str, ipaddress.IPv4Address | ipaddress.IPv6Address | None]:
    if not raw:
        raise _invalid("the URL has no host")
    if raw.startswith("["):
        if not raw.endswith("]"):
            raise _invalid(f"the IPv6 address {raw!r} is not closed with ']'")
        inner = raw[1:-1]
        if "%" in inner:
            raise _blocked("IPv6 zone indexes (the '%' part) are not allowed in a URL")
        try:
            v6 = ipaddress.IPv6Address(inner)
        except ValueError:
            raise _invalid(f"{inner!r} is not an IPv6 address") from None
        return str(v6), v6
    if "%" in raw:
        raise _invalid(f"the host {raw!r} holds percent-escapes; write the name itself")
    try:
        mapped = idna.uts46_remap(raw, std3_rules=False, transitional=False)
    except (idna.IDNAError, UnicodeError) as exc:
        raise _invalid(f"the host {raw!r} is not a valid domain name: {exc}") from None
    mapped = mapped.lower()
    if mapped.endswith("."):
        mapped = mapped[:-1]  # the root label: example.com. is example.com
    if not mapped or ".." in mapped or mapped.startswith("."):
        raise _invalid(f"the host {raw!r} has an empty label")
    literal = _ipv4_literal(mapped)
    if literal is not None:
        return str(literal), literal
    try:
        ascii_host = idna.encode(mapped, uts46=False, std3_rules=False).decode("ascii") if not mapped.isascii() else mapped
    except (idna.IDNAError, UnicodeError) as exc:
        raise _invalid(f"the host {raw!r} is not a valid internationalised domain name: {exc}") from None
    if len(ascii_host) > 253:
        raise _invalid("the host name is longer than 253 characters")
    for label in ascii_host.split("."):
        if not _LABEL.fullmatch(label):
            raise _invalid(f"the host {raw!r} has an invalid label {label[:70]!r}")
    if ascii_host in LOCAL_NAMES or ascii_host.endswith(LOCAL_SUFFIXES):
        raise _blocked(f"{ascii_host} names this machine or a local network")
    return ascii_host, None


def _credential_parameter(name: str) -> bool:
    key = re.sub(r"[-_.\s]", "", name.lower())
    return key in CREDENTIAL_PARAMETERS or key.endswith(CREDENTIAL_SUFFIXES)


def check_url(url: str) -> CheckedURL:
    """The syntactic checks: scheme, credentials, host spelling, port. No network."""
    if not isinstance(url, str) or not url:
        raise _invalid("the URL is empty")
    if len(url) > MAX_URL_CHARS:
        raise _invalid(f"the URL is longer than {MAX_URL_CHARS} characters")
    if _CONTROL_OR_SPACE.search(url):
        raise _invalid("the URL holds spaces, control characters or backslashes; percent-encode them")
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise _invalid(f"only http:// and https:// URLs can be fetched, not {url[:40]!r}")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise _invalid(f"the URL cannot be parsed: {exc}") from None
    authority = parts.netloc
    if "@" in authority:
        raise BlockedURL("credentials_in_url", "the URL carries a user name or password (the part before '@'); credentials are never sent by web_fetch")
    host_text, port_text = authority, ""
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise _invalid("the IPv6 address in the URL is not closed with ']'")
        host_text, rest = authority[: end + 1], authority[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise _invalid(f"unexpected text after the IPv6 address: {rest[:20]!r}")
            port_text = rest[1:]
            if not port_text:
                raise _invalid("the URL has an empty port")
    elif ":" in authority:
        host_text, _, port_text = authority.partition(":")
        if not port_text:
            raise _invalid("the URL has an empty port")
    if port_text:
        if not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5 or not 1 <= int(port_text) <= 65535:
            raise _invalid(f"the port {port_text[:10]!r} is not a number from 1 to 65535")
        port = int(port_text)
    else:
        port = 443 if scheme == "https" else 80
    host, literal = _normalise_host(host_text)
    query = parts.query
    # Split on ';' as well as '&': some servers take either as the separator.
    fields = re.split(r"[&;]", query) if query else []
    if len(fields) > MAX_QUERY_PARAMETERS:
        raise _invalid(f"the URL has more than {MAX_QUERY_PARAMETERS} query parameters")
    for item in fields:
        name = unquote_plus(item.partition("=")[0])
        if _credential_parameter(name):
            raise BlockedURL("credentials_in_url", f"the query parameter {name[:40]!r} looks like a credential; web_fetch never sends credentials")
    path = parts.path or "/"
    target = path + (f"?{query}" if query else "")
    shown_host = f"[{host}]" if isinstance(literal, ipaddress.IPv6Address) else host
    default_port = 443 if scheme == "https" else 80
    netloc = shown_host if port == default_port else f"{shown_host}:{port}"
    return CheckedURL(url=f"{scheme}://{netloc}{target}", scheme=scheme, host=host, port=port, target=target, literal=literal)


async def system_resolver(host: str, port: int) -> list[str]:
    """The event loop's getaddrinfo (TCP addresses only)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    out: list[str] = []
    for family, _type, _proto, _canon, sockaddr in infos:
        if family == socket.AF_INET6 and len(sockaddr) >= 4 and sockaddr[3]:
            out.append(f"{sockaddr[0]}%{sockaddr[3]}")  # keep the zone so the guard sees and refuses it
        else:
            out.append(str(sockaddr[0]))
    return out


class DestinationGuard:
    """Checks a URL and resolves its host; every address must be public. `allow_loopback_for_tests`
    lets loopback addresses (127.0.0.0/8, ::1) through and nothing else (private, link-local and
    the rest stay refused; the syntactic checks still apply). Only tests set it, by constructing
    the guard themselves; no flag, config key or environment variable reaches it."""

    def __init__(self, resolver: Resolver | None = None, *, resolve_timeout: float = RESOLVE_TIMEOUT_SECONDS, allow_loopback_for_tests: bool = False) -> None:
        self._resolver: Resolver = resolver or system_resolver
        self._resolve_timeout = resolve_timeout
        self._allow_loopback = allow_loopback_for_tests

    def _problem(self, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
        if self._allow_loopback and ip.is_loopback and not (isinstance(ip, ipaddress.IPv6Address) and (ip.scope_id or ip.ipv4_mapped)):
            return None
        return address_problem(ip)

    async def check(self, url: str) -> Destination:
        checked = check_url(url)
        if checked.literal is not None:
            problem = self._problem(checked.literal)
            if problem:
                raise _blocked(f"{checked.host} is not a public address: {problem}")
            return Destination(checked, checked.host, (checked.host,))
        try:
            async with asyncio.timeout(self._resolve_timeout):
                answers = list(await self._resolver(checked.host, checked.port))
        except TimeoutError:
            raise BlockedURL("dns_failed", f"resolving {checked.host} took longer than {self._resolve_timeout:g} s") from None
        except (OSError, UnicodeError) as exc:
            raise BlockedURL("dns_failed", f"{checked.host} could not be resolved: {exc}") from None
        if not answers:
            raise BlockedURL("dns_failed", f"{checked.host} resolved to no address")
        if len(answers) > MAX_ADDRESSES:
            raise _blocked(f"{checked.host} resolved to more than {MAX_ADDRESSES} addresses")
        addresses: list[str] = []
        for answer in answers:
            try:
                ip = ipaddress.ip_address(answer)
            except ValueError:
                raise _blocked(f"{checked.host} resolved to {answer[:60]!r}, which is not an IP address") from None
            problem = self._problem(ip)
            if problem:
                raise _blocked(f"{checked.host} resolves to a non-public address: {problem}")
            text = str(ip)
            if text not in addresses:
                addresses.append(text)
        return Destination(checked, addresses[0], tuple(addresses))
