"""Which URLs and addresses outbound requests to user-given URLs may reach.

A user-given URL (``audio_url``, ``webhook_url``) must not reach the service's own
networks (spec section 8). :class:`AddressPolicy` classifies an address;
:func:`check_url` refuses what is plainly not public without DNS (request validation
and every redirect hop). Resolved addresses are vetted where the socket is opened
(:mod:`security.netguard`).
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address
from typing import Literal

import httpx
from pydantic import BaseModel, ConfigDict

__all__ = ["IPAddress", "AddressKind", "AddressPolicy", "NetguardError", "UnsafeURL",
           "classify_address", "parse_host", "check_url"]

IPAddress = IPv4Address | IPv6Address

AddressKind = Literal["public", "loopback", "private", "forbidden"]



class NetguardError(Exception):
    """Root of this module's errors."""



class UnsafeURL(NetguardError):
    """The URL, or an address its host resolves to, is not allowed by the policy."""



# --- addresses -------------------------------------------------------------------------------

def _nets(*specs: str) -> tuple[IPv4Network | IPv6Network, ...]:
    return tuple(IPv4Network(s) if "." in s else IPv6Network(s) for s in specs)



_LOOPBACK = _nets("127.0.0.0/8", "::1/128")

_PRIVATE = _nets("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")

# First match names the reason. Anything else outside these lists must still be global.
_FORBIDDEN: tuple[tuple[IPv4Network | IPv6Network, str], ...] = tuple(
    (net, why) for specs, why in [
        (("0.0.0.0/8", "::/128"), "unspecified ('this network')"),
        (("169.254.0.0/16",), "link-local (includes cloud metadata 169.254.169.254)"),
        (("fe80::/10",), "link-local"),
        (("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32", "3fff::/20"),
         "documentation range"),
        (("198.18.0.0/15",), "benchmarking range"),
        (("192.0.0.0/24", "2001::/23"), "IETF protocol assignments (includes Teredo)"),
        (("192.88.99.0/24",), "6to4 relay anycast"),
        (("255.255.255.255/32",), "broadcast"),
        (("224.0.0.0/4", "ff00::/8"), "multicast"),
        (("240.0.0.0/4",), "reserved"),
        (("::/96",), "IPv4-compatible IPv6 (deprecated)"),
        (("64:ff9b:1::/48",), "local-use NAT64"),
        (("100::/64",), "discard-only"),
        (("fec0::/10",), "site-local (deprecated)"),
    ] for net in _nets(*specs))

_GLOBAL_UNICAST_V6 = IPv6Network("2000::/3")

_NAT64 = IPv6Network("64:ff9b::/96")



def classify_address(address: IPAddress | str) -> tuple[AddressKind, str]:
    """What kind of address this is, and a short reason for messages.

    IPv6 forms that carry an IPv4 address are judged by that address: IPv4-mapped
    (``::ffff:a.b.c.d``, which the kernel really connects to as IPv4) inherits its
    kind; NAT64 (``64:ff9b::/96``) and 6to4 (``2002::/16``) are public only when the
    embedded address is, since they are gateways to it. Teredo and IPv4-compatible
    addresses are refused outright: they are deprecated and never needed for a download.
    """
    ip = ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, IPv6Address):
        ip = ip_address(str(ip).partition("%")[0]) if ip.scope_id else ip
        if ip.ipv4_mapped is not None:
            kind, why = classify_address(ip.ipv4_mapped)
            return kind, f"IPv4-mapped {why}"
        embedded = (IPv4Address(int(ip) & 0xFFFFFFFF) if ip in _NAT64
                    else ip.sixtofour)
        if embedded is not None:
            kind, why = classify_address(embedded)
            label = "NAT64" if ip in _NAT64 else "6to4"
            return ("public", "public") if kind == "public" else (
                "forbidden", f"{label} address embedding {embedded} ({why})")
    if any(ip in net for net in _LOOPBACK):
        return "loopback", "loopback"
    if any(ip in net for net in _PRIVATE):
        return "private", "private network"
    for net, why in _FORBIDDEN:
        if ip.version == net.version and ip in net:
            return "forbidden", why
    if isinstance(ip, IPv6Address) and ip not in _GLOBAL_UNICAST_V6:
        return "forbidden", "not global unicast IPv6"
    if ip.is_multicast or ip.is_reserved or not ip.is_global:
        return "forbidden", "not globally routable"
    return "public", "public"



class AddressPolicy(BaseModel):
    """Which addresses outbound requests may reach: public ones, plus what is enabled here.

    Link-local (cloud metadata), multicast, reserved and similar ranges are never
    allowed. ``allow_private`` admits RFC 1918, carrier-grade NAT (100.64/10) and IPv6
    unique-local addresses; ``allow_loopback`` admits 127/8 and ``::1``. Both exist for
    on-premises deployments and tests; production keeps the defaults.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    allow_private: bool = False
    allow_loopback: bool = False

    def refusal(self, address: IPAddress | str) -> str | None:
        """Why ``address`` is refused, or None when it is allowed."""
        kind, why = classify_address(address)
        if (kind == "public" or (kind == "loopback" and self.allow_loopback)
                or (kind == "private" and self.allow_private)):
            return None
        return why

    def allows(self, address: IPAddress | str) -> bool:
        return self.refusal(address) is None



# --- URLs ------------------------------------------------------------------------------------

def _ipv4_part(text: str) -> int:
    if text[:2].lower() == "0x":
        return int(text[2:] or "0", 16)
    if len(text) > 1 and text[0] == "0":
        return int(text, 8)
    if not text.isdigit():
        raise ValueError(text)
    return int(text)



def parse_host(host: str) -> IPAddress | None:
    """The address a URL host denotes, or None when it is a name to resolve.

    Numeric hosts are read the way libc's ``inet_aton`` and the WHATWG URL standard
    do, so ``2130706433``, ``0177.0.0.1``, ``0x7f.1`` and ``127.1`` are all 127.0.0.1:
    a host whose last label is a number is an IPv4 address or invalid, never a name.

    Raises:
        ValueError: a numeric host that is not a valid address.
    """
    host = host.strip("[]")
    if ":" in host:
        return IPv6Address(host)
    labels = host.split(".")
    if len(labels) > 1 and labels[-1] == "":
        labels.pop()
    last = labels[-1]
    if not (last.isascii() and (last.isdigit() or last[:2].lower() == "0x")):
        return None
    if len(labels) > 4:
        raise ValueError(f"{host!r} is not a valid IPv4 address")
    try:
        parts = [_ipv4_part(label) for label in labels]
    except ValueError:
        raise ValueError(f"{host!r} is not a valid IPv4 address") from None
    *head, tail = parts
    if any(p > 255 for p in head) or tail >= 256 ** (5 - len(parts)):
        raise ValueError(f"{host!r} is not a valid IPv4 address")
    value = tail
    for i, part in enumerate(head):
        value += part << (8 * (3 - i))
    return IPv4Address(value)



_PRIVATE_SUFFIXES = (".local", ".internal", ".home.arpa", ".lan", ".intranet", ".corp")



def _check(url: httpx.URL, policy: AddressPolicy) -> None:
    if url.scheme not in ("http", "https"):
        raise UnsafeURL("only http and https URLs are allowed")
    if url.userinfo:
        raise UnsafeURL("credentials in the URL are not allowed")
    host = url.raw_host.decode("ascii").lower()
    if not host or "%" in host:
        raise UnsafeURL("the URL has no valid host")
    try:
        address = parse_host(host)
    except ValueError as exc:
        raise UnsafeURL(str(exc)) from None
    if address is not None:
        why = policy.refusal(address)
        if why:
            raise UnsafeURL(f"{host} is not a public address ({why})")
        return
    name = host.rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        if not policy.allow_loopback:
            raise UnsafeURL(f"{name} is not a public host (loopback)")
    elif ("." not in name or name.endswith(_PRIVATE_SUFFIXES)) and not policy.allow_private:
        raise UnsafeURL(f"{name} is not a public host name")



def check_url(url: str | httpx.URL, policy: AddressPolicy) -> None:
    """Refuse URLs that are plainly not public, without DNS (early request validation).

    Checks the scheme (http or https), that there are no credentials, and that a
    literal address (in any numeric form a resolver accepts) is allowed. Host names
    are not resolved here: ``localhost``, single-label names and private-use suffixes
    such as ``.internal`` or ``.local`` are refused, but a public-looking name may
    still resolve to a private address; that is caught at connect time.

    Raises:
        UnsafeURL: with a message fit for the client.
    """
    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise UnsafeURL(f"not a valid URL: {exc}") from None
    _check(parsed, policy)
