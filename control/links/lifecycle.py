"""How every kind creates and deletes an interface, and when it may touch one.

Creation: the kernel takes no alias at creation, so an interface created
directly in a pod netns would exist unmarked for a moment, and one left there by a crash would
look foreign forever (a `SpecError` no retry can clear). Instead the interface is
created in the host netns under its row's temporary name (`names.temp_name`),
marked, and then moved into the pod netns and renamed in one request. A crash
leaves at worst a temporary name in the host netns, which the row's next attempt
(or its deletion) removes, and which pruning sees by its mark.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import iface
from .errors import LinkError, SpecError
from .names import Mark
from .netns import Netns, NetnsGone, NotANetns, move_link, netlink, open_netns


@dataclass(frozen=True, slots=True)
class Placement:
    """Where an interface created as `temp` in the host netns must end up."""

    temp: str
    netns: Netns
    name: str


def claim(mark: Mark, found: iface.Iface | None, netns: str, intf: str) -> None:
    """Refuse to touch `found` (the interface holding a row's name) unless it is this link's.

    An unmarked interface is not meshwire's: `SpecError`, and it is left alone.
    One marked for another link is transient (`LinkError`): that link's removal,
    already queued when a topology renames interfaces, frees the name.
    """
    if found is None or found.mark == mark:
        return
    if found.mark is None:
        raise SpecError(
            mark.link,
            netns,
            intf,
            f"name is taken by an interface meshwire did not create "
            f"(kind {found.kind or 'none'}, ifindex {found.index}); left untouched",
        )
    raise LinkError(
        mark.link, netns, intf, f"name is still held by meshwire link {found.mark.link}"
    )


def clear_leftovers(host: Any, mark: Mark, temps: Sequence[str]) -> None:
    """Delete interfaces left in the host netns under this row's temporary names."""
    for temp in temps:
        found = iface.find(host, temp)
        if found is None:
            continue
        if found.mark is not None and found.mark != mark:
            raise LinkError(
                mark.link,
                "(host)",
                temp,
                f"temporary name is held by meshwire link {found.mark.link} (hash collision)",
            )
        iface.delete(host, found.index)


def create_and_place(
    host: Any, mark: Mark, create: Callable[[], object], placements: Sequence[Placement]
) -> None:
    """Call `create` (it makes the placements' interfaces under their temporary names
    in the host netns), mark each placement's interface, move it.

    On any failure every interface still under a temporary name in the host netns
    is deleted (for a veth that also removes an end already moved) and the error
    propagates: a failed attempt leaves nothing behind.
    """
    temps = [p.temp for p in placements]
    clear_leftovers(host, mark, temps)
    create()
    try:
        indexes = []
        for placement in placements:
            created = iface.find(host, placement.temp)
            if created is None:
                raise LinkError(mark.link, "(host)", placement.temp, "vanished after creation")
            host.link("set", index=created.index, ifalias=mark.format())
            indexes.append(created.index)
        for placement, index in zip(placements, indexes, strict=True):
            move_link(host, index, placement.netns, placement.name)
    except BaseException:
        for temp in temps:
            left = iface.find(host, temp)
            if left is not None:
                iface.delete(host, left.index)
        raise


def delete_end(netns: str, intf: str, kind: str, mark: Mark) -> None:
    """Delete `intf` in `netns` if it is a `kind` interface marked for this link.

    A gone netns (or a path that is no longer one) or a missing interface is
    success. The kind check matters when a link changes kind (a pod moved to
    another node): the new kind's interface may already hold the name, with the
    same mark, by the time the old row is deleted.
    """
    try:
        with open_netns(netns) as ns, netlink(ns) as ipr:
            found = iface.find(ipr, intf)
            if found is not None and found.kind == kind and found.mark == mark:
                iface.delete(ipr, found.index)
    except (NetnsGone, NotANetns):
        return
