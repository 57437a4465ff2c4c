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
(kube-controller-manager), as on any cluster.
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
from meshwire.control.lab.errors import LabError
from meshwire.control.model.topology import GROUP, PLURAL, VERSION

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

    def __init__(self, kubeconfig: Path) -> None:
        """Raises LabError for a kubeconfig that cannot be loaded or names no usable server."""
        self.kubeconfig = kubeconfig
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

    def prepare(self, namespaces: list[str], record: Callable[[str], None]) -> None:
        """Create the namespaces and deploy/rbac.yaml's objects that are missing; `record`
        is called with each one's name ("kind/..."), and saves it, before it is made."""
        manifests = _rbac_objects()
        wanted = sorted({*namespaces, *(o["metadata"]["namespace"] for o in manifests
                                        if o["kind"] == "ServiceAccount")})  # fmt: skip
        # The client's own types want its model classes; plain dicts are what it sends.
        core: Any = client.CoreV1Api(self.api)
        rbac: Any = client.RbacAuthorizationV1Api(self.api)
        timeout = REQUEST_TIMEOUT
        for name in wanted:
            self._create(
                f"{NAMESPACE}/{name}",
                partial(core.read_namespace, name, _request_timeout=timeout),
                partial(core.create_namespace, {"metadata": {"name": name}},
                        _request_timeout=timeout),
                record,
            )  # fmt: skip
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
