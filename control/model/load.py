"""Topology objects from a file: meshnet YAML, a containerlab file or a KNE topology.

The format is recognised from the content: KNE's text protobuf by a file
name ending `.pb.txt`, `.pbtxt`, `.textproto`, `.txtpb` or `.prototxt`, or by
text that is not YAML and has a top-level `nodes {` or `links {` line (or that is YAML
only because its messages use `,`, and reads as a text protobuf); everything
else is YAML (or JSON):

- meshnet: Kubernetes objects, alone, as several YAML documents, or in a
  `kind: List` (any `...List` kind with `items`). Every `Topology` of
  `networkop.co.uk/v1beta1` is read; other kinds (Pod, StatefulSet,
  Namespace) are skipped. An object without `metadata.namespace` gets the
  `namespace` argument, else `default` (as `kubectl apply` does).
- containerlab (a mapping with `topology:`) and KNE (a mapping with `nodes:`
  or `links:`, or text protobuf): see `containerlab.py` and `kne.py`. Their
  objects go in the `namespace` argument, else in the namespace named like
  the lab.

Loading checks the shape only; which links are valid is `validate.py`'s
job. Every error is a `LoadError` whose message starts with the file and line.
"""

from __future__ import annotations

import re
from pathlib import Path as FilePath
from typing import Any

from meshwire.control.model.containerlab import containerlab_topologies, looks_like_containerlab
from meshwire.control.model.kne import kne_textproto_topologies, kne_topologies, looks_like_kne
from meshwire.control.model.labfile import LoadError, Origin, Path
from meshwire.control.model.topology import API_VERSION, KIND, ModelError, Topology
from meshwire.control.model.yamlfile import read_documents

__all__ = ["LoadError", "load_file", "load_text"]

DEFAULT_NAMESPACE = "default"
TEXTPROTO_SUFFIXES = (".pb.txt", ".pbtxt", ".textproto", ".txtpb", ".prototxt")

# A top-level `nodes {` / `links: <` line: text protobuf, when the text is not YAML.
_TEXTPROTO_MESSAGE = re.compile(r"^(nodes|links)[ \t]*:?[ \t]*[{<]", re.MULTILINE)


def load_file(path: str | FilePath, namespace: str | None = None) -> list[Topology]:
    """The Topology objects in the file at `path` (see module doc); raises LoadError."""
    source = str(path)
    try:
        text = FilePath(path).read_text(encoding="utf-8")
    except OSError as error:
        raise LoadError(f"{source}: cannot read: {error.strerror or error}", source) from error
    except UnicodeDecodeError as error:
        raise LoadError(f"{source}: not UTF-8 text: {error.reason}", source) from error
    return load_text(text, source, namespace)


def load_text(
    text: str, source_name: str = "<text>", namespace: str | None = None
) -> list[Topology]:
    """The Topology objects in `text`; `source_name` names it in errors and hints the format."""
    if source_name.endswith(TEXTPROTO_SUFFIXES):
        return kne_textproto_topologies(text, source_name, namespace)
    try:
        documents = read_documents(text, source_name)
    except LoadError:
        if _TEXTPROTO_MESSAGE.search(text):
            return kne_textproto_topologies(text, source_name, namespace)
        raise
    if len(documents) == 1 and not _is_kubernetes_object(documents[0].data):
        document = documents[0]
        origin = Origin(source_name, document.locator)
        if looks_like_containerlab(document.data):
            return containerlab_topologies(document.data, origin, namespace)
        if _maybe_textproto(document.data):
            try:
                return kne_textproto_topologies(text, source_name, namespace)
            except LoadError:
                pass  # not text protobuf after all: report it as the YAML it also is
        if looks_like_kne(document.data):
            return kne_topologies(document.data, origin, namespace)
    topologies: list[Topology] = []
    seen: dict[str, tuple[Origin, Path]] = {}
    for document in documents:
        origin = Origin(source_name, document.locator)
        if not _is_kubernetes_object(document.data):
            raise origin.error(
                (),
                "not a Kubernetes object (no kind), containerlab file (no topology) "
                "or KNE topology (no nodes or links)",
            )
        _read_objects(document.data, (), origin, namespace or DEFAULT_NAMESPACE, topologies, seen)
    return topologies


def _maybe_textproto(data: Any) -> bool:
    """Text protobuf with `,` separators can also be YAML, with a mapping where KNE has a list."""
    return isinstance(data, dict) and any(isinstance(data.get(k), dict) for k in ("nodes", "links"))


def _is_kubernetes_object(data: Any) -> bool:
    return isinstance(data, dict) and "kind" in data


def _read_objects(
    data: Any,
    path: Path,
    origin: Origin,
    namespace: str,
    out: list[Topology],
    seen: dict[str, tuple[Origin, Path]],
) -> None:
    """Append the Topology objects in `data` (an object or a list of them) to `out`."""
    if not isinstance(data, dict):
        raise origin.error(path, f"expected a Kubernetes object, got {data!r}")
    kind = data.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and "items" in data:
        items = data["items"] or []
        if not isinstance(items, list):
            raise origin.error((*path, "items"), "expected a list of objects")
        for index, item in enumerate(items):
            _read_objects(item, (*path, "items", index), origin, namespace, out, seen)
        return
    if kind != KIND:
        return
    if data.get("apiVersion") != API_VERSION:
        raise origin.error(
            (*path, "apiVersion"),
            f"kind {KIND} with apiVersion {data.get('apiVersion')!r}: expected {API_VERSION!r}",
        )
    try:
        topology = Topology.from_dict(data, default_namespace=namespace)
    except ModelError as error:
        raise origin.error(path, str(error)) from error
    if topology.key in seen:
        # The line of the first definition is looked up only now: a JSON file's lines
        # cost a second parse (yamlfile.TextLocator).
        first_origin, first_path = seen[topology.key]
        first = first_origin.locator.line(first_path)
        at = f" (first on line {first})" if first is not None else ""
        raise origin.error(path, f"topology {topology.key} is defined twice{at}")
    seen[topology.key] = (origin, path)
    out.append(topology)
