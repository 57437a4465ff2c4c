"""The API client reaches the server through the proxy the environment names, as
a Kubernetes client does: `HTTP_PROXY` (credentials included), and `NO_PROXY`
to go direct. It is looked up once, when the client is made (client.py).

A real forwarding proxy and the embedded API server, on the loopback of a
namespace of the test's own.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from kubernetes.aio.client import CustomObjectsApi

from meshwire.control.informer.client import make_api_client
from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from tests.api_helpers import serving
from tests.informer_helpers import private_loopback
from tests.kubeconfigs import write_kubeconfig

pytestmark = [pytest.mark.timeout(60), pytest.mark.root]

PROXY_VARS = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy")


@pytest.fixture(autouse=True)
def _own_loopback() -> Iterator[None]:
    with private_loopback():
        yield


@pytest.fixture(autouse=True)
def _no_proxy_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


class ForwardProxy:
    """A plain-HTTP forward proxy: each request (absolute URI) is sent on and its
    answer passed back; what came through is kept."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []  # (request target, Proxy-Authorization)
        self.url = ""

    async def _forward(self, request: web.Request) -> web.Response:
        self.seen.append((str(request.url), request.headers.get("Proxy-Authorization", "")))
        async with (
            aiohttp.ClientSession(trust_env=False) as session,
            session.request(
                request.method,
                str(request.url),
                data=await request.read(),
                headers={"Content-Type": request.headers.get("Content-Type", "")},
            ) as answer,
        ):
            return web.Response(
                status=answer.status, body=await answer.read(), content_type=answer.content_type
            )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ForwardProxy]:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        try:
            yield self
        finally:
            await runner.cleanup()


def db(tmp_path: Path) -> str:
    return str(tmp_path / "api.sqlite")


async def list_topologies(url: str) -> int:
    api = await make_api_client(url, "")
    try:
        listed = await CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL)
    finally:
        await api.close()  # type: ignore[no-untyped-call]
    return len(listed["items"])


async def test_requests_go_through_the_proxy_the_environment_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(db(tmp_path)) as server, ForwardProxy().running() as proxy:
        url = server.url
        monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("http://", "http://ops:s3cret@"))
        assert await list_topologies(url) == 0
    credentials = base64.b64encode(b"ops:s3cret").decode()
    assert proxy.seen == [
        (f"{url}/apis/{GROUP}/{VERSION}/{PLURAL}", f"Basic {credentials}"),
    ]


async def test_a_server_named_in_no_proxy_is_reached_directly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serving(db(tmp_path)) as server, ForwardProxy().running() as proxy:
        url = server.url
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        assert await list_topologies(url) == 0
    assert proxy.seen == []


async def test_a_kubeconfig_proxy_url_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        serving(db(tmp_path)) as server,
        ForwardProxy().running() as named,
        ForwardProxy().running() as environment,
    ):
        url = server.url
        monkeypatch.setenv("HTTP_PROXY", environment.url)
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url, proxy_url=named.url)
        api = await make_api_client("", str(kubeconfig))
        try:
            listed = await CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, PLURAL)
        finally:
            await api.close()  # type: ignore[no-untyped-call]
    assert listed["items"] == []
    assert [target for target, _ in named.seen] == [f"{url}/apis/{GROUP}/{VERSION}/{PLURAL}"]
    assert environment.seen == []
