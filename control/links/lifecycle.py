"""How every kind creates and deletes an interface, and when it may touch one.

Creation: the kernel takes no alias at creation, so an interface created
under its final name exists unmarked for a moment, and one left so by a
crash would look foreign forever (a `SpecError` no retry can clear). So
what netlink creates (veth, vxlan, macvlan) is created under its final name
in the interface group `iface_names.BUILD_GROUP`, with its MAC, then marked, taken
out of the group and raised in one request (`create_marked`). A crash in
between leaves a half-made interface (`Iface.half_made`): `claim` deletes it
when its row needs the name, and pruning when no row does. A TAP (made by
ioctl, which sets no group) is created under its row's temporary name
(`iface_names.temp_name`), marked, then renamed (`create_and_rename`); a leftover
temporary name is removed by the row's next attempt or its deletion.

Each interface is created right in its pod netns (IFLA_NET_NS_FD in the
request made from the host netns, so a vxlan's socket and a macvlan's lower
device stay the host's). Creating in place instead of moving a finished
interface between namespaces saves the kernel's synchronize_net (an RCU
grace period under the rtnl lock) on every move.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from . import iface
from .aside import Reaper
from .driver_errors import LinkError, SpecError
from .iface_names import Mark
from .netns import Netns, NetnsGone, NotANetns, netlink, open_netns


@dataclass(frozen=True, slots=True)
class RenameTarget:
    """An interface the create call makes as `temp` in `netns`, to be named `name` there,
    with MAC address `mac` ("": the kernel's random one).

    `ipr` is a netlink socket in `netns` (`netns.netlink`).
    """

    temp: str
    netns: Netns
    ipr: Any
    name: str
    mac: str = ""


def claim(mark: Mark, ipr: Any, netns: str, intf: str) -> iface.Iface | None:
    """The interface holding a row's name `intf` in `netns` (`ipr` talks to it), or None;
    refuses to touch it unless it is this link's.

    A half-made interface (a build cut short) is deleted: None. Any other
    unmarked interface is not meshwire's: `SpecError`, and it is left alone.
    One marked for another link is transient (`LinkError`): that link's removal,
    already queued when a topology renames interfaces, frees the name.
    """
    found = iface.find(ipr, intf)
    if found is None or found.mark == mark:
        return found
    if found.half_made:
        iface.delete(ipr, found.index)
        return None
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


def clear_leftovers(ipr: Any, mark: Mark, temps: Sequence[str], where: str = "(host)") -> None:
    """Delete interfaces left under this row's temporary names in `ipr`'s netns (`where`)."""
    for temp in temps:
        found = iface.find(ipr, temp)
        if found is None:
            continue
        if found.mark is not None and found.mark != mark:
            raise LinkError(
                mark.link,
                where,
                temp,
                f"temporary name is held by meshwire link {found.mark.link} (hash collision)",
            )
        iface.delete(ipr, found.index)


@dataclass(frozen=True, slots=True)
class Target:
    """An interface the create call makes as `name` in `netns`, in `iface_names.BUILD_GROUP`;
    `ipr` is a netlink socket in `netns`. `up`: raised once marked; False leaves it
    down (a pod end's node side, raised when a transport is stitched to it), which
    spares the kernel closing it again, a wait for every CPU under its netlink lock."""

    netns: Netns
    ipr: Any
    name: str
    up: bool = True


def create_marked(
    mark: Mark, create: Callable[[], object], targets: Sequence[Target]
) -> list[iface.Iface]:
    """Call `create` (it makes each target's interface under its final name, in
    `iface_names.BUILD_GROUP`, with its MAC), then mark each, take it out of the group
    and raise it (unless its `up` is False), in one request per interface; returns them
    as the kernel now has them (`fresh`: no address read back, none is there yet).

    On any failure every target still half-made is deleted (for a veth that
    also removes the other end) and the error propagates: a failed attempt
    leaves nothing behind.
    """
    create()
    made = []
    try:
        for target in targets:
            created = iface.find(target.ipr, target.name)
            if created is None or not created.half_made:
                raise LinkError(
                    mark.link, target.netns.path, target.name, "vanished after creation"
                )
            iface.set_link(target.ipr, created.index, alias=mark.format(), group=0, up=target.up)
            made.append(replace(created, mark=mark, up=target.up, group=0, fresh=True))
    except BaseException:
        for target in targets:
            left = iface.find(target.ipr, target.name)
            if left is not None and left.half_made:
                iface.delete(target.ipr, left.index)
        raise
    return made


def create_and_rename(
    mark: Mark, create: Callable[[], object], targets: Sequence[RenameTarget]
) -> list[iface.Iface]:
    """Call `create` (it makes each target's interface as `temp` in its netns), then
    rename each to its `name`, with its `mac`, marked and up; returns them as the
    kernel now has them (`fresh`: no address read back, none is there yet). For
    what cannot be created in a group (a TAP); see `create_marked`.

    The MAC is set in the request that raises the interface, before it is up, so
    nothing ever leaves it with another (nor its IPv6 link-local address derived
    from another). An interface that exists keeps the MAC it has: a NOS may set
    its own.

    Leftovers of an earlier attempt under the temporary names are cleared
    first. On any failure every interface still under a temporary name is
    deleted (for a veth that also removes the other end) and the error
    propagates: a failed attempt leaves nothing behind.
    """
    for target in targets:
        clear_leftovers(target.ipr, mark, [target.temp], target.netns.path)
    create()
    made = []
    try:
        for target in targets:
            created = iface.find(target.ipr, target.temp)
            if created is None:
                raise LinkError(
                    mark.link, target.netns.path, target.temp, "vanished after creation"
                )
            # One request: the kernel sets the MAC, renames, marks and raises it under
            # one lock, so no one ever sees the final name unmarked.
            iface.set_link(
                target.ipr,
                created.index,
                name=target.name,
                alias=mark.format(),
                mac=target.mac,
                up=True,
            )
            # As the kernel has it now, without asking again: only the set changed it.
            made.append(replace(created, name=target.name, mark=mark, up=True, fresh=True))
    except BaseException:
        for target in targets:
            left = iface.find(target.ipr, target.temp)
            if left is not None:
                iface.delete(target.ipr, left.index)
        raise
    return made


def delete_end(
    netns: str, intf: str, kind: str, mark: Mark, temp: str, reaper: Reaper | None = None
) -> None:
    """Delete `intf` in `netns` if it is a `kind` interface marked for this link, and
    whatever a crashed attempt left there under the row's temporary name `temp`.

    With a `reaper`, `intf` is set aside (its name free at once, deleted a
    moment later, see aside.py) instead of deleted in the caller's time.

    A half-made `kind` interface under the name goes too. A gone netns (or a
    path that is no longer one) or a missing interface is
    success. The kind check matters when a link changes kind (a pod moved to
    another node): the new kind's interface may already hold the name, with the
    same mark, by the time the old row is deleted.
    """
    try:
        with open_netns(netns) as ns, netlink(ns) as ipr:
            found = iface.find(ipr, intf)
            if found is not None and found.kind == kind and (found.mark == mark or found.half_made):
                if reaper is None:
                    iface.delete(ipr, found.index)
                else:
                    reaper.set_aside(ipr, ns, found)
            clear_leftovers(ipr, mark, [temp], netns)
    except (NetnsGone, NotANetns):
        return
