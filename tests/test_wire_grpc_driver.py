"""grpc link ends: a pod end in the pod's netns, stitched to a persistent, marked TAP in
the node's netns that is handed to the wire manager.

Each test has a pod netns and a node netns of its own (TAPs are born there,
under the row's temporary name, never in the real root netns); the wire
manager is `RecordingEnds`, which keeps the fds it is handed as the real one
would (a new fd replaces and closes the old one) and logs each call.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
from links_helpers import (
    Namespaces,
    addresses,
    grpc_row,
    ip,
    links,
    namespaces,
    needs_root,
    netns_name,
    reaper,
    wait_until,
)

from meshwire.control.links.aside import Reaper
from meshwire.control.links.driver import Drivers
from meshwire.control.links.driver_errors import LinkError, SpecError
from meshwire.control.links.iface_names import NodeRole, Role, node_name, temp_name
from meshwire.control.tables.links import LinkKind, LinkRow
from meshwire.control.wire.grpc_driver import GrpcDriver
from meshwire.control.wire.types import TapRef
from meshwire.dataplane.tap import TapSpec, open_tap_in, tap_info

pytestmark = [needs_root, pytest.mark.root]
__all__ = ["namespaces", "reaper"]

KEY = "lab/5/r1"
MARK = "meshwire:lab/5"
TAP = node_name(KEY, NodeRole.TAP)
WAIT = 30.0


class RecordingEnds:
    """A `WireEnds` that holds one fd per row key, as the wire manager does, and logs calls."""

    def __init__(self) -> None:
        self.fds: dict[str, int] = {}
        self.taps: dict[str, TapRef] = {}
        # "attach <key> fd" (a new fd handed over), "attach <key> none", "detach <key>".
        self.log: list[str] = []

    def held(self, key: str) -> TapRef | None:
        return self.taps.get(key)

    def attach(self, row: LinkRow, tap: TapRef, fd: int | None) -> None:
        self.log.append(f"attach {row.key} {'none' if fd is None else 'fd'}")
        if fd is None:
            if self.taps.get(row.key) != tap:
                raise LinkError(row.key, row.local.netns, row.local.intf, "no fd held there")
            return
        old = self.fds.pop(row.key, None)
        if old is not None:
            os.close(old)
        self.fds[row.key], self.taps[row.key] = fd, tap

    def detach(self, key: str) -> None:
        self.log.append(f"detach {key}")
        self.taps.pop(key, None)
        fd = self.fds.pop(key, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        """The daemon exits: every fd it held is closed (the TAPs stay, they are persistent)."""
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        self.taps.clear()


@pytest.fixture
def new_ends() -> Iterator[Callable[[], RecordingEnds]]:
    made: list[RecordingEnds] = []

    def make() -> RecordingEnds:
        made.append(RecordingEnds())
        return made[-1]

    try:
        yield make
    finally:
        for ends in made:
            ends.close()


@pytest.fixture
def pod(namespaces: Namespaces) -> str:
    return namespaces.add("pod")


@pytest.fixture
def host(namespaces: Namespaces) -> str:
    return namespaces.add("host")


@pytest.fixture
def driver_for(host: str, reaper: Reaper) -> Callable[..., GrpcDriver]:
    def make(ends: RecordingEnds, offloads: bool = True) -> GrpcDriver:
        return GrpcDriver(ends, offloads=offloads, host_netns=host, reaper=reaper)

    return make


def tap_ref(host: str) -> TapRef:
    st = os.stat(host)
    return TapRef((st.st_dev, st.st_ino), links(host)[TAP]["ifindex"])


def identity(netns: str, intf: str) -> tuple[object, ...]:
    """What names an interface to what uses it (its carrier's operstate settles later)."""
    found = links(netns)[intf]
    return tuple(found[key] for key in ("ifindex", "linkinfo", "address", "mtu", "ifalias"))


def route_destinations(netns: str) -> set[str]:
    out = ip("-n", netns_name(netns), "-o", "route", "show", "dev", "eth1")
    return {line.split()[0] for line in out.splitlines()}


@pytest.mark.parametrize("offloads", [True, False], ids=["offloads", "no-offloads"])
@pytest.mark.parametrize("mtu", [1500, 9000], ids=["mtu1500", "jumbo"])
def test_a_grpc_link_end_is_a_pod_end_on_a_marked_persistent_tap(
    pod: str,
    host: str,
    new_ends: Callable[[], RecordingEnds],
    driver_for: Callable[..., GrpcDriver],
    offloads: bool,
    mtu: int,
) -> None:
    ends = new_ends()
    driver_for(ends, offloads).update(grpc_row(pod, mtu=mtu))

    device = links(host)[TAP]
    assert device["linkinfo"]["info_kind"] == "tun"
    assert device["linkinfo"]["info_data"]["type"] == "tap"
    assert device["linkinfo"]["info_data"]["vnet_hdr"] is offloads
    assert device["linkinfo"]["info_data"]["persist"] is True
    assert device["ifalias"] == MARK
    assert device["mtu"] == mtu
    assert "UP" in device["flags"]
    end = links(pod)["eth1"]
    assert end["linkinfo"]["info_kind"] == "veth"
    assert end["ifalias"] == MARK and end["mtu"] == mtu and "UP" in end["flags"]
    assert addresses(pod, "eth1") == {"10.0.0.1/30"}
    assert set(links(pod)) == {"lo", "eth1"}
    assert temp_name(KEY, Role.TAP) not in links(host)
    assert ends.log == [f"attach {KEY} fd"]


def test_the_fd_handed_to_the_manager_is_attached_to_the_tap(
    pod: str,
    host: str,
    new_ends: Callable[[], RecordingEnds],
    driver_for: Callable[..., GrpcDriver],
) -> None:
    ends = new_ends()
    driver_for(ends).update(grpc_row(pod))

    assert tap_info(ends.fds[KEY]) == (TAP, True)
    assert ends.held(KEY) == tap_ref(host)


def test_a_second_update_with_the_fd_held_changes_nothing(
    pod: str,
    host: str,
    new_ends: Callable[[], RecordingEnds],
    driver_for: Callable[..., GrpcDriver],
) -> None:
    ends = new_ends()
    driver = driver_for(ends)
    driver.update(grpc_row(pod))
    before, fd = (identity(pod, "eth1"), identity(host, TAP)), ends.fds[KEY]

    driver.update(grpc_row(pod))

    assert (identity(pod, "eth1"), identity(host, TAP)) == before
    assert addresses(pod, "eth1") == {"10.0.0.1/30"}
    assert ends.log == [f"attach {KEY} fd", f"attach {KEY} none"]
    assert ends.fds[KEY] == fd and tap_info(fd) == (TAP, True)


def test_a_restarted_daemon_attaches_to_the_existing_tap_without_recreating_anything(
    pod: str,
    host: str,
    new_ends: Callable[[], RecordingEnds],
    driver_for: Callable[..., GrpcDriver],
) -> None:
    first = new_ends()
    driver_for(first).update(grpc_row(pod))
    ip("-n", netns_name(pod), "route", "add", "198.51.100.0/24", "dev", "eth1")  # the NOS's
    index, tap = links(pod)["eth1"]["ifindex"], links(host)[TAP]["ifindex"]
    first.close()  # the daemon exits; its TAP stays

    again = new_ends()
    driver_for(again).update(grpc_row(pod))

    assert links(pod)["eth1"]["ifindex"] == index
    assert links(host)[TAP]["ifindex"] == tap
    assert addresses(pod, "eth1") == {"10.0.0.1/30"}
    assert "198.51.100.0/24" in route_destinations(pod)
    assert again.log == [f"attach {KEY} fd"]
    assert tap_info(again.fds[KEY]) == (TAP, True)
    assert again.held(KEY) == tap_ref(host)


def test_a_tap_still_held_by_an_exiting_worker_is_retried_and_left_as_it_is(
    pod: str,
    host: str,
    new_ends: Callable[[], RecordingEnds],
    driver_for: Callable[..., GrpcDriver],
) -> None:
    old = new_ends()
    driver_for(old).update(grpc_row(pod))
    before = links(pod)["eth1"]["ifindex"], links(host)[TAP]["ifindex"]

    # A new daemon while the old one's fd is still open: attaching is refused for now.
    again = new_ends()
    with pytest.raises(LinkError) as caught:
        driver_for(again).update(grpc_row(pod))
    assert "lab/5" in str(caught.value)
    assert (links(pod)["eth1"]["ifindex"], links(host)[TAP]["ifindex"]) == before
    assert again.log == []

    old.close()
    driver_for(again).update(grpc_row(pod))
    assert links(pod)["eth1"]["ifindex"] == before[0]
    assert again.log == [f"attach {KEY} fd"]


@pytest.mark.parametrize("new_ip", ["10.0.1.1/30", "2001:db8::1/64"], ids=["v4", "v6"])
def test_a_changed_local_ip_moves_the_address(
    pod: str,
    new_ends: Callable[[], RecordingEnds],
    driver_for: Callable[..., GrpcDriver],
    new_ip: str,
) -> None:
    ends = new_ends()
    driver = driver_for(ends)
    driver.update(grpc_row(pod, local_ip="10.0.0.1/30"))
    index = links(pod)["eth1"]["ifindex"]

    driver.update(grpc_row(pod, local_ip=new_ip))

    assert addresses(pod, "eth1") == {new_ip}
    assert links(pod)["eth1"]["ifindex"] == index
    assert ends.log[-1] == f"attach {KEY} none"


def test_a_pod_restarted_in_a_new_netns_gets_a_new_pod_end_on_the_same_tap(
    namespaces: Namespaces,
    pod: str,
    host: str,
    new_ends: Callable[[], RecordingEnds],
    driver_for: Callable[..., GrpcDriver],
) -> None:
    ends = new_ends()
    driver = driver_for(ends)
    driver.update(grpc_row(pod))
    held = ends.held(KEY)

    namespaces.recreate(pod)
    driver.update(grpc_row(pod))

    end = links(pod)["eth1"]
    assert end["linkinfo"]["info_kind"] == "veth"
    assert end["ifalias"] == MARK and "UP" in end["flags"]
    assert addresses(pod, "eth1") == {"10.0.0.1/30"}
    assert ends.log == [f"attach {KEY} fd", f"attach {KEY} none"]
    assert ends.held(KEY) == tap_ref(host) == held


def test_a_pod_whose_new_sandbox_has_a_new_netns_path_keeps_its_wire(
    namespaces: Namespaces,
    pod: str,
    new_ends: Callable[[], RecordingEnds],
    driver_for: Callable[..., GrpcDriver],
) -> None:
    # A runtime gives each sandbox its own netns path: the row's end moves, the
    # wire (id, stream, far end, TAP) does not.
    ends = new_ends()
    drivers = Drivers({LinkKind.GRPC: driver_for(ends)})
    before, after = grpc_row(pod), grpc_row(namespaces.add("next"))
    drivers.update(before)

    drivers.move(before, after)
    drivers.update(after)

    assert ends.log == [f"attach {KEY} fd", f"attach {KEY} none"]
    assert "eth1" in links(after.local.netns)
    # The old end goes with its node side, set aside and deleted a moment later.
    wait_until(lambda: "eth1" not in links(pod), WAIT)


def test_a_grpc_link_that_becomes_another_kind_stops_its_wire_and_keeps_the_pod_end(
    pod: str,
    host: str,
    new_ends: Callable[[], RecordingEnds],
    driver_for: Callable[..., GrpcDriver],
) -> None:
    ends = new_ends()
    drivers = Drivers({LinkKind.GRPC: driver_for(ends)})
    before = grpc_row(pod)
    drivers.update(before)
    index = links(pod)["eth1"]["ifindex"]

    drivers.move(before, replace(before, kind=LinkKind.VXLAN, vni=5007))

    assert ends.log == [f"attach {KEY} fd", f"detach {KEY}"]
    assert KEY not in ends.fds and TAP not in links(host)
    assert links(pod)["eth1"]["ifindex"] == index


def test_delete_removes_the_tap_and_the_pod_end_and_stops_the_wire_and_is_idempotent(
    pod: str,
    host: str,
    new_ends: Callable[[], RecordingEnds],
    driver_for: Callable[..., GrpcDriver],
) -> None:
    ends = new_ends()
    driver = driver_for(ends)
    row = grpc_row(pod)
    driver.update(row)

    driver.delete(row)
    assert "eth1" not in links(pod) and TAP not in links(host)
    assert ends.log[-1] == f"detach {KEY}" and KEY not in ends.fds

    driver.delete(row)
    ip("netns", "del", netns_name(pod))
    driver.delete(row)  # a vanished netns is success too
    assert ends.log[1:] == [f"detach {KEY}"] * 3


@pytest.mark.parametrize("kind", ["bridge", "tap"])
def test_a_foreign_interface_holding_the_name_is_a_spec_error_and_left_untouched(
    pod: str,
    new_ends: Callable[[], RecordingEnds],
    driver_for: Callable[..., GrpcDriver],
    kind: str,
) -> None:
    # The NOS made its own eth1 (a TAP too, in the second case): it carries no mark.
    if kind == "tap":
        ip("-n", netns_name(pod), "tuntap", "add", "dev", "eth1", "mode", "tap")
    else:
        ip("-n", netns_name(pod), "link", "add", "eth1", "type", "bridge")
    foreign = links(pod)["eth1"]
    ends = new_ends()
    driver = driver_for(ends)

    with pytest.raises(SpecError) as caught:
        driver.update(grpc_row(pod))

    message = str(caught.value)
    assert "lab/5" in message and pod in message and "'eth1'" in message
    assert links(pod)["eth1"] == foreign
    assert set(links(pod)) == {"lo", "eth1"}
    assert ends.log == []
    driver.delete(grpc_row(pod))
    assert links(pod)["eth1"] == foreign


@pytest.mark.parametrize("marked", [True, False], ids=["marked", "unmarked"])
def test_a_tap_left_under_the_temporary_name_by_a_crash_is_cleared_by_the_next_update(
    pod: str,
    host: str,
    new_ends: Callable[[], RecordingEnds],
    driver_for: Callable[..., GrpcDriver],
    marked: bool,
) -> None:
    row = grpc_row(pod)
    # The crash came after creation (and, if marked, after marking), before the rename.
    temp = temp_name(row.key, Role.TAP)
    os.close(open_tap_in(host, TapSpec(temp)))
    if marked:
        ip("-n", netns_name(host), "link", "set", temp, "alias", MARK)
    assert temp in links(host)

    ends = new_ends()
    driver_for(ends).update(row)

    assert temp not in links(host)
    assert links(host)[TAP]["ifalias"] == MARK
    assert ends.log == [f"attach {KEY} fd"]
