"""The media types of a Kubernetes PATCH body, as the API server and its clients name them."""

from __future__ import annotations

# RFC 7386: the body is the object's changed fields; null deletes one.
MERGE_PATCH = "application/merge-patch+json"
# RFC 6902: the body is a list of operations.
JSON_PATCH = "application/json-patch+json"
