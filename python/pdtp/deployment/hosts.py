"""Node addresses: validated, because they end up in shell scripts, JSON configs, proxy
arguments and URLs (``http://HOST:PORT``) that vLLM's proxies build by string formatting."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Sequence
from typing import Any

from ..errors import ArgumentTypeError, InvalidArgumentError


class HostsNeededError(InvalidArgumentError):
    """A plan spans several nodes and no host addresses were given."""


_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
LOCALHOST = "127.0.0.1"


def check_host(field: str, value: Any) -> str:
    """An IPv4 address or a DNS host name (RFC 1123), else an error naming ``field``. IPv6
    is refused: vLLM's proxies write ``http://{host}:{port}`` without brackets.

    Returned in one spelling per host (DNS names are case-insensitive and ``node-a.`` is
    ``node-a``): lowercase, without the root's trailing dot, an IPv4 address in its
    canonical form — so every collision check compares hosts, not spellings."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{field} must be a string, got {type(value).__name__}")
    text = value.strip()
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        ip = None
    if ip is not None:
        if ip.version == 6:
            raise InvalidArgumentError(
                f"{field} must be an IPv4 address or a host name, got IPv6 {value!r} (vLLM's "
                "proxies build http://HOST:PORT URLs without brackets)"
            )
        return str(ip)
    labels = text.rstrip(".").split(".")
    if not text or len(text) > 253 or not all(_LABEL.fullmatch(x) for x in labels):
        raise InvalidArgumentError(
            f"{field} must be an IPv4 address or a host name (letters, digits, '-' and '.'), "
            f"got {value!r}"
        )
    if all(x.isdigit() for x in labels):
        raise InvalidArgumentError(f"{field} is not a valid IPv4 address: {value!r}")
    return text.rstrip(".").lower()


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def node_hosts(value: Any, field: str = "node_hosts") -> list[str] | None:
    """``"h0,h1"`` or a list of hosts, validated (None passes through)."""
    if value is None:
        return None
    if isinstance(value, str):
        items = [x for x in (p.strip() for p in value.split(",")) if x]
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        raise ArgumentTypeError(
            f"{field} must be a list of hosts or 'h0,h1,...', got {type(value).__name__}"
        )
    hosts = [check_host(f"{field}[{i}]", h) for i, h in enumerate(items)]
    if not hosts:
        raise InvalidArgumentError(f"{field} must name at least one host")
    seen: dict[str, int] = {}
    for i, h in enumerate(hosts):
        if h in seen:
            raise InvalidArgumentError(
                f"{field}[{i}] repeats {field}[{seen[h]}] ({items[i]!r} is {h!r}): one host per "
                "node"
            )
        seen[h] = i
    return hosts


# A hosts file names one node per line: 1 MiB is tens of thousands of nodes.
MAX_HOSTS_FILE_BYTES = 1 << 20


def read_hosts_file(path: str | os.PathLike[str]) -> list[str]:
    """One host per line (the first word; ``#`` starts a comment), like an MPI hostfile."""
    from .._io import read_capped_text

    # Capped as read: `--hosts-file /dev/zero` is refused at once, a huge file after 1 MiB.
    lines = read_capped_text(path, limit=MAX_HOSTS_FILE_BYTES, what="hosts_file").splitlines()
    words = [line.split("#", 1)[0].split() for line in lines]
    hosts = node_hosts([w[0] for w in words if w], field="hosts_file")
    assert hosts is not None
    return hosts
