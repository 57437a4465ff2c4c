"""A lab on an existing Kubernetes API server: `lab up FILE --kubeconfig F`.

Instead of the embedded API, the lab's daemons watch the server that the
user's kubeconfig names (its current context). `up`, through `KubeLab`:

- checks that the server serves Topology objects (a Topology CRD is installed;
  meshwire's, KNE's or upstream meshnet's), and otherwise stops, naming
  `deploy/crd.yaml`, before anything is made;
- creates the namespaces the lab file's Topologies are in, the
  `meshwire` namespace, ServiceAccount, ClusterRole and ClusterRoleBinding of
  `deploy/rbac.yaml`, and the IdAllocation CRD the daemons keep their id slots
  in (`deploy/crd-idallocations.yaml`): each only if missing, and each recorded in the state
  file before it is created, so that `down` deletes what the lab made and
  nothing else (objects that existed before are left as they are);
- gives each node's daemon a kubeconfig of its own: the server's address and
  CA from the user's kubeconfig, and a bound token of the `meshwire`
  ServiceAccount requested for that node (TokenRequest, `TOKEN_SECONDS`),
  never the user's credentials;
- makes the server reachable from each node's network namespace at the very
  address the kubeconfig names: a relay listens there inside the node's
  namespace (on `lo`; an address that is not a loopback one is added to it)
  and connects from the host's namespace. Bytes pass unchanged, so the daemon
  verifies the server's certificate against the CA as it would anywhere. The
  server must be at an IPv4 address or a name resolving to one (the relay
  speaks IPv4).

`down` deletes the lab's Topology objects and then what `up` recorded. A
namespace's deletion completes only where a namespace controller runs
(kube-controller-manager), as on any cluster; an `up` that finds one of its
namespaces still being deleted waits for it to go (`NAMESPACE_TIMEOUT`) and
makes it again, or stops naming it.
"""

from __future__ import annotations

import base64
import ipaddress
import socket
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError

from meshwire.control.informer.failure import describe
from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from meshwire.tools.lab.errors import LabError

REPO = Path(__file__).resolve().parents[2]
RBAC = REPO / "deploy" / "rbac.yaml"
ID_CRD = REPO / "deploy" / "crd-idallocations.yaml"
# How long (s) a CRD `up` created may take to be served.
CRD_READY_TIMEOUT = 30.0
# The bound token each node's daemon gets: a day, longer than a lab lives; the
# daemon reads the kubeconfig once, so a lab older than that needs `up` again.
TOKEN_SECONDS = 86400
# Every call of `up` and `down` gives up after this long (s).
REQUEST_TIMEOUT = 30.0
# How long (s) `up` waits for a namespace still being deleted to go: a namespace
# controller deletes a lab's emptied namespace within seconds; one deleted longer
# ago than this is not going (no controller, or an object it cannot delete).
NAMESPACE_TIMEOUT = 60.0
# How often (s) `up` reads such a namespace again.
NAMESPACE_POLL = 0.5
# A namespace controller writes a deleted namespace's status.conditions (what is
# left in it) at its first pass, well within this many seconds: a namespace
# deleted longer ago with none is one no controller finishes.
UNTOUCHED_GRACE = 10.0
CRD_HINT = "install a Topology CRD first: kubectl apply -f deploy/crd.yaml"

# Kinds of the objects `up` creates, as recorded in the state file ("kind/ns/name",
# "kind/name" for cluster-scoped ones), with how each is deleted.
NAMESPACE = "namespace"
SERVICE_ACCOUNT = "serviceaccount"
CLUSTER_ROLE = "clusterrole"
CLUSTER_ROLE_BINDING = "clusterrolebinding"
CRD = "customresourcedefinition"


class KubeLab:
    """The user's API server, as their kubeconfig reaches it."""

    def __init__(self, kubeconfig: Path, namespace_timeout: float = NAMESPACE_TIMEOUT) -> None:
        """Raises LabError for a kubeconfig that cannot be loaded or names no usable server."""
        self.kubeconfig = kubeconfig
        self.namespace_timeout = namespace_timeout
        configuration = client.Configuration()
        try:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig), client_configuration=configuration
            )
        except (ConfigException, OSError) as exc:
            raise LabError(f"kubeconfig {kubeconfig}: {exc}") from None
        self.server = str(configuration.host).rstrip("/")
        parts = urlsplit(self.server)
        if parts.scheme != "https" or not parts.hostname:
            raise LabError(f"kubeconfig {kubeconfig}: server {self.server}: expected https://HOST")
        self.hostname = parts.hostname
        self.port = parts.port or 443
        self.ca = Path(configuration.ssl_ca_cert).read_bytes() if configuration.ssl_ca_cert else b""
        if not self.ca and configuration.verify_ssl:
            raise LabError(f"kubeconfig {kubeconfig}: no certificate authority for {self.server}")
        self.api = client.ApiClient(configuration)

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    @property
    def address(self) -> str:
        """The server's IP address (its host name resolved here): where the relays listen."""
        try:
            ipaddress.ip_address(self.hostname)
            return self.hostname
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(self.hostname, self.port, socket.AF_INET, socket.SOCK_STREAM)
        except OSError as exc:
            raise LabError(
                f"API server {self.server}: cannot resolve {self.hostname}: {exc}"
            ) from None
        return str(infos[0][4][0])

    def check_crd(self) -> None:
        """Raises LabError when the server serves no Topology objects or cannot be asked."""
        try:
            self._call(
                lambda: client.CustomObjectsApi(self.api).list_cluster_custom_object(
                    GROUP, VERSION, PLURAL, limit=1, _request_timeout=REQUEST_TIMEOUT
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                raise LabError(
                    f"API server {self.server} serves no {PLURAL}.{GROUP}/{VERSION}: {CRD_HINT}"
                ) from None
            raise LabError(f"API server {self.server}: {describe(exc)}") from None

    def await_namespaces(
        self, namespaces: list[str], note: Callable[[str], None] = lambda message: None
    ) -> None:
        """Wait until none of the namespaces `prepare` needs is being deleted, as
        `prepare` would (it raises the same LabError), before anything is made."""
        core: Any = client.CoreV1Api(self.api)
        for name in _namespaces(namespaces, _rbac_objects()):
            self._settled(core, name, note)

    def prepare(
        self,
        namespaces: list[str],
        record: Callable[[str], None],
        note: Callable[[str], None] = lambda message: None,
    ) -> None:
        """Create the namespaces and deploy/rbac.yaml's objects that are missing; `record`
        is called with each one's name ("kind/..."), and saves it, before it is made.

        A namespace still being deleted (a `down` just before) is waited for, and made
        again once gone; `note` says so once. Raises LabError naming it, and saying
        what to do, when no namespace controller has touched it `UNTOUCHED_GRACE`
        seconds after its deletion began, or when its deletion has not finished within
        `namespace_timeout` (at once if it began longer ago than that)."""
        manifests = _rbac_objects()
        # The client's own types want its model classes; plain dicts are what it sends.
        core: Any = client.CoreV1Api(self.api)
        rbac: Any = client.RbacAuthorizationV1Api(self.api)
        timeout = REQUEST_TIMEOUT
        for name in _namespaces(namespaces, manifests):
            self._namespace(core, name, record, note)
        self._create_id_crd(record)
        for obj in manifests:
            meta = obj["metadata"]
            if obj["kind"] == "ServiceAccount":
                ns, name = meta["namespace"], meta["name"]
                self._create(
                    f"{SERVICE_ACCOUNT}/{ns}/{name}",
                    partial(core.read_namespaced_service_account, name, ns,
                            _request_timeout=timeout),
                    partial(core.create_namespaced_service_account, ns, obj,
                            _request_timeout=timeout),
                    record,
                )  # fmt: skip
            elif obj["kind"] == "ClusterRole":
                self._create(
                    f"{CLUSTER_ROLE}/{meta['name']}",
                    partial(rbac.read_cluster_role, meta["name"], _request_timeout=timeout),
                    partial(rbac.create_cluster_role, obj, _request_timeout=timeout),
                    record,
                )
            elif obj["kind"] == "ClusterRoleBinding":
                self._create(
                    f"{CLUSTER_ROLE_BINDING}/{meta['name']}",
                    partial(rbac.read_cluster_role_binding, meta["name"],
                            _request_timeout=timeout),
                    partial(rbac.create_cluster_role_binding, obj, _request_timeout=timeout),
                    record,
                )  # fmt: skip

    def _namespace(
        self, core: Any, name: str, record: Callable[[str], None], note: Callable[[str], None]
    ) -> None:
        """Make namespace `name` unless it is there and not being deleted (see `prepare`)."""
        recorded = False
        while not self._settled(core, name, note):
            if not recorded:
                record(f"{NAMESPACE}/{name}")
                recorded = True
            if self._made(partial(core.create_namespace, {"metadata": {"name": name}},
                                  _request_timeout=REQUEST_TIMEOUT), name):  # fmt: skip
                return
            # Made meanwhile by someone else: read it again.

    def _settled(self, core: Any, name: str, note: Callable[[str], None]) -> bool:
        """Whether namespace `name` exists, once it is not being deleted (see `prepare`)."""
        started = time.monotonic()
        told = False
        while True:
            try:
                current = self._call(
                    partial(core.read_namespace, name, _request_timeout=REQUEST_TIMEOUT)
                )
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise LabError(
                    f"API server {self.server}: {NAMESPACE}/{name}: {describe(exc)}"
                ) from None
            since = current.metadata.deletion_timestamp
            if since is None:
                return True
            # The server's clock dates the deletion; ours bounds the wait, whatever the skew.
            waited = time.monotonic() - started
            deleting_for = max(waited, time.time() - since.timestamp())
            untouched = not (current.status and current.status.conditions)
            if untouched and deleting_for >= UNTOUCHED_GRACE:
                raise LabError(_untouched(self.server, name, deleting_for))
            if deleting_for > self.namespace_timeout or waited >= self.namespace_timeout:
                raise LabError(_terminating(self.server, name, deleting_for))
            if not told:
                note(
                    f"namespace {name} is still being deleted: waiting up to "
                    f"{self.namespace_timeout:.0f} s for it to go, to make it again"
                )
                told = True
            time.sleep(NAMESPACE_POLL)

    def _made(self, create: Callable[[], object], name: str) -> bool:
        """Whether `create()` made namespace `name` (False: it exists, made meanwhile)."""
        try:
            self._call(create)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise LabError(
                f"API server {self.server}: {NAMESPACE}/{name}: {describe(exc)}"
            ) from None
        return True

    def _create_id_crd(self, record: Callable[[str], None]) -> None:
        """The IdAllocation CRD if missing, waited for until its objects are served."""
        crd = _manifests(ID_CRD)[0]
        spec = crd["spec"]
        extensions: Any = client.ApiextensionsV1Api(self.api)
        objects: Any = client.CustomObjectsApi(self.api)
        timeout = REQUEST_TIMEOUT
        name = crd["metadata"]["name"]
        self._create(
            f"{CRD}/{name}",
            partial(extensions.read_custom_resource_definition, name, _request_timeout=timeout),
            partial(extensions.create_custom_resource_definition, crd, _request_timeout=timeout),
            record,
        )
        served = partial(
            objects.list_cluster_custom_object,
            spec["group"],
            spec["versions"][0]["name"],
            spec["names"]["plural"],
            limit=1,
            _request_timeout=timeout,
        )
        deadline = time.monotonic() + CRD_READY_TIMEOUT
        while True:
            try:
                self._call(served)
                return
            except ApiException as exc:
                if exc.status != 404 or time.monotonic() > deadline:
                    raise LabError(f"API server {self.server}: {name}: {describe(exc)}") from None
            time.sleep(0.2)

    def node_kubeconfig(self, path: Path, node: str, index: int) -> None:
        """Write the kubeconfig of `node`'s daemon (the lab's `index`th node): this server
        and CA, and a bound token of deploy/rbac.yaml's ServiceAccount requested for this
        node alone. Tokens requested in the same second with the same lifetime are equal
        (a v1.20 token carries no unique id), so each node's lives `index` seconds longer."""
        account = next(o for o in _rbac_objects() if o["kind"] == "ServiceAccount")["metadata"]
        request = {"spec": {"expirationSeconds": TOKEN_SECONDS + index}}
        core: Any = client.CoreV1Api(self.api)
        reply = self._call(
            partial(
                core.create_namespaced_service_account_token,
                account["name"],
                account["namespace"],
                request,
                _request_timeout=REQUEST_TIMEOUT,
            )
        )
        cluster: dict[str, Any] = {"server": self.server}
        if self.ca:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca).decode()
        else:
            cluster["insecure-skip-tls-verify"] = True
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "lab", "cluster": cluster}],
            "users": [{"name": node, "user": {"token": reply.status.token}}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": node}}],
            "current-context": "lab",
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(document, sort_keys=False))

    def statuses(self, keys: list[str]) -> dict[str, dict[str, Any]] | None:
        """`ns/name` -> status of the Topologies in the namespaces of `keys`; None when
        the server does not answer."""
        out: dict[str, dict[str, Any]] = {}
        objects: Any = client.CustomObjectsApi(self.api)
        try:
            for namespace in sorted({key.partition("/")[0] for key in keys}):
                listed = objects.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, _request_timeout=REQUEST_TIMEOUT
                )
                for item in listed.get("items") or []:
                    meta = item.get("metadata") or {}
                    out[f"{namespace}/{meta.get('name')}"] = item.get("status") or {}
        except (ApiException, HTTPError, OSError):
            return None
        return out

    def delete(self, topology_keys: list[str], created: list[str]) -> list[str]:
        """Delete the Topologies `topology_keys`, then the objects `created` (newest first);
        a missing one is no error. Returns one line per object deleted; raises LabError
        for any other failure."""
        objects: Any = client.CustomObjectsApi(self.api)
        core: Any = client.CoreV1Api(self.api)
        rbac: Any = client.RbacAuthorizationV1Api(self.api)
        removed = []
        for key in topology_keys:
            ns, _, name = key.partition("/")
            if self._delete(
                partial(
                    objects.delete_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    ns,
                    PLURAL,
                    name,
                    _request_timeout=REQUEST_TIMEOUT,
                )
            ):
                removed.append(f"topology {key} from {self.server}")
        for entry in reversed(created):
            kind, _, rest = entry.partition("/")
            if self._delete(partial(_delete_one, core, rbac, kind, rest)):
                removed.append(f"{kind} {rest} from {self.server}")
        return removed

    def _create(
        self,
        entry: str,
        read: Callable[[], object],
        create: Callable[[], object],
        record: Callable[[str], None],
    ) -> None:
        try:
            self._call(read)
            return
        except ApiException as exc:
            if exc.status != 404:
                raise LabError(f"API server {self.server}: {entry}: {describe(exc)}") from None
        record(entry)
        try:
            self._call(create)
        except ApiException as exc:
            if exc.status != 409:
                raise LabError(f"API server {self.server}: {entry}: {describe(exc)}") from None

    def _delete(self, call: Callable[[], object]) -> bool:
        try:
            self._call(call)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise LabError(f"API server {self.server}: {describe(exc)}") from None
        return True

    def _call(self, call: Callable[[], Any]) -> Any:
        """`call()`, with an unreachable server as LabError (ApiException passes)."""
        try:
            return call()
        except (HTTPError, OSError) as exc:
            raise LabError(f"cannot reach the API server {self.server}: {exc}") from None


def _namespaces(namespaces: list[str], manifests: list[dict[str, Any]]) -> list[str]:
    """The lab's namespaces and those of deploy/rbac.yaml's ServiceAccounts, sorted."""
    accounts = (o["metadata"]["namespace"] for o in manifests if o["kind"] == "ServiceAccount")
    return sorted({*namespaces, *accounts})


def _terminating(server: str, name: str, deleting_for: float) -> str:
    """What to do about namespace `name`, being deleted for `deleting_for` seconds."""
    return (
        f"API server {server}: namespace {name} has been terminating for "
        f"{deleting_for:.0f} s and is not gone yet: the namespace controller cannot "
        f"delete something in it. `kubectl get namespace {name} -o yaml` says what "
        f"(status.conditions); once it is gone, run `meshwire lab up` again."
    )


def _untouched(server: str, name: str, deleting_for: float) -> str:
    """What to do about namespace `name`, deleted `deleting_for` seconds ago, untouched."""
    return (
        f"API server {server}: namespace {name} has been terminating for "
        f"{deleting_for:.0f} s and no namespace controller is finishing it (its status "
        f"has no conditions): this control plane runs no kube-controller-manager. Finish "
        f"the deletion yourself, by an empty spec.finalizers through "
        f"/api/v1/namespaces/{name}/finalize, or start one; then run `meshwire lab up` again."
    )


def _delete_one(core: Any, rbac: Any, kind: str, rest: str) -> object:
    """Delete one object `up` recorded as `kind/rest` (see the kinds above)."""
    if kind == NAMESPACE:
        return core.delete_namespace(rest, _request_timeout=REQUEST_TIMEOUT)
    if kind == SERVICE_ACCOUNT:
        namespace, _, name = rest.partition("/")
        return core.delete_namespaced_service_account(
            name, namespace, _request_timeout=REQUEST_TIMEOUT
        )
    if kind == CLUSTER_ROLE:
        return rbac.delete_cluster_role(rest, _request_timeout=REQUEST_TIMEOUT)
    if kind == CLUSTER_ROLE_BINDING:
        return rbac.delete_cluster_role_binding(rest, _request_timeout=REQUEST_TIMEOUT)
    if kind == CRD:
        extensions: Any = client.ApiextensionsV1Api(core.api_client)
        return extensions.delete_custom_resource_definition(rest, _request_timeout=REQUEST_TIMEOUT)
    raise LabError(f"lab state: unknown kind of object {kind!r}")


def _rbac_objects() -> list[dict[str, Any]]:
    return _manifests(RBAC)


def _manifests(path: Path) -> list[dict[str, Any]]:
    try:
        return [o for o in yaml.safe_load_all(path.read_text()) if o]
    except OSError as exc:
        raise LabError(f"{path}: {exc.strerror} (the lab needs meshwire's source tree)") from None


def needs_address(ip: str) -> bool:
    """Whether a node namespace must get `ip` on its `lo` for a relay to listen on it."""
    return not ipaddress.ip_address(ip).is_loopback
