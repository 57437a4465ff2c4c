"""What a valid name is: Linux interface names and Kubernetes object names.

Each check returns None for a valid name, or a short reason that the caller
puts after the object, link and field it names. The rules are the kernel's and
the API server's, so a name accepted here is one they accept too.
"""

from __future__ import annotations

import re

# IFNAMSIZ is 16 bytes including the terminating NUL.
MAX_INTERFACE_BYTES = 15

# RFC 1123 label, as Kubernetes uses it (lowercase only).
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_DNS_LABEL = 63
MAX_DNS_SUBDOMAIN = 253


def interface_name_problem(name: str) -> str | None:
    """Why `name` cannot be a Linux interface name, or None if it can.

    The one check every layer uses (the model, the link drivers, the CNI
    protocol): the kernel's `dev_valid_name` on the name's UTF-8 bytes, so 1 to
    15 bytes, not `.` or `..`, and no `/`, `:`, NUL or whitespace; and the name
    must be text that has a UTF-8 encoding (no lone surrogates), since that
    encoding is what netlink carries.
    """
    if not name:
        return "interface name is required"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return f"interface name {name!r} is not valid UTF-8 text"
    if size > MAX_INTERFACE_BYTES:
        return f"interface name {name!r} is {size} bytes, at most {MAX_INTERFACE_BYTES} allowed"
    if name in (".", ".."):
        return f"interface name {name!r} is not allowed"
    for char in name:
        if char in "/:\0" or char.isspace():
            return f"interface name {name!r} must not contain {char!r}"
    return None


def dns_label_problem(name: str) -> str | None:
    """Why `name` is not a DNS-1123 label (a namespace name), or None.

    Lowercase letters, digits and `-`, starting and ending with a letter or
    digit, at most 63 characters.
    """
    if not name:
        return "required"
    if len(name) > MAX_DNS_LABEL:
        return f"{name!r} is {len(name)} characters, at most {MAX_DNS_LABEL} allowed"
    if not _DNS_LABEL.fullmatch(name):
        return (
            f"{name!r} is not a DNS-1123 label (lowercase letters, digits and '-', "
            "starting and ending with a letter or digit)"
        )
    return None


def dns_subdomain_problem(name: str) -> str | None:
    """Why `name` is not a DNS-1123 subdomain (a pod name), or None.

    Dot-separated DNS-1123 labels, at most 253 characters in all.
    """
    if not name:
        return "required"
    if len(name) > MAX_DNS_SUBDOMAIN:
        return f"{name!r} is {len(name)} characters, at most {MAX_DNS_SUBDOMAIN} allowed"
    if not all(_DNS_LABEL.fullmatch(label) for label in name.split(".")):
        return (
            f"{name!r} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', "
            "each part starting and ending with a letter or digit)"
        )
    return None
