"""Property test (Hypothesis) of the embedded API's admission (tools/api/admission.py):
whatever a client sends to create, replace, patch or status-patch a Topology, the
server either refuses it with a 4xx `Status` whose message says what is wrong (a 422
names the offending field in its causes), or stores an object that reads back the
same and that the daemons' model parser takes without exception and without a link
problem. Never a 5xx, never a dropped connection, never a hang.

The bodies are near-valid Topologies: names and namespaces that are not DNS names,
values of the wrong type, integers past 64 bits, bad uids, peer pods, interface names,
addresses, MTUs, MACs and impairments, unknown fields, the emulation annotation
garbled; and arbitrary JSON, JSON nested past any parser's depth, bytes that are not
JSON or not UTF-8, bodies past the size limit, merge and JSON patches that are
malformed or apply to nothing.

The server runs on a private loopback in a thread of its own (its own event loop);
each example's request is sent there and must be answered within HANG seconds.
Examples: `MW_PROPERTY_EXAMPLES` (default 300, about 5 s); docs/fuzzing.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cni_helpers import temp_dir
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from meshwire.control.common.media import JSON_PATCH, MERGE_PATCH
from meshwire.control.informer.apply import decode
from meshwire.control.model.emulation import ANNOTATION
from meshwire.control.model.topology import API_VERSION, GROUP, KIND, PLURAL, VERSION
from meshwire.control.model.validate import validate_topology
from tests.api_helpers import private_loopback, serving

EXAMPLES = int(os.environ.get("MW_PROPERTY_EXAMPLES", "300"))
ADMISSION = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# An answer later than this is a hang (the loaded test machine answers in milliseconds).
HANG = 20.0
COLLECTION = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"
SEED = "seed"


# --- the server, in a thread of its own ----------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any  # the JSON answer, or the raw bytes if it is not JSON


class Served:
    """An ApiServer and an HTTP client on one private loopback, run by one thread."""

    def __init__(self, root: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(root,), daemon=True)
        self._thread.start()
        self._ready.wait(60)
        if self._failed is not None:
            raise self._failed

    def _run(self, root: Path) -> None:
        try:
            with private_loopback():
                self.loop.run_until_complete(self._serve(root))
        except BaseException as exc:
            self._failed = exc
            self._ready.set()

    async def _serve(self, root: Path) -> None:
        async with serving(str(root / "topologies.db")) as server:
            self.url = server.url
            async with aiohttp.ClientSession() as session:
                self.session = session
                self._ready.set()
                await self._stop.wait()

    def request(self, method: str, path: str, body: bytes, content_type: str) -> Answer:
        body = LONG_BODIES.get(body, body)
        future = asyncio.run_coroutine_threadsafe(
            self._request(method, path, body, content_type), self.loop
        )
        return future.result(HANG)

    async def _request(self, method: str, path: str, body: bytes, content_type: str) -> Answer:
        headers = {"Content-Type": content_type}
        async with self.session.request(
            method, self.url + path, data=body, headers=headers
        ) as response:
            data = await response.read()
        try:
            return Answer(response.status, json.loads(data))
        except ValueError:
            return Answer(response.status, data)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture(scope="module")
def api() -> Iterator[Served]:
    root = temp_dir()
    served = Served(root)
    yield served
    served.close()
    shutil.rmtree(root, ignore_errors=True)


# --- what a client may send ------------------------------------------------------------

GOOD_NAMES = st.sampled_from(["r1", "r2", "a.b-c", "x" * 63, SEED])
BAD_NAMES = st.sampled_from(["", "R1", "-r", "r_1", "r 1", "r\u00e9", "a" * 254, "a..b", "r1/x"])
ANY_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
WRONG = st.sampled_from([None, True, 1.5, -1, 2**63, 2**64 - 1, "x", [], {}, [1], {"a": 1}])


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`good` twelve times in fifteen, else a bad value of the right type (twice) or one of
    the wrong type: whole objects come out right often enough to check their round trip.
    (Weights by sampled_from: Hypothesis draws small integers far more often.)"""
    choices = [good] * 12 + [bad, bad, WRONG]
    return st.sampled_from(range(len(choices))).flatmap(choices.__getitem__)


def one_in(n: int) -> st.SearchStrategy[bool]:
    return st.sampled_from([False] * (n - 1) + [True])


BAD_INTF = st.sampled_from(["", "e" * 16, "eth/1", "eth 1", ".", "eth:1", "\u00e9" * 8, "\ud800"])
BAD_UIDS = st.sampled_from([-1, 2**24, 2**63 - 1, -(2**63), 2**64 - 1])
IMPAIRMENTS = st.dictionaries(
    st.sampled_from(["delay_ms", "jitter_ms", "loss_pct", "rate_mbps", "bogus"]),
    WRONG | st.floats(-1e300, 1e300) | st.integers(-(2**63), 2**64 - 1),
    max_size=3,
)


@st.composite
def links(draw: st.DrawFn, i: int = 0) -> Any:
    """The i-th link of a spec: its own uid, interface and addresses unless drawn bad."""
    if draw(one_in(30)):
        return draw(WRONG)
    link: dict[str, Any] = {}
    if not draw(one_in(30)):
        link["uid"] = draw(mostly(st.just(i + 1), BAD_UIDS))
    link["peer_pod"] = draw(mostly(st.sampled_from(["r1", "r2", "a.b-c", "localhost"]), BAD_NAMES))
    link["local_intf"] = draw(mostly(st.just(f"eth{i + 1}"), BAD_INTF))
    link["peer_intf"] = draw(mostly(st.sampled_from(["eth1", "e" * 15, "swp1\u00e9"]), BAD_INTF))
    optional: dict[str, st.SearchStrategy[Any]] = {
        "local_ip": mostly(
            st.sampled_from([f"10.0.{i}.1/30", f"2001:db8:{i}::1/64"]),
            st.sampled_from(["10.0.0.1", "10.0.0.1/33", "224.0.0.1/4", "::/0", "x/24"]),
        ),
        "peer_ip": mostly(st.just(f"10.0.{i}.2/30"), st.just(f"10.0.{i}.1/30")),
        "mtu": mostly(st.integers(68, 65535), st.sampled_from([0, 67, 65536, 2**40])),
        "local_mac": mostly(
            st.just(f"02:00:00:00:00:{i:02x}"),
            st.sampled_from(["01:00:00:00:00:01", "00:00:00:00:00:00", "zz"]),
        ),
        "impairments": mostly(
            st.fixed_dictionaries(
                {}, optional={"delay_ms": st.integers(0, 100), "loss_pct": st.floats(0, 100)}
            ),
            IMPAIRMENTS,
        ),
        "state": mostly(st.sampled_from(["up", "down"]), st.sampled_from(["UP", "", "sideways"])),
        "unknown_field": ANY_JSON,
    }
    for name in sorted(draw(st.sets(st.sampled_from(sorted(optional)), max_size=3))):
        link[name] = draw(optional[name])
    return link


@st.composite
def link_lists(draw: st.DrawFn) -> list[Any]:
    return [draw(links(i)) for i in range(draw(st.sampled_from([1, 2, 3, 4, 0])))]


ANNOTATIONS = st.one_of(
    st.builds(json.dumps, st.dictionaries(st.sampled_from(["eth1", "eth2"]), ANY_JSON, max_size=2)),
    st.sampled_from(["{", "[]", '{"eth1": {"state": "sideways"}}', '{"eth1": {"impairments": 5}}']),
    WRONG,
)


@st.composite
def metadata(draw: st.DrawFn, name: Any) -> Any:
    if draw(one_in(20)):
        return draw(WRONG)
    meta: dict[str, Any] = {"name": name}
    if draw(st.booleans()):
        meta["namespace"] = draw(mostly(st.just("default"), st.sampled_from(["other", "Bad", ""])))
    if draw(st.booleans()):
        meta["annotations"] = draw(
            st.dictionaries(st.just(ANNOTATION) | st.text(max_size=5), ANNOTATIONS, max_size=2)
            | WRONG
        )
    if draw(st.booleans()):
        meta["labels"] = draw(st.dictionaries(st.text(max_size=5), ANY_JSON, max_size=2))
    for server_field in ("resourceVersion", "uid", "generation", "creationTimestamp"):
        if draw(one_in(6)):
            meta[server_field] = draw(ANY_JSON)
    return meta


STATUSES = st.fixed_dictionaries(
    {},
    optional={
        "src_ip": mostly(st.just("10.1.0.5"), st.just("")),
        "net_ns": mostly(st.just("/var/run/netns/cni-1"), st.just("")),
        "container_id": mostly(st.just("c0ffee"), st.just("")),
        "plumbing_error": mostly(st.just(""), st.just("x")),
        "skipped": mostly(
            st.lists(
                st.fixed_dictionaries({"pod_name": GOOD_NAMES, "link_id": st.integers(0, 9)}),
                max_size=2,
            ),
            st.lists(WRONG | st.text(max_size=4), max_size=2),
        ),
        "unknown": ANY_JSON,
    },
)


@st.composite
def topologies(draw: st.DrawFn, name: Any) -> Any:
    """A Topology as a client might write it, most fields right, some not."""
    obj: dict[str, Any] = {
        "apiVersion": draw(mostly(st.just(API_VERSION), st.just("v1"))),
        "kind": draw(mostly(st.just(KIND), st.just("Pod"))),
        "metadata": draw(metadata(name)),
    }
    spec = draw(st.sampled_from(["links"] * 18 + ["none", "wrong"]))
    if spec == "wrong":
        obj["spec"] = draw(WRONG)
    elif spec == "links":
        obj["spec"] = {"links": draw(mostly(link_lists(), st.just([])))}
    if draw(st.booleans()):
        obj["status"] = draw(STATUSES | WRONG)
    if draw(st.booleans()):
        obj[draw(st.text(min_size=1, max_size=6))] = draw(ANY_JSON)
    return obj


def encode(value: Any) -> bytes:
    return json.dumps(value).encode()


# Bodies no parser should take whole: not JSON, not UTF-8, too deep, too big. The long ones
# are drawn as a marker (`@name`) and made only when sent, so a failing example prints short.
LONG_BODIES = {
    b"@nested-2000": b"[" * 2000 + b"]" * 2000,
    b"@spec-nested-300": b'{"apiVersion": "networkop.co.uk/v1beta1", "kind": "Topology", '
    b'"metadata": {"name": "deep"}, "spec": {"links": [], "x": ' + b"[" * 300 + b"]" * 300 + b"}}",
    b"@oversized": b'{"metadata": {"name": "big"}, "x": "' + b"a" * (3 << 20) + b'"}',
}
RAW_BODIES = st.sampled_from(
    [
        b"",
        b"{",
        b"nul",
        b'{"a": NaN}',
        b"\xff\xfe{}",
        b'{"apiVersion": "\xff"}',
        b'{"apiVersion": "\\ud800"}',
        b'{"uid": 123456789012345678901234567890}',
        *LONG_BODIES,
    ]
)


def bodies(name: Any) -> st.SearchStrategy[bytes]:
    return st.one_of(
        topologies(name).map(encode),
        topologies(name).map(encode),
        ANY_JSON.map(encode),
        RAW_BODIES,
    )


POINTERS = st.sampled_from(
    [
        "",
        "/spec",
        "/spec/links",
        "/spec/links/0",
        "/spec/links/-",
        "/spec/links/0/uid",
        "/spec/links/01",
        "/spec/links/\u00b2",
        "/spec/links/99999999999999999999",
        "/metadata/name",
        "/metadata/annotations",
        "/metadata/annotations/meshwire.dev~1emulation",
        "/status/src_ip",
        "/kind",
        "/nothing/here",
        "spec",
        "/spec/links/0/uid/x",
    ]
)
OPERATIONS = st.fixed_dictionaries(
    {"op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test", "nope"])},
    optional={"path": POINTERS | WRONG, "from": POINTERS | WRONG, "value": ANY_JSON | links()},
)


@st.composite
def merge_patches(draw: st.DrawFn) -> bytes:
    """A merge patch: part of a Topology (nulls delete), any JSON, or raw bytes."""
    kind = draw(st.sampled_from([2, 3, 4, 5, 0, 1]))
    if kind == 0:
        return draw(ANY_JSON.map(encode) | RAW_BODIES)
    if kind == 1:
        deep = draw(st.sampled_from([300, 900, 1020]))
        return b'{"spec": {"x": ' + b'{"a": ' * deep + b"1" + b"}" * deep + b"}}"
    patch = draw(topologies(SEED))
    for key in draw(st.lists(st.sampled_from(sorted(patch)), max_size=2)):
        patch[key] = None
    return encode(patch)


# --- the contract ---------------------------------------------------------------------


def assert_refused_clearly(answer: Answer) -> None:
    assert isinstance(answer.body, dict), f"{answer.status}: not a Status: {answer.body[:200]!r}"
    status = answer.body
    assert status.get("kind") == "Status" and status.get("code") == answer.status, status
    assert isinstance(status.get("message"), str) and status["message"], status
    if answer.status == 422:
        causes = status.get("details", {}).get("causes", [])
        assert causes and all(cause.get("field") for cause in causes), status


def assert_admitted_and_readable(api: Served, answer: Answer) -> None:
    obj = answer.body
    assert isinstance(obj, dict), answer
    name = obj["metadata"]["name"]
    again = api.request("GET", f"{COLLECTION}/{name}", b"", "application/json")
    assert again == Answer(200, obj)
    topology = decode(obj)
    assert topology is not None, obj
    assert validate_topology(topology).ok, validate_topology(topology).problems


def check(api: Served, answer: Answer) -> None:
    assert answer.status < 500, answer
    if answer.status >= 400:
        assert_refused_clearly(answer)
    else:
        assert_admitted_and_readable(api, answer)


def ensure_seed(api: Served) -> None:
    """The object every replace and patch is aimed at, re-made if an example deleted it."""
    seed = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": SEED},
        "spec": {
            "links": [{"uid": 1, "peer_pod": "r1", "local_intf": "eth1", "peer_intf": "eth1"}]
        },
    }
    answer = api.request("POST", COLLECTION, encode(seed), "application/json")
    assert answer.status in (201, 409), answer


@ADMISSION
@given(data=st.data())
def test_a_write_is_refused_with_a_clear_4xx_or_stored_as_a_readable_topology(
    api: Served, data: st.DataObject
) -> None:
    ensure_seed(api)
    verb = data.draw(
        st.sampled_from(["create", "replace", "merge", "json-patch", "status", "status-put"])
    )
    item = f"{COLLECTION}/{SEED}"
    if verb == "create":
        name = data.draw(mostly(GOOD_NAMES, BAD_NAMES), "name")
        if isinstance(name, str) and name and "/" not in name and name != SEED:
            api.request("DELETE", f"{COLLECTION}/{name}", b"", "application/json")
        answer = api.request(
            "POST", COLLECTION, data.draw(bodies(name), "body"), "application/json"
        )
    elif verb == "replace":
        name = data.draw(st.just(SEED) | BAD_NAMES, "name")
        answer = api.request("PUT", item, data.draw(bodies(name), "body"), "application/json")
    elif verb == "merge":
        answer = api.request("PATCH", item, data.draw(merge_patches(), "patch"), MERGE_PATCH)
    elif verb == "json-patch":
        ops = data.draw(st.lists(OPERATIONS, max_size=3).map(encode) | RAW_BODIES, "patch")
        answer = api.request("PATCH", item, ops, JSON_PATCH)
    elif verb == "status":
        patch = data.draw(
            st.fixed_dictionaries({"status": STATUSES | WRONG}).map(encode) | merge_patches()
        )
        answer = api.request("PATCH", f"{item}/status", patch, MERGE_PATCH)
    else:
        body = data.draw(topologies(SEED).map(encode) | RAW_BODIES, "body")
        answer = api.request("PUT", f"{item}/status", body, "application/json")
    event(f"{verb}: {answer.status}")
    check(api, answer)
