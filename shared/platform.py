"""What the app knows of where it runs."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit

# The names of this machine: where nothing crosses a network.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def running_in_azure(environ: Mapping[str, str]) -> bool:
    """The platform sets these on every App Service / Functions instance; no local run does."""
    return bool(environ.get("WEBSITE_INSTANCE_ID") or environ.get("WEBSITE_SITE_NAME"))


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A request header by its name in any case (the worker's headers are case-insensitive, a
    plain mapping is not)."""
    name = name.lower()
    return next((v for k, v in headers.items() if k.lower() == name), None)


def not_local(headers: Mapping[str, str]) -> str | None:
    """Why a request did not come to and from this machine, or None when it did: its Host
    names this machine (a page elsewhere that reached it by DNS rebinding names its own), and
    any proxy in between says it came from here (X-Forwarded-For, as the local host sets it).
    Off the platform, the only way to tell."""
    host = header(headers, "host") or ""
    try:
        name = urlsplit(f"//{host}").hostname
    except ValueError:
        name = None
    if not _loopback(name):
        return f"it was sent to {host[:100]!r}, not to this machine"
    forwarded = [a.strip() for a in (header(headers, "x-forwarded-for") or "").split(",")]
    if any(not _loopback(_address(a)) for a in forwarded if a):
        return "it came from another machine (X-Forwarded-For)"
    return None


def _address(entry: str) -> str | None:
    """The address of an X-Forwarded-For entry: ``a``, ``a:port``, ``[v6]`` or ``[v6]:port``."""
    if entry.startswith("["):
        address, bracket, rest = entry[1:].partition("]")
        return address if bracket and (not rest or (rest[1:].isdigit() and rest[0] == ":")) \
            else None
    return entry.split(":")[0] if entry.count(":") == 1 else entry


def _loopback(name: str | None) -> bool:
    if name is None:
        return False
    if name.lower().rstrip(".") == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    # An IPv4 address written as IPv6 (::ffff:127.0.0.1) is the IPv4 one, on every Python.
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return (mapped or address).is_loopback
