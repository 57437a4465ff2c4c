"""`lab up --kubeconfig` right after `lab down`: a namespace the lab needs is still
being deleted on the real kube-apiserver.

The suite runs no namespace controller, so a deleted namespace stays Terminating
until the test finishes its deletion (`finish_namespace_deletion`), as a
cluster's controller would once the namespace is empty. `up` waits for it to go
and makes it again; one that no controller finishes, or whose deletion outlasts
the wait, is named with what to do, never as a bare 404.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.kube import NAMESPACE, KubeLab
from tests.kube_cluster import ControlPlane
from tests.kube_helpers import (
    admin,
    create_namespace,
    delete_namespace,
    finish_namespace_deletion,
    unique,
)

pytestmark = pytest.mark.root


@pytest.fixture
def api(kube: ControlPlane) -> Iterator[client.ApiClient]:
    api = admin(kube)
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def created(kube: ControlPlane, api: client.ApiClient) -> Iterator[list[str]]:
    """What `prepare` recorded; deleted at the end, namespaces' deletion finished."""
    made: list[str] = []
    yield made
    lab = KubeLab(kube.admin_kubeconfig)
    try:
        lab.delete([], made)
    finally:
        lab.close()
    for entry in made:
        kind, _, name = entry.partition("/")
        if kind == NAMESPACE:
            finish_namespace_deletion(api, name)


def terminating(api: client.ApiClient, prefix: str) -> str:
    """A namespace that exists and is being deleted (as right after `lab down`)."""
    name = create_namespace(api, unique(prefix))
    delete_namespace(api, name)
    namespace = client.CoreV1Api(api).read_namespace(name)
    assert namespace.metadata.deletion_timestamp is not None
    return name


def test_up_waits_for_a_terminating_namespace_to_go_and_makes_it_again(
    kube: ControlPlane, api: client.ApiClient, created: list[str]
) -> None:
    name = terminating(api, "mwhouse")
    notes: list[str] = []

    def note(message: str) -> None:
        notes.append(message)
        # While `up` waits, the namespace controller finishes the deletion.
        finish_namespace_deletion(api, name)

    lab = KubeLab(kube.admin_kubeconfig)
    try:
        lab.prepare([name], created.append, note)
    finally:
        lab.close()

    assert len(notes) == 1
    assert f"namespace {name} is still being deleted" in notes[0]
    assert f"{NAMESPACE}/{name}" in created
    again = client.CoreV1Api(api).read_namespace(name)
    assert again.metadata.deletion_timestamp is None


def test_up_stops_naming_a_namespace_no_controller_finishes_and_says_what_to_do(
    kube: ControlPlane, api: client.ApiClient, created: list[str]
) -> None:
    # The suite's control plane runs no namespace controller: nothing will finish it.
    name = terminating(api, "mwhouse")
    try:
        lab = KubeLab(kube.admin_kubeconfig)
        try:
            with pytest.raises(LabError) as stopped:
                lab.prepare([name], created.append)
        finally:
            lab.close()
        message = str(stopped.value)
        assert f"namespace {name} has been terminating" in message
        assert "no namespace controller is finishing it" in message
        assert f"/api/v1/namespaces/{name}/finalize" in message
        assert "404" not in message
        assert f"{NAMESPACE}/{name}" not in created
    finally:
        finish_namespace_deletion(api, name)


def test_up_names_a_namespace_whose_deletion_outlasts_its_wait(
    kube: ControlPlane, api: client.ApiClient, created: list[str]
) -> None:
    name = terminating(api, "mwhouse")
    try:
        # A deletion older than `up` waits for, controller or not, is not going to end.
        lab = KubeLab(kube.admin_kubeconfig, namespace_timeout=0.0)
        try:
            with pytest.raises(LabError) as stopped:
                lab.prepare([name], created.append)
        finally:
            lab.close()
        message = str(stopped.value)
        assert f"namespace {name} has been terminating" in message
        assert f"kubectl get namespace {name} -o yaml" in message
        assert f"{NAMESPACE}/{name}" not in created
    finally:
        finish_namespace_deletion(api, name)
