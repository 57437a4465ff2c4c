"""Persistent TAPs: the pod-side end of a gRPC wire (docs/design.md §4, §5).

A TAP is created persistent, so it outlives the fd that made it: the daemon and
its workers can restart and re-attach by name (`open_tap` on an existing TAP
attaches to it) while the pod keeps its interface, addresses and routes.

With `offloads` the TAP speaks IFF_VNET_HDR: every frame read or written starts
with a 10-byte virtio-net header, and the kernel hands over TCP segments of up
to GSO_MAX_SIZE bytes with checksums left to the far end. Both ends of a wire
must agree on `offloads`.
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
from dataclasses import dataclass

from pyroute2 import IPRoute

from meshwire.base import defaults
from meshwire.base.netns_thread import call_in_netns

TUNSETIFF = 0x400454CA
TUNSETPERSIST = 0x400454CB
TUNSETOFFLOAD = 0x400454D0
TUNGETIFF = 0x800454D2
TUNSETCARRIER = 0x400454E2
SIOCSIFMTU = 0x8922
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
IFF_VNET_HDR = 0x4000
TUN_F_CSUM = 0x01
TUN_F_TSO4 = 0x02
TUN_F_TSO6 = 0x04
TUN_F_TSO_ECN = 0x08
OFFLOADS = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN
VNET_HDR_LEN = 10
# Largest GSO packet the kernel may hand us: with the Ethernet, VLAN and
# virtio-net headers it still fits the batch format's u16 frame length.
GSO_MAX_SIZE = 65000
MAX_MTU = 65521
_IFREQ = struct.Struct("16sH22x")


class TapError(OSError):
    """A TAP that cannot be opened or configured; the message names it."""


@dataclass(frozen=True, slots=True)
class TapSpec:
    name: str
    mtu: int = defaults.MTU
    offloads: bool = True


def open_tap(spec: TapSpec) -> int:
    """A nonblocking fd on TAP `spec.name` in the calling thread's netns.

    Creates the TAP persistent, or attaches to the existing one of that name,
    and (re)applies MTU and offloads. Admin state, addresses and carrier are
    left as they are. Raises TapError naming the TAP, e.g. when the name is
    taken by another kind of interface or another fd holds the TAP.
    """
    if not 68 <= spec.mtu <= MAX_MTU:
        raise TapError(f"TAP {spec.name}: mtu {spec.mtu} outside 68..{MAX_MTU}")
    if not 0 < len(spec.name.encode()) < 16:
        raise TapError(f"TAP {spec.name!r}: an interface name is 1 to 15 bytes")
    flags = IFF_TAP | IFF_NO_PI | (IFF_VNET_HDR if spec.offloads else 0)
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, TUNSETIFF, _IFREQ.pack(spec.name.encode(), flags))
        fcntl.ioctl(fd, TUNSETOFFLOAD, OFFLOADS if spec.offloads else 0)
        fcntl.ioctl(fd, TUNSETPERSIST, 1)
        _set_mtu_and_gso(spec)
    except OSError as exc:
        os.close(fd)
        raise TapError(exc.errno, f"TAP {spec.name}: {exc.strerror or exc}") from None
    return fd


def open_tap_in(netns: str, spec: TapSpec) -> int:
    """`open_tap` inside the netns at path `netns`, without forking."""
    return call_in_netns(netns, lambda: open_tap(spec))


def remove_tap_in(netns: str, name: str) -> None:
    """Deletes TAP `name` in `netns`, even while fds are attached (their reads and
    writes then fail). A TAP that is not there is success."""

    def delete() -> None:
        with IPRoute() as ipr:
            for index in ipr.link_lookup(ifname=name):
                ipr.link("del", index=index)

    call_in_netns(netns, delete)


def tap_info(fd: int) -> tuple[str, bool]:
    """(name, offloads) of the TAP behind `fd`."""
    name, flags = _IFREQ.unpack(fcntl.ioctl(fd, TUNGETIFF, bytes(_IFREQ.size)))
    return name.rstrip(b"\0").decode(), bool(flags & IFF_VNET_HDR)


def set_carrier(fd: int, up: bool) -> None:
    """Carrier on the TAP: a wire shows carrier only while its far end is ready."""
    fcntl.ioctl(fd, TUNSETCARRIER, struct.pack("i", int(up)))


def _set_mtu_and_gso(spec: TapSpec) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, SIOCSIFMTU, struct.pack("16si20x", spec.name.encode(), spec.mtu))
    with IPRoute() as ipr:
        (index,) = ipr.link_lookup(ifname=spec.name)
        ipr.link("set", index=index, gso_max_size=GSO_MAX_SIZE)
