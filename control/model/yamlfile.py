"""YAML documents with their line numbers, for loaders whose errors must name the line.

Safe loading only (no Python object tags). A mapping that repeats a key is
an error, not a silent overwrite: in a lab file a second `links:` would
otherwise drop every link of the first one. JSON is YAML, so it loads too; a
text that is one JSON value without a repeated key is read by `json` (many
times faster), and its lines are found only if an error needs one.
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from meshwire.control.model.labfile import LoadError, Path

_MERGE_TAG = "tag:yaml.org,2002:merge"

# libyaml's parser when present (the 1500-link fixtures parse several times faster).
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            key = (key_node.tag, key_node.value)
            if key in seen:
                raise ConstructorError(
                    None,
                    None,
                    f"key {key_node.value!r} is repeated (first on line {seen[key] + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
        mapping: dict[Hashable, Any] = super().construct_mapping(node, deep=deep)
        return mapping


@dataclass(frozen=True, slots=True)
class NodeLocator:
    """Finds the line of a value by walking a document's node tree (lazily, only on error)."""

    root: Node

    def line(self, path: Path) -> int | None:
        node = self.root
        for step in path:
            child = _child(node, step)
            if child is None:
                break
            node = child
        return int(node.start_mark.line) + 1


class TextLocator:
    """A JSON text's lines: its node tree is composed on the first `line` call."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._nodes: NodeLocator | None = None

    def line(self, path: Path) -> int | None:
        if self._nodes is None:
            root = yaml.compose(self._text, Loader=_StrictLoader)
            if root is None:
                return None
            self._nodes = NodeLocator(root)
        return self._nodes.line(path)


@dataclass(frozen=True, slots=True)
class Document:
    data: Any
    locator: NodeLocator | TextLocator


def read_documents(text: str, source: str) -> list[Document]:
    """Every non-empty document of `text`; raises LoadError naming `source` and the line."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            data = json.loads(text, object_pairs_hook=_unique_keys)
        except ValueError:
            pass  # YAML after all, or JSON with a repeated key: the YAML reader says where
        else:
            return [Document(data, TextLocator(text))]
    loader = _StrictLoader(text)
    documents: list[Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            data = loader.construct_document(node)
            if data is not None:
                documents.append(Document(data, NodeLocator(node)))
    except yaml.MarkedYAMLError as error:
        raise _load_error(error, source) from error
    except yaml.YAMLError as error:
        raise LoadError(f"{source}: not valid YAML: {error}", source) from error
    finally:
        loader.dispose()
    return documents


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        raise ValueError("a repeated key")
    return mapping


def _load_error(error: yaml.MarkedYAMLError, source: str) -> LoadError:
    mark = error.problem_mark or error.context_mark
    line = mark.line + 1 if mark is not None else None
    where = f"{source}:{line}" if line is not None else source
    reason = " ".join(part for part in (error.context, error.problem) if part)
    return LoadError(f"{where}: not valid YAML: {reason}", source, line)


def _child(node: Node, step: str | int) -> Node | None:
    if isinstance(node, MappingNode) and isinstance(step, str):
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and key_node.value == step:
                return value_node  # type: ignore[no-any-return]
        return None
    if isinstance(node, SequenceNode) and isinstance(step, int) and 0 <= step < len(node.value):
        return node.value[step]  # type: ignore[no-any-return]
    return None
