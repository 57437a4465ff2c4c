"""How a same-node link's two node sides could be stitched: tc u32 + mirred (what
meshwire does) against eBPF redirects, beside a direct veth, same run.

    .venv/bin/python bench/stitch_bench.py [--seconds 3] [--repeat 3] [--json FILE]

Four same-node links, pod a -- pod b, each pod end a veth:

  - direct:  one veth pair between the pods (the kernel's floor);
  - u32:     each end's node side stitched to the other's with u32 match-all and a
             mirred redirect to its egress (control/links/tc.py, built by meshwire's
             own veth driver);
  - peer:    the same pair with each u32 filter replaced by a cls_bpf program that
             calls bpf_redirect_peer: the frame skips the far node side and enters
             the far pod end's receive path at once;
  - guarded: bpf_redirect_peer only for frames to the far pod end's own MAC, and
             bpf_redirect to the far node side's egress (as mirred) for the rest.

For each: iperf3 TCP a -> b; 64-byte UDP frames from a as fast as it sends them
(wire_bench's generator), once to a MAC no pod has (counted by b's eth1 and
dropped there: the podif bench's figure) and once to b's own MAC (counted where
b's UDP layer takes them: what reaches the pod's stack); and, for each, how many
frames to the MAC no pod has reached b's UDP layer, which must be none: a frame
for another host that a pod takes as its own is a broken Ethernet.
bpf_redirect_peer hands the frame over as addressed to the device (the kernel
scrubs its packet type), so `peer` delivers them; `guarded` sends those the slow
way, and keeps the frames a pod really gets fast.

Printed: medians of `--repeat` rounds, and each as a ratio of direct. The eBPF
programs are a few instructions assembled here and loaded with the bpf syscall
(prog type SCHED_CLS, direct action). Namespaces are named `mwsb<hex>-*` and
removed at the end, even on failure.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from podif_bench import arguments, direct, eth1, iperf_mbps, remove_namespaces, stitched
from pyroute2 import NetNS
from wire_bench import SINK_MAC, compile_framegen

SYS_BPF = 321  # x86_64
BPF_PROG_LOAD = 5
BPF_PROG_TYPE_SCHED_CLS = 3
BPF_FUNC_REDIRECT = 23
BPF_FUNC_REDIRECT_PEER = 155
# struct __sk_buff: data, data_end.
SKB_DATA, SKB_DATA_END = 76, 80
INSN = struct.Struct("=BBhi")  # code, dst | src << 4, off, imm
CLSACT_INGRESS = "ffff:fff2"


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return INSN.pack(code, (src << 4) | dst, off, imm)


def call(helper: int, ifindex: int) -> bytes:
    """r0 = helper(ifindex, 0); return r0 (TC_ACT_REDIRECT, or a drop)."""
    return (
        insn(0xB7, 1, imm=ifindex)  # r1 = ifindex
        + insn(0xB7, 2, imm=0)  # r2 = 0
        + insn(0x85, imm=helper)  # call
        + insn(0x95)  # exit
    )


def program(ifindex: int, mac: str | None) -> bytes:
    """bpf_redirect_peer to `ifindex`; with `mac`, only for frames to that MAC, and
    bpf_redirect to its egress for the rest."""
    if mac is None:
        return call(BPF_FUNC_REDIRECT_PEER, ifindex)
    raw = bytes.fromhex(mac.replace(":", ""))
    (head,) = struct.unpack("<i", raw[:4])
    (tail,) = struct.unpack("<H", raw[4:])
    # Instructions 0-8 check the MAC, 9-12 redirect to the peer, 13-16 the slow way; a
    # jump's offset counts from the instruction after it.
    slow = 13
    check = (
        insn(0x61, 2, 1, SKB_DATA)  # 0: r2 = skb->data
        + insn(0x61, 3, 1, SKB_DATA_END)  # 1: r3 = skb->data_end
        + insn(0xBF, 4, 2)  # 2: r4 = r2
        + insn(0x07, 4, imm=6)  # 3: r4 += 6
        + insn(0x2D, 4, 3, off=slow - 5)  # 4: if r4 > r3 goto slow
        + insn(0x61, 5, 2, 0)  # 5: r5 = *(u32 *)(r2 + 0)
        + insn(0x56, 5, off=slow - 7, imm=head)  # 6: if w5 != head goto slow
        + insn(0x69, 5, 2, 4)  # 7: r5 = *(u16 *)(r2 + 4)
        + insn(0x56, 5, off=slow - 9, imm=tail)  # 8: if w5 != tail goto slow
    )
    return check + call(BPF_FUNC_REDIRECT_PEER, ifindex) + call(BPF_FUNC_REDIRECT, ifindex)


def load(code: bytes) -> int:
    """The program's fd; OSError with the verifier's log if the kernel refuses it."""
    libc = ctypes.CDLL(None, use_errno=True)
    insns = ctypes.create_string_buffer(code)
    license_ = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(1 << 16)
    attr = bytearray(128)
    struct.pack_into(
        "=IIQQIIQ", attr, 0, BPF_PROG_TYPE_SCHED_CLS, len(code) // INSN.size,
        ctypes.addressof(insns), ctypes.addressof(license_), 1, len(log), ctypes.addressof(log),
    )  # fmt: skip
    buffer = (ctypes.c_char * len(attr)).from_buffer(attr)
    fd = int(libc.syscall(SYS_BPF, BPF_PROG_LOAD, buffer, len(attr)))
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"BPF_PROG_LOAD: {log.value.decode()}")
    return fd


def node_sides(node: str) -> dict[int, str]:
    """ifindex -> name of the node netns's veths (the two node sides)."""
    out = subprocess.run(["ip", "-n", node, "-j", "link"], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return {link["ifindex"]: link["ifname"] for link in json.loads(out) if link["ifname"] != "lo"}


def use_bpf(node: str, pods: tuple[str, str], guarded: bool) -> None:
    """Replace each node side's u32 stitch by a program to the other node side."""
    sides = node_sides(node)
    # A node side's pod end is its veth peer: its ifindex is the node side's iflink.
    macs: dict[int, str] = {}
    for index, name in sides.items():
        iflink = subprocess.run(
            ["ip", "netns", "exec", node, "cat", f"/sys/class/net/{name}/iflink"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        for pod in pods:
            end = eth1(pod)
            if end["ifindex"] == int(iflink):
                macs[index] = end["address"]
    (a, a_name), (b, b_name) = sides.items()
    with NetNS(node) as ns:
        for index, name, to in ((a, a_name, b), (b, b_name, a)):
            subprocess.run(["ip", "netns", "exec", node, "tc", "filter", "del", "dev", name,
                            "ingress"], check=True)  # fmt: skip
            fd = load(program(to, macs[to] if guarded else None))
            try:
                ns.tc("add-filter", "bpf", index, ":1", fd=fd, name="mwsb",
                      parent=CLSACT_INGRESS, classid=1, direct_action=True)  # fmt: skip
            finally:
                os.close(fd)


def udp_received(netns: str) -> int:
    """Datagrams the netns's UDP layer took (to a port or to none)."""
    out = subprocess.run(
        ["ip", "netns", "exec", netns.rsplit("/", 1)[1], "cat", "/proc/net/snmp"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    names, values = [line.split()[1:] for line in out.splitlines() if line.startswith("Udp:")]
    udp = dict(zip(names, map(int, values), strict=True))
    return udp["InDatagrams"] + udp["NoPorts"] + udp["InErrors"]


def send(program_: Path, a: str, b: str, mac: str, seconds: float) -> tuple[float, float, float]:
    """Frames a sent to `mac` a second; b's eth1 counted; b's UDP layer took."""
    rx, udp = eth1(b)["stats64"]["rx"]["packets"], udp_received(b)
    argv = ["nsenter", f"--net={a}", str(program_), "eth1", mac, eth1(a)["address"],
            "10.9.0.1", "10.9.0.2", str(seconds)]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30, check=True)
    took = float(json.loads(run.stdout)["seconds"])
    sent = float(json.loads(run.stdout)["sent"])
    counted = eth1(b)["stats64"]["rx"]["packets"] - rx
    return sent / took, counted / took, (udp_received(b) - udp) / took


def main() -> int:
    args = arguments(__doc__, 3.0).parse_args()
    prefix = f"mwsb{secrets.token_hex(3)}"
    figures = ("tcp_mbps", "sink_frames", "own_mac_frames", "sink_frames_taken")
    runs: dict[str, dict[str, list[float]]] = {}
    try:
        pairs = {"direct": direct(prefix), "u32": stitched(prefix)}
        for name, guarded in (("peer", False), ("guarded", True)):
            pods = stitched(f"{prefix}{name[0]}")
            use_bpf(f"{prefix}{name[0]}-node", pods, guarded)
            pairs[name] = pods
        runs = {name: {figure: [] for figure in figures} for name in pairs}
        with tempfile.TemporaryDirectory(prefix="mwsb") as work:
            framegen = compile_framegen(Path(work))
            for _ in range(args.repeat):
                for name, (a, b) in pairs.items():
                    run = runs[name]
                    run["tcp_mbps"].append(iperf_mbps(a, b, args.seconds))
                    _, counted, taken = send(framegen, a, b, SINK_MAC, args.seconds)
                    run["sink_frames"].append(counted)
                    run["sink_frames_taken"].append(taken)
                    _, _, own = send(framegen, a, b, eth1(b)["address"], args.seconds)
                    run["own_mac_frames"].append(own)
    finally:
        remove_namespaces(prefix)
    medians = {
        name: {figure: statistics.median(values) for figure, values in run.items()}
        for name, run in runs.items()
    }
    base = medians["direct"]
    for name, m in medians.items():
        print(
            f"{name:8} TCP {m['tcp_mbps']:6.0f} Mbit/s ({m['tcp_mbps'] / base['tcp_mbps']:.2f}); "
            f"frames to no pod's MAC {m['sink_frames'] / 1e3:4.0f}k/s "
            f"({m['sink_frames'] / base['sink_frames']:.2f}); "
            f"to b's MAC, taken by its stack {m['own_mac_frames'] / 1e3:4.0f}k/s "
            f"({m['own_mac_frames'] / base['own_mac_frames']:.2f}); "
            f"frames to no pod's MAC taken as b's own: {m['sink_frames_taken'] / 1e3:.0f}k/s"
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": runs, "medians": medians}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
