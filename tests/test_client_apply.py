"""`apply_one` creates first and falls back to read-and-replace; `run` prints in file order."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from meshwire.tools.client.apply_command import apply_one
from meshwire.tools.client.file_command import PARALLEL, run


def topology(name: str, uid: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "networkop.co.uk/v1beta1",
        "kind": "Topology",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "links": [{"uid": uid, "peer_pod": "x", "local_intf": "eth1", "peer_intf": "eth1"}]
        },
    }


class FakeApi:
    """Custom objects in a dict; `create_status` makes every create fail with it."""

    def __init__(self, create_status: int = 0) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.create_status = create_status
        self.calls: list[str] = []
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0

    def create_namespaced_custom_object(self, *target: str) -> dict[str, Any]:
        obj: dict[str, Any] = target[-1]  # type: ignore[assignment]
        name = obj["metadata"]["name"]
        with self.lock:
            self.calls.append(f"create {name}")
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(0.01)  # a round trip, so calls overlap when run in parallel
            if self.create_status:
                raise ApiException(status=self.create_status, reason="refused")
            with self.lock:
                if name in self.objects:
                    raise ApiException(status=409, reason="AlreadyExists")
                self.objects[name] = obj
            return obj
        finally:
            with self.lock:
                self.in_flight -= 1

    def get_namespaced_custom_object(self, *target: str) -> dict[str, Any]:
        name = target[-1]
        self.calls.append(f"get {name}")
        if name not in self.objects:
            raise ApiException(status=404, reason="NotFound")
        return self.objects[name]

    def replace_namespaced_custom_object(self, *target: Any) -> dict[str, Any]:
        name, body = target[-2], target[-1]
        self.calls.append(f"replace {name}")
        self.objects[name] = body
        return body


def test_a_new_object_is_one_create() -> None:
    api = FakeApi()
    assert apply_one(api, topology("r1"))[0] == "created"
    assert api.calls == ["create r1"]


def test_an_existing_object_is_read_and_replaced_or_left_unchanged() -> None:
    api = FakeApi()
    apply_one(api, topology("r1"))
    assert apply_one(api, topology("r1"))[0] == "unchanged"
    assert apply_one(api, topology("r1", uid=2))[0] == "configured"
    assert api.objects["r1"]["spec"]["links"][0]["uid"] == 2


def test_a_client_that_may_not_create_still_updates_and_else_gets_the_refusal() -> None:
    api = FakeApi()
    apply_one(api, topology("r1"))
    api.create_status = 403
    assert apply_one(api, topology("r1", uid=3))[0] == "configured"
    with pytest.raises(ApiException) as refused:
        apply_one(api, topology("r2"))
    assert refused.value.status == 403


def test_objects_go_in_parallel_and_print_in_the_files_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api = FakeApi()
    monkeypatch.setattr("meshwire.tools.client.file_command._client", lambda args: api)
    names = [f"r{n:02d}" for n in range(40)]
    file = tmp_path / "lab.yaml"
    file.write_text(
        "\n---\n".join(
            f"apiVersion: networkop.co.uk/v1beta1\nkind: Topology\nmetadata: {{name: {name}}}\n"
            "spec: {links: [{uid: 1, peer_pod: x, local_intf: eth1, peer_intf: eth1}]}"
            for name in names
        )
    )

    def create_only(api: Any, obj: dict[str, Any]) -> str:
        return apply_one(api, obj)[0]

    assert run("apply", "test", create_only, ["-f", str(file), "--server", "http://x"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"topology.networkop.co.uk/{name} created" for name in names]
    assert 1 < api.most_in_flight <= PARALLEL
