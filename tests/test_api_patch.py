"""PATCH bodies applied to an object, as kube-apiserver applies them to a custom resource."""

from __future__ import annotations

from typing import Any

import pytest

from meshwire.tools.api import errors, patch

OBJ: dict[str, Any] = {
    "metadata": {"name": "r1", "labels": {"a": "1", "b": "2"}},
    "spec": {"links": [{"uid": 1}, {"uid": 2}]},
}


def test_merge_patch_merges_objects_replaces_lists_and_null_deletes() -> None:
    body = {"metadata": {"labels": {"a": None, "c": "3"}}, "spec": {"links": [{"uid": 9}]}}
    out = patch.apply("application/merge-patch+json", OBJ, body)
    assert out == {
        "metadata": {"name": "r1", "labels": {"b": "2", "c": "3"}},
        "spec": {"links": [{"uid": 9}]},
    }
    assert OBJ["metadata"]["labels"] == {"a": "1", "b": "2"}


def test_json_patch_operations_in_order() -> None:
    ops = [
        {"op": "test", "path": "/spec/links/0/uid", "value": 1},
        {"op": "add", "path": "/spec/links/-", "value": {"uid": 3}},
        {"op": "remove", "path": "/spec/links/0"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "x"},
        {"op": "copy", "from": "/metadata/labels/b", "path": "/metadata/labels/c"},
        {"op": "move", "from": "/metadata/labels/b", "path": "/metadata/labels/d~1e"},
    ]
    out = patch.apply("application/json-patch+json; charset=utf-8", OBJ, ops)
    assert out["spec"]["links"] == [{"uid": 2}, {"uid": 3}]
    assert out["metadata"]["labels"] == {"a": "x", "c": "2", "d/e": "2"}


def test_json_patch_errors_name_the_operation() -> None:
    with pytest.raises(errors.BadRequest, match=r"operation 0 \(remove /spec/nothing\)"):
        patch.apply("application/json-patch+json", OBJ, [{"op": "remove", "path": "/spec/nothing"}])
    with pytest.raises(errors.Invalid, match="test failed"):
        patch.apply(
            "application/json-patch+json", OBJ, [{"op": "test", "path": "/spec", "value": 1}]
        )


def test_strategic_merge_patch_is_415_as_for_any_custom_resource() -> None:
    with pytest.raises(errors.UnsupportedMediaType):
        patch.apply("application/strategic-merge-patch+json", OBJ, {})
