"""HOST:PORT strings: the one place that knows an IPv6 host is written in brackets.

`split("[::1]:51111")` is `("::1", 51111)` and `join("::1", 51111)` gives the
string back, so an address read from config can be bound, dialled and printed
without a second pair of brackets. An unbracketed IPv6 host ("::1:51111") is
refused: its port cannot be told from its last group.
"""

from __future__ import annotations

import ipaddress


def split(value: str) -> tuple[str, int]:
    """(host, port) of HOST:PORT, an IPv6 host without its brackets; ValueError if malformed."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if ":" not in host:
            raise ValueError(
                f"expected HOST:PORT, brackets only around an IPv6 host, got {value!r}"
            )
    elif ":" in host or "[" in host or "]" in host:
        raise ValueError(f"expected HOST:PORT, an IPv6 host in brackets, got {value!r}")
    return host, int(port)


def join(host: str, port: int) -> str:
    """HOST:PORT, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def canonical(host: str) -> str:
    """One spelling per address ("2001:DB8::0:1" and "2001:db8::1" give the latter), so
    hosts compare as strings; a name that is no address is kept as it is."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host
