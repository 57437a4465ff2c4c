"""The worker's Wire service: writes each received batch to its wires' TAPs in C.

The batch's wire ids are this worker's own; a frame for a wire it lacks, or one
of another topology namespace than the stream's, is dropped and counted by the
table. A malformed batch is dropped whole and counted; the stream goes on, so
one bad sender never stalls other wires.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc

from meshwire.dataplane.codec import MalformedBatch
from meshwire.dataplane.message import MalformedMessage, frames
from meshwire.dataplane.sender import FRAMES_METHOD, NAMESPACE_METADATA
from meshwire.dataplane.wirec import WireTable
from meshwire.proto import meshwire_pb2

log = logging.getLogger(__name__)


class Receiver:
    """`tags` maps a topology namespace to the table tag of its wires (0: none yet)."""

    def __init__(self, table: WireTable, tags: Mapping[str, int]) -> None:
        self.incoming = 0
        self.malformed = 0
        self._table = table
        self._tags = tags

    def handler(self) -> Any:
        """The generic handler to add to a grpc.aio server."""
        method = grpc.stream_unary_rpc_method_handler(
            self.frames,
            request_deserializer=None,  # raw message bytes: `message.frames` reads them
            response_serializer=meshwire_pb2.FramesSummary.SerializeToString,
        )
        service, name = FRAMES_METHOD.rsplit("/", 1)
        return grpc.method_handlers_generic_handler(service.strip("/"), {name: method})

    async def frames(self, batches: AsyncIterator[Any], context: Any) -> meshwire_pb2.FramesSummary:
        namespace = dict(context.invocation_metadata()).get(NAMESPACE_METADATA, "")
        count = 0
        self.incoming += 1
        try:
            async for raw in batches:
                count += 1
                try:
                    self._table.write_batch(self._tags.get(namespace, 0), frames(raw))
                except (MalformedBatch, MalformedMessage) as exc:
                    self.malformed += 1
                    log.warning("stream from %s (%s): %s", context.peer(), namespace, exc)
        finally:
            self.incoming -= 1
        return meshwire_pb2.FramesSummary(batches=count)
