"""The daemon's ServiceAccount may do exactly what the daemon's code calls, no more.

The calls are read from the source of every module the daemon loads (its
command and its app, imported in a fresh interpreter), so a new API call
without its RBAC rule fails here, and so does a rule nothing uses.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import kubernetes.client
from deploy_helpers import manifests, one, pod_spec

from meshwire.control.common import slots
from meshwire.control.model.topology import GROUP, PLURAL

# kubernetes client method -> (verb, subresource suffix) for custom objects.
CALL = re.compile(
    r"\.(list|get|create|replace|patch|delete)_(?:namespaced|cluster)_custom_object"
    r"(_status)?(?:_with_http_info|_without_preload_content)?\("
)
# CoreV1Api: the uninstall watch's namespace list and the node watch's node list (and
# their watches), and the node watch's patch of its own Node's status.
CORE_CALL = re.compile(
    r"\.(list|get|patch)_(namespace|node)(_status)?(?:_without_preload_content)?\("
)
WATCH_ARG = re.compile(r"[\"']?watch[\"']?\s*[:=]\s*True")
# A resource a Reflector follows: it lists and watches it.
FOLLOWED = re.compile(r"\bCustomObjects\(([^)]*)\)")
API_CLASS = re.compile(r"\b([A-Z]\w*Api)\b")

DAEMON_MODULES = """
import json, sys
import meshwire.control.daemon.command, meshwire.control.daemon.app
# Python sources only: cffi's compiled codec (and its `lib`, a module without
# a __file__) makes no API call.
files = {getattr(m, "__file__", None) for n, m in sys.modules.items() if n.startswith("meshwire.")}
files = {f for f in files if isinstance(f, str) and f.endswith(".py")}
print(json.dumps(sorted(files)))
"""


@functools.cache
def daemon_sources() -> dict[Path, str]:
    result = subprocess.run(
        [sys.executable, "-c", DAEMON_MODULES], capture_output=True, text=True, check=True
    )
    return {Path(p): Path(p).read_text() for p in json.loads(result.stdout)}


# The client's method verb -> the RBAC verb it needs.
RBAC_VERB = {"replace": "update"}


def calls_in(source: str) -> set[tuple[str, str, str]]:
    """(group, verb, resource) of the custom-object calls in one module's source.

    A call whose arguments name `slots.PLURAL` is about idallocations; any other
    is about topologies."""
    out: set[tuple[str, str, str]] = set()
    for call in CALL.finditer(source):
        verb, status = call.groups()
        arguments = source[call.end() : source.find(")", call.end())]
        if "slots.PLURAL" in arguments:
            group, resource = slots.GROUP, slots.PLURAL
        else:
            group, resource = GROUP, PLURAL + ("/status" if status else "")
        out.add((group, RBAC_VERB.get(verb, verb), resource))
        if verb == "list" and WATCH_ARG.search(source):
            out.add((group, "watch", resource))
    for followed in FOLLOWED.finditer(source):
        if "slots.PLURAL" in followed.group(1):
            group, resource = slots.GROUP, slots.PLURAL
        else:
            group, resource = GROUP, PLURAL
        out |= {(group, "list", resource), (group, "watch", resource)}
    for call in CORE_CALL.finditer(source):
        verb, status = call.group(1), "/status" if call.group(3) else ""
        resource = call.group(2) + "s" + status
        out.add(("", verb, resource))
        if verb == "list" and WATCH_ARG.search(source):
            out.add(("", "watch", resource))
    return out


def granted() -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    for rule in one("ClusterRole")["rules"]:
        assert len(rule["apiGroups"]) == 1, rule
        (group,) = rule["apiGroups"]
        out |= {(group, verb, res) for verb in rule["verbs"] for res in rule["resources"]}
    return out


def test_the_call_finder_reads_verbs_and_the_status_subresource() -> None:
    source = (
        'await api.list_cluster_custom_object_without_preload_content(G, V, P, "watch": True)\n'
        "await api.patch_namespaced_custom_object_status(group=G)\n"
        "await api.replace_cluster_custom_object(slots.GROUP, V, slots.PLURAL, N, body)\n"
        "CustomObjects(api, slots.GROUP, slots.VERSION, slots.PLURAL)\n"
        "await _core(api).patch_node_status(node, body)\n"
    )
    assert calls_in(source) == {
        (GROUP, "list", "topologies"),
        (GROUP, "watch", "topologies"),
        (GROUP, "patch", "topologies/status"),
        (slots.GROUP, "update", "idallocations"),
        (slots.GROUP, "list", "idallocations"),
        (slots.GROUP, "watch", "idallocations"),
        ("", "patch", "nodes/status"),
    }


def test_the_cluster_role_grants_exactly_what_the_daemon_calls() -> None:
    called: set[tuple[str, str]] = set()
    for source in daemon_sources().values():
        called |= calls_in(source)
    assert called, "found no API call in the daemon's modules: the call finder is broken"
    assert granted() == called


def test_the_daemon_uses_no_kubernetes_api_but_custom_objects_namespaces_and_nodes() -> None:
    kube_apis = {name for name in dir(kubernetes.client) if name.endswith("Api")}
    used: set[str] = set()
    for source in daemon_sources().values():
        used |= set(API_CLASS.findall(source)) & kube_apis
    assert used == {"CustomObjectsApi", "CoreV1Api"}
    core_calls = {
        m.group(1).removesuffix("_without_preload_content")
        for source in daemon_sources().values()
        if "CoreV1Api" in source
        for m in re.finditer(r"core(?:\([^)]*\))?\.(\w+)\(", source)
    }
    assert core_calls == {"list_namespace", "list_node", "patch_node_status"}


def test_the_role_is_bound_to_the_daemonsets_service_account() -> None:
    account = one("ServiceAccount")["metadata"]
    binding = one("ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": one("ClusterRole")["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
    ]
    assert pod_spec()["serviceAccountName"] == account["name"]
    daemonset = one("DaemonSet")["metadata"]
    assert daemonset["namespace"] == account["namespace"]


def test_every_namespaced_object_lives_in_the_namespace_deploy_creates() -> None:
    namespace = one("Namespace")["metadata"]["name"]
    cluster_wide = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for obj in manifests():
        if obj["kind"] not in cluster_wide:
            assert obj["metadata"]["namespace"] == namespace, obj["kind"]
