"""Placements this node wrote, kept over the API's older objects until the API has them.

A CNI ADD or DEL (and the placement keeper) writes a pod's placement, its
`src_ip`, `net_ns` and `container_id`, into the topologies table at once and
into the API through the status writer. Until the informer delivers an object
that includes the write, every object it delivers for that pod is older than
what this node knows: an informer that reconnects replays the events it
missed, and a write waits out an API outage with backoff. Stored as
delivered, such an object moves the pod's links back into a sandbox that is
gone, or tears them down (an empty status), until the write's own event
arrives: valid links rebuilt for nothing, and a link that also left the
topology in the same batch would be deleted in the wrong netns.

So a placement written here is laid over each object the informer delivers
for the pod until one of these:

- the write landed at resourceVersion R and the informer delivers the object
  at R or later. resourceVersions are compared as integers, as client-go's
  mutation cache does and Kubernetes 1.34 allows (KEP-5504); where either is
  not an integer, a delivered object that names the placement itself will do;
- the write was dropped because the object is gone: the API's object is the
  truth again;
- the write was dropped because its condition no longer held: the placement
  the condition's read found is laid over instead, until the informer
  delivers the object at the read's resourceVersion;
- the object is deleted.

A later placement of the same pod replaces an earlier one; a write that
carries an earlier placement than the one laid over says nothing about it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from meshwire.control.model.topology import Topology, TopologyStatus


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """Where a pod runs as its status says: all empty for nowhere."""

    src_ip: str
    net_ns: str
    container_id: str

    @classmethod
    def of_status(cls, status: TopologyStatus) -> PodPlacement:
        return cls(status.src_ip, status.net_ns, status.container_id)

    @classmethod
    def of_fields(cls, fields: Mapping[str, str]) -> PodPlacement | None:
        """The placement a status write carries, or None for a write that does not
        carry all three fields (a `plumbing_error` alone)."""
        try:
            return cls(fields["src_ip"], fields["net_ns"], fields["container_id"])
        except KeyError:
            return None

    def fields(self) -> dict[str, str]:
        """The status fields that say this placement, as a status write carries them."""
        return {"src_ip": self.src_ip, "net_ns": self.net_ns, "container_id": self.container_id}

    def over(self, topology: Topology) -> Topology:
        """`topology` with this placement in its status."""
        status = dataclasses.replace(
            topology.status,
            src_ip=self.src_ip,
            net_ns=self.net_ns,
            container_id=self.container_id,
        )
        return dataclasses.replace(topology, status=status)


# A pod that runs nowhere: what a CNI DEL writes.
NOWHERE = PodPlacement("", "", "")


@dataclass(slots=True)
class LocalPlacement:
    placement: PodPlacement
    # The resourceVersion the write landed at; None while it is on its way.
    landed_at: str | None = None

    def caught_up(self, delivered: Topology) -> bool:
        """Whether `delivered`, an object from the informer, includes the write."""
        if self.landed_at is None:
            return False
        mine, theirs = _number(self.landed_at), _number(delivered.resource_version)
        if mine is not None and theirs is not None:
            return theirs >= mine
        return PodPlacement.of_status(delivered.status) == self.placement


def _number(resource_version: str) -> int | None:
    return int(resource_version) if resource_version.isdigit() else None


@dataclass(frozen=True, slots=True)
class StatusRead:
    """A Topology's placement fields (status_writer.PLACEMENT_FIELDS, an absent one as "") as a
    conditional write's check read them, and the object's resourceVersion then."""

    fields: Mapping[str, str]
    resource_version: str
