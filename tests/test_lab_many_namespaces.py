"""One small lab applied in 32 namespaces whose names clash under the old hash.

Before namespace slots, meshwire derived a namespace's VNIs from crc32(name)
modulo 1023 and its wire ids modulo 1024: two names with one remainder shared
ids, and the later lab's links stayed down. Here every pair of namespaces
shares a hashed VNI slot or wire slot, each lab has two pods on different
nodes joined by two links, and every link must pass `lab check`, over vxlan
and over the gRPC wire.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from pathlib import Path

import pytest
from lab_helpers import unique_lab

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[1]
PAIRS = 16


def clashing_names() -> list[str]:
    """8 pairs of names sharing a hashed VNI slot, then 8 sharing a hashed wire slot."""
    out: list[str] = []
    for modulus in (1023, 1024):
        by_slot: dict[int, list[str]] = defaultdict(list)
        i = 0
        while len(out) < (PAIRS // 2) * (2 if modulus == 1023 else 4):
            name = f"lab{modulus}-{i}"
            i += 1
            found = by_slot[zlib.crc32(name.encode()) % modulus]
            found.append(name)
            if len(found) == 2:
                out += found
    return out


def lab_file(namespaces: list[str]) -> str:
    docs = []
    for ns in namespaces:
        for me, peer, last in (("r1", "r2", 1), ("r2", "r1", 2)):
            other = 3 - last
            docs.append(
                f"""apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata: {{name: {me}, namespace: {ns}}}
spec:
  links:
  - {{uid: 1, peer_pod: {peer}, local_intf: eth1, peer_intf: eth1,
     local_ip: 10.0.1.{last}/24, peer_ip: 10.0.1.{other}/24}}
  - {{uid: 2, peer_pod: {peer}, local_intf: eth2, peer_intf: eth2,
     local_ip: 10.0.2.{last}/24, peer_ip: 10.0.2.{other}/24}}
"""
            )
    return "---\n".join(docs)


def test_the_names_clash_under_the_old_hash() -> None:
    names = clashing_names()
    assert len(names) == len(set(names)) == 2 * PAIRS
    for first, second in zip(names[0::2], names[1::2], strict=True):
        a, b = zlib.crc32(first.encode()), zlib.crc32(second.encode())
        assert a % 1023 == b % 1023 or a % 1024 == b % 1024


@pytest.mark.parametrize("config", [None, "grpc.yaml"], ids=["vxlan", "grpc"])
def test_every_link_of_32_clashing_labs_passes_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str | None
) -> None:
    names = clashing_names()
    with unique_lab(tmp_path, lab_file(names)) as lab:
        extra = ["--config", str(REPO / "examples" / config)] if config else []
        assert lab.run("up", str(lab.file), "--nodes", "2", "--wait", "90", *extra) == 0
        capsys.readouterr()
        assert lab.run("check") == 0
        out = capsys.readouterr().out
        kind = "grpc" if config else "vxlan"
        assert f"{4 * PAIRS}/{4 * PAIRS} links ok" in out
        assert out.count(f" {kind} ") == 4 * PAIRS
