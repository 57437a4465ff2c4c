"""`meshwire lab check` proves each link with ARP, ping or a raw frame, and names what is wrong."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_helpers import Lab, StubRuntime, unique_lab
from pyroute2 import IPRoute

from meshwire.tools.lab import netns
from meshwire.tools.lab.kernel import netns_ends
from meshwire.tools.lab.lab_names import netns_path

pytestmark = pytest.mark.root


@pytest.fixture
def lab(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[Lab]:
    # No daemon wires anything: the tests make the links by hand, as a daemon would.
    with unique_lab(tmp_path) as lab:
        rc = lab.run("up", str(lab.file), "--wait", "0", runtime=StubRuntime(tmp_path))
        assert rc == 0
        capsys.readouterr()
        yield lab


def hand_made_veth(lab: Lab, a: tuple[str, str, str], b: tuple[str, str, str]) -> None:
    """A veth from pod a's intf to pod b's intf, each with its (optional) address, both up."""
    (a_pod, a_intf, a_ip), (b_pod, b_intf, b_ip) = a, b
    a_ns, b_ns = f"{lab.prefix}default.{a_pod}", f"{lab.prefix}default.{b_pod}"

    def create() -> None:
        with IPRoute() as ipr, open(netns_path(b_ns)) as peer:
            ipr.link(
                "add",
                ifname=a_intf,
                kind="veth",
                peer={"ifname": b_intf, "net_ns_fd": peer.fileno()},
            )

    def configure(intf: str, ip: str) -> None:
        with IPRoute() as ipr:
            index = ipr.link_lookup(ifname=intf)[0]
            if ip:
                address, prefix = ip.split("/")
                ipr.addr("add", index=index, address=address, prefixlen=int(prefix))
            ipr.link("set", index=index, state="up")

    netns.in_netns(a_ns, create)
    netns.in_netns(a_ns, lambda: configure(a_intf, a_ip))
    netns.in_netns(b_ns, lambda: configure(b_intf, b_ip))


def test_link_without_addresses_passes_a_raw_frame_and_a_missing_link_fails_by_name(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    hand_made_veth(lab, ("r1", "eth2", ""), ("r3", "eth1", ""))

    assert lab.run("check") == 1

    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("FAIL default/1 ")
    assert "default/r1: interface eth1 missing" in lines[0]
    assert lines[1].startswith("ok   default/2 veth frame default/r1:eth2 -- default/r3:eth1")
    assert lines[-1] == "1/2 links ok, 1 failed"


def test_link_with_addresses_answers_arp_for_each_end(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    hand_made_veth(lab, ("r1", "eth1", "10.0.1.1/24"), ("r2", "eth1", "10.0.1.2/24"))
    hand_made_veth(lab, ("r1", "eth2", ""), ("r3", "eth1", ""))

    assert lab.run("check") == 0

    out = capsys.readouterr().out
    assert "ok   default/1 vxlan arp default/r1:eth1 -- default/r2:eth1" in out
    assert out.splitlines()[-1] == "2/2 links ok"


def test_a_link_end_set_down_fails_naming_both_ends_state(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    hand_made_veth(lab, ("r1", "eth2", ""), ("r3", "eth1", ""))

    def down() -> None:
        with IPRoute() as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="eth1")[0], state="down")

    netns.in_netns(f"{lab.prefix}default.r3", down)

    assert lab.run("check") == 1

    out = capsys.readouterr().out
    assert "default/r1: interface eth2 has no carrier; default/r3: interface eth1 is down" in out


def test_status_lists_pods_and_links_with_state_and_frame_counters(
    lab: Lab, capsys: pytest.CaptureFixture[str]
) -> None:
    hand_made_veth(lab, ("r1", "eth2", ""), ("r3", "eth1", ""))
    assert lab.run("check") == 1  # sends frames over link 2
    capsys.readouterr()

    assert lab.run("status", "--json") == 0

    status = json.loads(capsys.readouterr().out)
    pods = {p["pod"]: p for p in status["pods"]}
    assert pods["default/r2"]["node"] == "node2"
    assert pods["default/r2"]["netns"] == f"/var/run/netns/{lab.prefix}default.r2"
    links = {k["link"]: k for k in status["links"]}
    assert links["default/1"]["state"] == "missing"
    assert links["default/1"]["kind"] == "vxlan"  # r1 on node1, r2 on node2
    two = links["default/2"]
    assert (two["kind"], two["state"]) == ("veth", "up")
    assert (two["a"]["pod"], two["a"]["intf"], two["b"]["pod"]) == (
        "default/r1",
        "eth2",
        "default/r3",
    )
    assert two["a"]["tx_packets"] > 0 and two["b"]["rx_packets"] > 0


def test_a_namespace_missing_or_being_deleted_reads_as_having_no_interface(
    tmp_path: Path,
) -> None:
    # `ip netns del` unmounts a namespace's file before it removes it; a lab
    # waiting on links meanwhile (churn moves pods while others wait) reads it
    # as gone, as it soon is, instead of failing on setns's EINVAL.
    unmounted = tmp_path / "unmounted"
    unmounted.write_text("")
    assert netns_ends(str(unmounted)) == {}
    assert netns_ends(str(tmp_path / "missing")) == {}
    assert "lo" in netns_ends("/proc/thread-self/ns/net")


def test_an_end_reads_as_pyroute2_decodes_it(lab: Lab) -> None:
    # netns_ends decodes the link dump itself; each field must match pyroute2's reading.
    hand_made_veth(lab, ("r1", "eth2", "10.9.0.1/30"), ("r3", "eth1", "10.9.0.2/30"))
    ns = f"{lab.prefix}default.r1"

    def pyroute2_view() -> dict[str, object]:
        with IPRoute() as ipr:
            (link,) = ipr.get_links(ifname="eth2")
            stats = link.get_attr("IFLA_STATS64")
            return {
                "mtu": link.get_attr("IFLA_MTU"),
                "mac": link.get_attr("IFLA_ADDRESS"),
                "carrier": link.get_attr("IFLA_CARRIER") == 1,
                "rx_dropped": stats["rx_dropped"],
                "tx_dropped": stats["tx_dropped"],
            }

    end = netns_ends(ns)["eth2"]
    expected = netns.in_netns(ns, pyroute2_view)
    assert end.exists and end.admin_up
    assert {
        "mtu": end.mtu,
        "mac": end.mac,
        "carrier": end.up,
        "rx_dropped": end.rx_dropped,
        "tx_dropped": end.tx_dropped,
    } == expected
    assert len(end.mac) == 17 and end.mtu == 1500
    # Packets sent out of it count: the counters come from the same message.
    before = end.tx_packets
    lab.run("check")
    assert netns_ends(ns)["eth2"].tx_packets > before
