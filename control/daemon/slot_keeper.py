"""`SlotKeeper`: this daemon's view of the cluster's IdAllocation, and its writes to it.

Two loops, both started by `run`:

- follow: a `Reflector` over `idallocations` (list, then watch), so
  `slot_of` answers from the object as the API holds it (a slot another node
  claimed arrives here by the watch). `synced` is set after the first list,
  found object or not. A namespace whose slot appears, changes or goes is
  handed to `on_change`, which re-derives its links.
- keep: every namespace with a Topology gets a slot, and a namespace with none
  left for `release_grace` seconds gives its slot back. Each write reads the
  object, changes it with `common/slots.py`, and replaces it carrying the
  resourceVersion it read; a 409 (another daemon wrote first) starts over from
  a new read, so concurrent daemons never hand out one slot twice and all end
  up reading the same object.

What a caller may rely on:
- `slot_of(ns)` never changes for a namespace that keeps a Topology: a slot is
  only released after its namespace had none for `release_grace` seconds while
  this daemon's Topology view was healthy (`view_healthy`), so a view that
  lags or broke cannot free a slot in use.
- Nothing here runs per link: a link whose namespace has no slot yet waits
  (`slot_of` is None) and is re-derived when the slot arrives. A namespace
  that cannot get one (every slot held) gets a message instead, which its
  links report; it is claimed again whenever the object or the Topologies
  change.
- Failures are logged, retried with backoff (the reflector's, and the same
  policy for writes) and kept in `last_error`; they never raise out of `run`,
  which returns only by cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes.aio.client import ApiClient, CustomObjectsApi
from kubernetes.aio.client.exceptions import ApiException

from meshwire.control.common import slots
from meshwire.control.common.config import ApiConfig, default
from meshwire.control.common.ids import Slot
from meshwire.control.common.retries import Backoff, BackoffPolicy, Now
from meshwire.control.common.waits import first
from meshwire.control.informer.failure import describe
from meshwire.control.informer.reflector import RECONNECT, Reflector
from meshwire.control.informer.sources import CustomObjects
from meshwire.control.tables.topologies import TopologyTable

log = logging.getLogger(__name__)

# A namespace's slot is freed once it has had no Topology this long: longer
# than a lab's delete-and-apply again, so that keeps its ids.
RELEASE_GRACE = 30.0
NOT_SERVED = (
    f"this API server serves no {slots.PLURAL}.{slots.GROUP}/{slots.VERSION}: "
    "install its CRD (deploy/crd-idallocations.yaml)"
)


class SlotKeeper:
    def __init__(
        self,
        topologies: TopologyTable,
        *,
        vni_base: int,
        on_change: Callable[[set[str]], None],
        namespace: str = "",
        request_timeout: float = default(ApiConfig, "request_timeout"),
        watch_timeout: int = default(ApiConfig, "watch_timeout"),
        release_grace: float = RELEASE_GRACE,
        view_healthy: Callable[[], bool] = lambda: True,
        backoff: BackoffPolicy | None = None,
        clock: Now = time.monotonic,
    ) -> None:
        """`namespace`: manage this namespace's slot only ("": every namespace)."""
        self.topologies = topologies
        self.vni_base = vni_base
        self.namespace = namespace
        self.request_timeout = request_timeout
        self.watch_timeout = watch_timeout
        self.release_grace = release_grace
        self._on_change = on_change
        # Whether this daemon's Topology view is current (its informer is not failing).
        self.view_healthy = view_healthy
        self._clock = clock
        self._policy = backoff or RECONNECT
        self.synced = asyncio.Event()
        # Why the last write failed; "" once one succeeds.
        self._write_error = ""
        # Follows the object; made by `run`, which is handed the API client.
        self._reflector: Reflector | None = None
        # The object as last read or written; its slots are what slot_of answers.
        self._allocation = slots.Allocation()
        # Namespace -> why it has no slot (every slot held); cleared when it gets one.
        self._exhausted: dict[str, str] = {}
        # Namespace holding a slot -> when this daemon first saw it without a Topology.
        self._empty_since: dict[str, float] = {}
        self._kick = asyncio.Event()
        # Claim the exhausted namespaces again: something changed since the last try.
        self._retry_exhausted = True
        self._objects: CustomObjectsApi | None = None

    # -- what derivation reads ---------------------------------------------------

    def slot_of(self, namespace: str) -> Slot | str | None:
        slot = self._allocation.slots.get(namespace)
        if slot is not None:
            return slot
        return self._exhausted.get(namespace)

    @property
    def allocation(self) -> slots.Allocation:
        return self._allocation

    @property
    def last_error(self) -> str:
        """Why reading (else writing) the object last failed; "" when neither does."""
        reading = self._reflector.stats.last_error if self._reflector is not None else ""
        return reading or self._write_error

    # -- run ------------------------------------------------------------------

    async def run(self, api: ApiClient) -> None:
        self._objects = CustomObjectsApi(api)
        self._reflector = Reflector(
            CustomObjects(api, slots.GROUP, slots.VERSION, slots.PLURAL),
            self,
            request_timeout=self.request_timeout,
            watch_timeout=self.watch_timeout,
            backoff=self._policy,
            not_found=NOT_SERVED,
            clock=self._clock,
        )
        follow = asyncio.create_task(self._reflector.run(), name="slots-follow")
        try:
            await self._keep()
        finally:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follow

    # -- follow: the object, as the API holds it (the reflector's handler) --------

    def listed(self, items: list[Any]) -> None:
        found = [i for i in items if isinstance(i, dict) and _name(i) == slots.NAME]
        self._adopt(found[0] if found else None, force=True)
        self.synced.set()

    def changed(self, event_type: str, obj: Any) -> None:
        if not isinstance(obj, dict) or _name(obj) != slots.NAME:
            return
        if event_type == "DELETED":
            self._adopt(None, force=True)
        else:
            self._adopt(obj)

    def _adopt(self, obj: dict[str, Any] | None, *, force: bool = False) -> None:
        """Take `obj` as the allocation unless it is older than the one held."""
        new = slots.read(obj)
        if not force and _older(new.resource_version, self._allocation.resource_version):
            return
        old, self._allocation = self._allocation.slots, new
        changed = {ns for ns in old.keys() | new.slots.keys() if old.get(ns) != new.slots.get(ns)}
        for namespace in changed & new.slots.keys():
            self._exhausted.pop(namespace, None)
        self._kick.set()
        if changed:
            self._on_change(changed)

    # -- keep: claim for every namespace with a Topology, free the rest ---------

    async def _keep(self) -> None:
        await self.synced.wait()
        await self.topologies.wait_initialized()
        tracker = self.topologies.track()

        async def step(backoff: Backoff) -> None:
            self._kick.clear()
            tracker.next()
            claim, release, wake_in = self._plan()
            if claim or release:
                await self._write(claim, release)
                backoff.healthy()
                return
            await first(self._kick.wait(), tracker.wait(), within=wake_in)
            self._retry_exhausted = True

        try:
            await self._retrying(step)
        finally:
            tracker.close()

    async def _retrying(self, step: Callable[[Backoff], Awaitable[None]]) -> None:
        """Run `step(backoff)` over and over, until cancelled; a failure is kept in
        `last_error`, logged, and waited out with the backoff."""
        backoff = Backoff(self._policy, self._clock)
        while True:
            try:
                await step(backoff)
            except Exception as err:
                self._write_error = describe(err, not_found=NOT_SERVED)
                delay = backoff.next_delay()
                log.warning(
                    "%s: writing failed: %s; retrying in %.1fs",
                    slots.PLURAL,
                    self._write_error,
                    delay,
                )
                await asyncio.sleep(delay)

    def _wanted(self) -> set[str]:
        namespaces = self.topologies.namespaces()
        if self.namespace:
            namespaces &= {self.namespace}
        return namespaces

    def _plan(self) -> tuple[set[str], set[str], float | None]:
        """(namespaces to claim, to release, seconds until the next release is due)."""
        wanted = self._wanted()
        held = set(self._allocation.slots)
        if self.namespace:
            held &= {self.namespace}
        now = self._clock()
        for namespace in list(self._empty_since):
            if namespace in wanted or namespace not in held:
                del self._empty_since[namespace]
        for namespace in held - wanted:
            self._empty_since.setdefault(namespace, now)
        due = {ns for ns, since in self._empty_since.items() if now - since >= self.release_grace}
        if not self.view_healthy():
            due = set()
        waiting = [since + self.release_grace - now for since in self._empty_since.values()]
        wake_in = max(min(waiting), 0.5) if waiting else None
        for namespace in set(self._exhausted) - wanted:
            del self._exhausted[namespace]
        claim = wanted - held
        if not self._retry_exhausted:
            claim -= self._exhausted.keys()
        return claim, due, wake_in

    async def _write(self, claim: set[str], release: set[str]) -> None:
        """Claim and release in one write, retried from a new read on each 409."""
        assert self._objects is not None
        while True:
            current = await self._get()
            allocation = slots.read(current)
            kept = slots.release(allocation, release - self._wanted())
            result = slots.claim(
                slots.Allocation(kept, allocation.resource_version, allocation.unreadable),
                claim,
                self.vni_base,
            )
            self._retry_exhausted = False
            held = len(result.slots) + len(allocation.unreadable)
            newly = set()
            for namespace in result.exhausted:
                message = slots.exhausted_message(namespace, self.vni_base, held)
                if self._exhausted.get(namespace) != message:
                    self._exhausted[namespace] = message
                    newly.add(namespace)
            if newly:
                self._on_change(newly)
            if result.slots == dict(allocation.slots):
                self._write_error = ""
                self._adopt(current, force=current is None)
                return
            body = slots.render(allocation, result.slots)
            try:
                if current is None:
                    written = await self._objects.create_cluster_custom_object(
                        slots.GROUP,
                        slots.VERSION,
                        slots.PLURAL,
                        body,
                        _request_timeout=self.request_timeout,
                    )
                else:
                    written = await self._objects.replace_cluster_custom_object(
                        slots.GROUP,
                        slots.VERSION,
                        slots.PLURAL,
                        slots.NAME,
                        body,
                        _request_timeout=self.request_timeout,
                    )
            except ApiException as err:
                if err.status == 409:
                    continue
                raise
            claimed = sorted(result.slots.keys() - allocation.slots.keys())
            freed = sorted(allocation.slots.keys() - result.slots.keys())
            log.info("%s: claimed %s, freed %s", slots.PLURAL, claimed or "-", freed or "-")
            self._write_error = ""
            self._adopt(_as_dict(written))
            return

    async def _get(self) -> dict[str, Any] | None:
        assert self._objects is not None
        try:
            obj = await self._objects.get_cluster_custom_object(
                slots.GROUP,
                slots.VERSION,
                slots.PLURAL,
                slots.NAME,
                _request_timeout=self.request_timeout,
            )
        except ApiException as err:
            if err.status == 404 and _is_object_missing(err):
                return None
            raise
        return _as_dict(obj)


def _as_dict(obj: object) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ValueError(f"the API answered {type(obj).__name__}, not an object")
    return obj


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _older(new: str, held: str) -> bool:
    """Whether resourceVersion `new` comes before `held` (both integers, as etcd's are)."""
    return new.isdigit() and held.isdigit() and int(new) < int(held)


def _is_object_missing(err: ApiException) -> bool:
    """A 404 for the object, not for the whole resource (its CRD not installed)."""
    try:
        details = json.loads(err.body or "{}").get("details") or {}
    except ValueError:
        return False
    return bool(details.get("name") == slots.NAME)
