"""Loading the files users bring: meshnet Topology YAML, containerlab and KNE topologies."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from meshwire.control.model.load import LoadError, load_file, load_text
from meshwire.control.model.topology import Link
from meshwire.control.model.validate import check_all
from tests.model_helpers import DATA, MESHNET_FIXTURES, REPO, wiring

FIXTURE_PODS = {
    "2node.yml": ["default/r1", "default/r2", "default/r3"],
    "2node-sts.yml": ["default/r1-0", "default/r2-0"],
    "3node.yml": ["default/r1", "default/r2", "default/r3"],
    "3node-mlink.yml": ["mlink/r1", "mlink/r2", "mlink/r3"],
    "5node.yml": [f"default/r{i}" for i in range(1, 6)],
    "macvlan.yml": ["default/r1", "default/r2"],
    "2node-1500links.yml": ["1500links/p1", "1500links/p2"],
    "2node-1500links-multinode.yml": ["1500links-multinode/p1", "1500links-multinode/p2"],
}


# --- meshnet's own test topologies load unchanged and are valid -----------------------------


def test_every_meshnet_fixture_file_is_covered() -> None:
    assert sorted(p.name for p in MESHNET_FIXTURES.glob("*.yml")) == sorted(FIXTURE_PODS)


@pytest.mark.parametrize("name", sorted(FIXTURE_PODS))
def test_meshnet_fixture_loads_and_validates_with_no_problems(name: str) -> None:
    topologies = load_file(MESHNET_FIXTURES / name)
    assert [t.key for t in topologies] == FIXTURE_PODS[name]
    assert check_all(topologies) == []


@pytest.mark.parametrize("name", ["2node-1500links.yml", "2node-1500links-multinode.yml"])
def test_the_1500_link_fixtures_keep_every_link(name: str) -> None:
    p1, p2 = load_file(MESHNET_FIXTURES / name)
    assert [link.uid for link in p1.links] == list(range(1, 1501))
    assert p2.link(1500) == Link(
        1500, "p1", "eth1500", "eth1500", "10.10.23.110/30", "10.10.23.109/30"
    )


def test_a_link_to_the_host_loads_as_localhost() -> None:
    r2 = load_file(MESHNET_FIXTURES / "macvlan.yml")[1]
    assert r2.link(2) == Link(2, "localhost", "eth2", "eth0", "172.17.0.199/16")


def test_a_peer_pod_without_a_topology_object_is_not_a_problem() -> None:
    r3 = load_file(MESHNET_FIXTURES / "2node.yml")[2]
    assert r3.links == (Link(2, "r4", "eth1", "eth1"),)


# --- meshnet YAML shapes --------------------------------------------------------------------

TOPOLOGY = """
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata: {name: %s}
spec:
  links: [{uid: 1, peer_pod: x, local_intf: eth1, peer_intf: eth1}]
"""


def test_a_single_object_loads() -> None:
    assert [t.key for t in load_text(TOPOLOGY % "r1")] == ["default/r1"]


def test_multiple_documents_load_in_order_and_other_kinds_are_skipped() -> None:
    text = "---\n".join(
        [TOPOLOGY % "r1", "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n", TOPOLOGY % "r2"]
    )
    assert [t.key for t in load_text(text)] == ["default/r1", "default/r2"]


def test_objects_without_a_namespace_get_the_given_one_and_others_keep_theirs() -> None:
    text = (
        TOPOLOGY % "r1" + "---\n" + (TOPOLOGY % "r2").replace("name: r2", "name: r2, namespace: b")
    )
    assert [t.key for t in load_text(text, namespace="a")] == ["a/r1", "b/r2"]


def test_a_kubectl_style_typed_list_loads() -> None:
    text = "kind: TopologyList\napiVersion: networkop.co.uk/v1beta1\nitems:\n" + "\n".join(
        "  " + line for line in (TOPOLOGY % "r1").strip().splitlines()
    ).replace("  apiVersion", "- apiVersion", 1)
    assert [t.key for t in load_text(text)] == ["default/r1"]


def test_an_empty_file_has_no_objects() -> None:
    assert load_text("# nothing here\n") == []


# --- lab files give the same wiring as the meshnet file -------------------------------------


@pytest.mark.parametrize(
    "name", ["trio.clab.yml", "trio.kne.pb.txt", "trio.kne.yaml", "trio.kne.json"]
)
def test_lab_files_give_the_same_links_as_the_meshnet_file(name: str) -> None:
    expected = load_file(DATA / "trio.yml")
    loaded = load_file(DATA / name)
    assert [t.key for t in loaded] == [t.key for t in expected]
    assert wiring(loaded) == wiring(expected)
    assert check_all(loaded) == []


def test_lab_file_uids_follow_the_link_order() -> None:
    r1, r2, r3 = load_file(DATA / "trio.clab.yml")
    assert [(link.uid, link.peer_pod) for link in r1.links] == [(1, "r2"), (2, "r2"), (4, "r3")]
    assert [link.uid for link in r2.links] == [1, 2, 3]
    assert [link.uid for link in r3.links] == [3, 4]


def test_a_lab_file_goes_in_the_given_namespace() -> None:
    assert {t.namespace for t in load_file(DATA / "trio.kne.pb.txt", namespace="other")} == {
        "other"
    }


def test_nodes_without_links_get_no_topology() -> None:
    text = "name: l\ntopology:\n  nodes: {a: {}, lonely: {}, b: {}}\n  links:\n"
    text += "    - endpoints: [a:eth1, b:eth1]\n"
    assert [t.name for t in load_text(text)] == ["a", "b"]


@pytest.mark.parametrize(
    "link",
    [
        'endpoints: ["r1:eth2", "macvlan:eth0"]',
        'endpoints: ["macvlan:eth0", "r1:eth2"]',
        "{type: macvlan, endpoint: {node: r1, interface: eth2}, host-interface: eth0}",
    ],
)
def test_a_containerlab_macvlan_link_goes_to_a_host_interface(link: str) -> None:
    text = f"name: l\ntopology:\n  nodes: {{r1: {{}}}}\n  links:\n    - {link}\n"
    (r1,) = load_text(text, "m.clab.yml")
    assert r1.links == (Link(1, "localhost", "eth2", "eth0"),)


def test_a_containerlab_links_mtu_is_the_mtu_of_both_ends() -> None:
    text = "name: l\ntopology:\n  nodes: {r1: {}, r2: {}}\n  links:\n"
    text += "    - {type: veth, mtu: 9000, endpoints: [{node: r1, interface: eth1},"
    text += " {node: r2, interface: eth2}]}\n"
    r1, r2 = load_text(text, "m.clab.yml")
    assert (r1.links[0].mtu, r2.links[0].mtu) == (9000, 9000)


# --- the example lab -----------------------------------------------------------------------


def test_the_example_lab_is_a_valid_ring_with_a_diagonal() -> None:
    topologies = load_file(REPO / "examples" / "lab.yml")
    assert [t.key for t in topologies] == [f"default/r{i}" for i in range(1, 5)]
    assert check_all(topologies) == []
    pairs = {frozenset((t.name, link.peer_pod)) for t in topologies for link in t.links}
    ring = {frozenset((f"r{i}", f"r{i % 4 + 1}")) for i in range(1, 5)}
    assert pairs == ring | {frozenset(("r1", "r3"))}
    lab_net = ipaddress.IPv4Network("10.99.0.0/16")
    for t in topologies:
        for link in t.links:
            local = ipaddress.IPv4Interface(link.local_ip)
            peer = ipaddress.IPv4Interface(link.peer_ip)
            assert local.network == peer.network
            assert local.network.prefixlen == 30
            assert local.network.subnet_of(lab_net)


@pytest.mark.parametrize("name", ["lab.clab.yml", "lab.kne.textproto"])
def test_the_example_lab_twins_wire_the_same_links(name: str) -> None:
    def without_addresses(path: Path) -> set[tuple[str, int, str, str, str]]:
        return {end[:5] for end in wiring(load_file(path))}

    examples = REPO / "examples"
    assert without_addresses(examples / name) == without_addresses(examples / "lab.yml")


# --- errors name the file, the line and the place ---------------------------------------------


def load_error(text: str, source: str = "lab.yml") -> str:
    with pytest.raises(LoadError) as caught:
        load_text(text, source)
    return str(caught.value)


def test_a_missing_file_is_named() -> None:
    with pytest.raises(LoadError, match=r"^/nonexistent/lab\.yml: cannot read: "):
        load_file("/nonexistent/lab.yml")


def test_a_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    path = tmp_path / "lab.yml"
    path.write_bytes(b"name: \xff\n")
    with pytest.raises(LoadError, match=r"lab\.yml: not UTF-8 text"):
        load_file(path)


def test_yaml_syntax_errors_name_the_line() -> None:
    message = load_error("kind: List\nitems:\n  - a: 1\n  b: 2\n")
    assert message.startswith("lab.yml:4: not valid YAML: ")


def test_a_repeated_key_is_an_error_not_an_overwrite() -> None:
    text = "name: l\ntopology:\n  nodes: {a: {}, b: {}}\n  links: []\n  links: []\n"
    assert load_error(text) == (
        "lab.yml:5: not valid YAML: key 'links' is repeated (first on line 4)"
    )


def test_an_unknown_document_is_named() -> None:
    assert load_error("a: 1\n") == (
        "lab.yml:1: not a Kubernetes object (no kind), containerlab file (no topology) "
        "or KNE topology (no nodes or links)"
    )


def test_a_topology_of_another_api_version_is_an_error() -> None:
    text = (TOPOLOGY % "r1").replace("v1beta1", "v1")
    assert load_error(text) == (
        "lab.yml:2: apiVersion: kind Topology with apiVersion 'networkop.co.uk/v1': "
        "expected 'networkop.co.uk/v1beta1'"
    )


def test_a_malformed_topology_names_the_item_and_the_field() -> None:
    text = "kind: List\nitems:\n" + "\n".join(
        "  " + line for line in (TOPOLOGY % "r1").replace("uid: 1", "uid: one").splitlines()
    ).replace("  apiVersion", "- apiVersion", 1)
    assert load_error(text) == (
        "lab.yml:4: items[0]: topology default/r1: spec.links[0]: uid: "
        "expected an integer, got 'one'"
    )


def test_a_links_mtu_is_read_written_back_and_must_be_an_integer() -> None:
    text = (TOPOLOGY % "r1").replace("peer_intf: eth1}", "peer_intf: eth1, mtu: 9000}")
    (r1,) = load_text(text)
    assert r1.links[0].mtu == 9000
    assert r1.to_dict()["spec"]["links"][0]["mtu"] == 9000
    (plain,) = load_text(TOPOLOGY % "r1")
    assert plain.links[0].mtu == 0 and "mtu" not in plain.to_dict()["spec"]["links"][0]
    assert load_error(text.replace("mtu: 9000", "mtu: big")) == (
        "lab.yml:2: topology default/r1: spec.links[0]: mtu: expected an integer, got 'big'"
    )


def test_a_list_whose_items_are_not_a_list_is_an_error() -> None:
    assert (
        load_error("kind: List\nitems: {a: 1}\n") == "lab.yml:2: items: expected a list of objects"
    )


def test_a_topology_defined_twice_is_an_error() -> None:
    message = load_error(TOPOLOGY % "r1" + "---" + TOPOLOGY % "r1")
    assert message == "lab.yml:8: topology default/r1 is defined twice (first on line 2)"


# --- JSON: read by `json`, its lines found only for an error -------------------------------


def json_list(*names: str, uid: object = 1) -> str:
    items = [
        {
            "apiVersion": "networkop.co.uk/v1beta1",
            "kind": "Topology",
            "metadata": {"name": name},
            "spec": {"links": [{"uid": uid, "peer_pod": "x", "local_intf": "eth1",
                                "peer_intf": "eth1"}]},
        }
        for name in names
    ]  # fmt: skip
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1)


def test_a_json_file_loads_as_its_yaml_twin() -> None:
    yaml_twin = "---".join(TOPOLOGY % name for name in ("r1", "r2"))
    assert load_text(json_list("r1", "r2"), "lab.json") == load_text(yaml_twin)


def test_json_errors_name_the_line() -> None:
    text = json_list("r1", "r2", uid="one")
    line = text.splitlines().index("  {") + 1  # the line the first item opens on
    assert load_error(text, "lab.json").startswith(f"lab.json:{line}: items[0]: topology ")


def test_a_topology_defined_twice_in_json_names_both_lines() -> None:
    text = json_list("r1", "r1")
    lines = [n + 1 for n, line in enumerate(text.splitlines()) if line == "  {"]
    assert load_error(text, "lab.json") == (
        f"lab.json:{lines[1]}: items[1]: topology default/r1 is defined twice "
        f"(first on line {lines[0]})"
    )


def test_a_repeated_key_in_json_is_an_error_not_an_overwrite() -> None:
    text = '{"kind": "List", "items": [], "items": []}'
    assert load_error(text, "lab.json") == (
        "lab.json:1: not valid YAML: key 'items' is repeated (first on line 1)"
    )


CLAB = """name: lab
topology:
  nodes:
    r1: {}
    r2: {}
  links:
    - endpoints: ["r1:eth1", "r2:eth1"]
    - %s
"""


@pytest.mark.parametrize(
    ("link", "expected"),
    [
        (
            'endpoints: ["r1eth2", "r2:eth2"]',
            'topology.links[1].endpoints[0]: endpoint "r1eth2" must be "node:interface"',
        ),
        (
            'endpoints: ["r1:eth2", "r2:"]',
            'topology.links[1].endpoints[1]: endpoint "r2:" must be "node:interface"',
        ),
        (
            'endpoints: ["r1:eth2"]',
            "topology.links[1].endpoints: expected two endpoints, got ['r1:eth2']",
        ),
        (
            'endpoints: ["r1:eth2", "r9:eth1"]',
            "topology.links[1]: node 'r9' is not declared in the nodes",
        ),
        (
            'endpoints: ["r1:eth2", "r1:eth3"]',
            "topology.links[1]: both ends are on node 'r1'; a link needs two pods",
        ),
        (
            'endpoints: ["r1:eth2", "r2:eth1"]',
            "topology.links[1]: interface r2:eth1 is already linked by topology.links[0] (line 7)",
        ),
        (
            'endpoints: ["r1:eth2", "host:veth0"]',
            "topology.links[1].endpoints[1]: a link to 'host' is not supported: "
            "meshwire links pods to pods, or a pod to a host interface with macvlan",
        ),
        (
            "{type: vxlan, endpoint: {node: r1, interface: eth2}, remote: 10.0.0.1}",
            "topology.links[1].type: link type 'vxlan' is not supported: "
            "meshwire links pods to pods, or a pod to a host interface with macvlan",
        ),
        (
            "{type: macvlan, endpoint: {node: r1, interface: eth2}}",
            "topology.links[1].host-interface: required for a macvlan link",
        ),
        (
            "{type: veth, endpoints: [{node: r1}, {node: r2, interface: eth2}]}",
            "topology.links[1].endpoints[0].interface: required",
        ),
        ('endpoints: ["macvlan:eth0", "macvlan:eth1"]', "both endpoints are host interfaces"),
        (
            '{endpoints: ["r1:eth2", "r2:eth2"], mtu: jumbo}',
            "topology.links[1].mtu: expected an integer, got 'jumbo'",
        ),
        ("r1:eth2", "topology.links[1]: expected a mapping with endpoints, got 'r1:eth2'"),
    ],
)
def test_containerlab_link_errors_name_file_line_and_link(link: str, expected: str) -> None:
    message = load_error(CLAB % link, "lab.clab.yml")
    assert message.startswith("lab.clab.yml:8: ")
    assert message.endswith(expected)


def test_a_link_to_a_bridge_node_is_not_supported() -> None:
    text = (CLAB % 'endpoints: ["r1:eth2", "br0:eth1"]').replace(
        "r2: {}", "r2: {}\n    br0: {kind: bridge}"
    )
    assert load_error(text, "lab.clab.yml").endswith(
        "topology.links[1].endpoints[1]: a link to 'br0' is not supported: "
        "meshwire links pods to pods, or a pod to a host interface with macvlan"
    )


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "    r1: {}",
            "    R1: {}",
            "lab.clab.yml:4: topology.nodes.R1: node name 'R1' is not a DNS-1123",
        ),
        (
            "    r1: {}",
            "    localhost: {}",
            "lab.clab.yml:4: topology.nodes.localhost: node name 'localhost' is reserved",
        ),
        (
            "  nodes:\n",
            "  nodes: [r1, r2]\n  x:\n",
            "lab.clab.yml:3: topology.nodes: expected a mapping",
        ),
        (
            "  links:\n",
            "  links: {a: 1}\n  x:\n",
            "lab.clab.yml:6: topology.links: expected a list of links",
        ),
        (
            "name: lab",
            "name: Lab_1",
            "lab.clab.yml:1: name: the lab name is the namespace by default, "
            "and 'Lab_1' is not a DNS-1123 label",
        ),
        ("name: lab", "title: lab", "lab.clab.yml:1: name: the lab name is required"),
    ],
)
def test_containerlab_file_errors_name_the_place(old: str, new: str, expected: str) -> None:
    text = (CLAB % 'endpoints: ["r1:eth2", "r2:eth2"]').replace(old, new, 1)
    assert load_error(text, "lab.clab.yml").startswith(expected)


def test_an_invalid_namespace_argument_is_named() -> None:
    with pytest.raises(
        LoadError, match=r"^trio\.clab\.yml: namespace 'a/b': 'a/b' is not a DNS-1123"
    ):
        load_text((DATA / "trio.clab.yml").read_text(), "trio.clab.yml", namespace="a/b")


KNE = """name: "lab"
nodes: { name: "r1" }
nodes: { name: "r2" }
links: {
  a_node: "r1" a_int: "eth1"
  z_node: "r2" z_int: "eth1"
}
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (KNE + 'links: {\n  a_node: "r1"\n}\n', "lab.pb.txt:8: links[1].a_int: required"),
        (
            KNE + "links: { a_node: r1 }\n",
            "lab.pb.txt:8: links[1].a_node: expected a quoted string, got r1",
        ),
        (
            KNE + 'links: { a_node: "r1" a_node: "r2" }\n',
            "lab.pb.txt:8: links[1].a_node: given more than once (first on line 8)",
        ),
        (KNE + 'links: "r1"\n', "lab.pb.txt:8: links[1]: expected a message { ... }, got 'r1'"),
        (
            KNE + 'nodes: { name: "r1" }\n',
            "lab.pb.txt:8: nodes[2].name: node 'r1' is declared twice",
        ),
        (
            KNE + 'links: { a_node: "r1" a_int: "eth2" z_node: "r3" z_int: "eth1" }\n',
            "lab.pb.txt:8: links[1]: node 'r3' is not declared in the nodes",
        ),
        (
            KNE + 'links: { a_node: "r1" a_int: "eth2" z_node: "r2" z_int: "eth1" }\n',
            "lab.pb.txt:8: links[1]: interface r2:eth1 is already linked by links[0] (line 4)",
        ),
        (
            KNE.replace('"lab"', '"Lab"'),
            "lab.pb.txt:1: name: the lab name is the namespace by default, and 'Lab' is not",
        ),
        (
            KNE + 'links: {\n  a_node: "r1"\n',
            "lab.pb.txt:9: unexpected end of text, expected '}' to close '{' of line 8",
        ),
        (
            KNE + 'links "r1"\n',
            "lab.pb.txt:8: expected ':' or '{' after field 'links', found '\"r1\"'",
        ),
        (KNE + 'links: { a_node: "r\\q" }\n', "lab.pb.txt:8: unknown escape \\q in string"),
        (KNE + 'links: { a_node: "r1" } }\n', "lab.pb.txt:8: expected a field name, found '}'"),
        (KNE + "links: { a_node: ? }\n", "lab.pb.txt:8: unexpected character '?'"),
    ],
)
def test_kne_text_errors_name_file_line_and_place(text: str, expected: str) -> None:
    assert load_error(text, "lab.pb.txt").startswith(expected)


def test_kne_text_is_recognised_by_content_whatever_the_file_name() -> None:
    assert [t.key for t in load_text(KNE, "topology.txt")] == ["lab/r1", "lab/r2"]


def test_kne_text_with_commas_that_is_also_yaml_reads_as_kne_text() -> None:
    text = (
        'name: "lab"\n'
        'nodes: [{name: "r1"}, {name: "r2"}]\n'
        'links: {a_node: "r1", a_int: "eth1", z_node: "r2", z_int: "eth1"}\n'
    )
    assert wiring(load_text(text, "topology.txt")) == {
        ("r1", 1, "eth1", "r2", "eth1", ""),
        ("r2", 1, "eth1", "r1", "eth1", ""),
    }


KNE_YAML = "name: lab\nnodes: [{name: r1}, {name: r2}]\nlinks:\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            KNE_YAML + "  - {a_node: r1, a_int: eth1, z_node: r2}\n",
            "lab.yaml:4: links[0].z_int: required",
        ),
        (
            KNE_YAML + "  - {a_node: r1, a_int: 1, z_node: r2, z_int: eth1}\n",
            "lab.yaml:4: links[0].a_int: expected a string, got 1",
        ),
        ("name: lab\nnodes: [r1, r2]\n", "lab.yaml:2: nodes[0]: expected a node, got 'r1'"),
        ("name: lab\nnodes: {r1: {}}\n", "lab.yaml:2: nodes: expected a list, got {'r1': {}}"),
        (
            "name: lab\nnodes: [{name: r1}]\nlinks: [x]\n",
            "lab.yaml:3: links[0]: expected a link, got 'x'",
        ),
    ],
)
def test_kne_yaml_errors_name_file_line_and_place(text: str, expected: str) -> None:
    assert load_error(text, "lab.yaml") == expected
