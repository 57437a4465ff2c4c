"""Issue #39: an API with a token answers only who presents it.

`meshwire lab up` starts its embedded API with the lab's token; a request
without it, or with another, is answered 401 and changes nothing. The
daemons (kubernetes.aio, `api.token_file`) and `meshwire apply --token-file`
present it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import yaml
from kubernetes.aio import client as aio_client

from meshwire.control.auth import token as tokens
from meshwire.control.informer.client import make_api_client
from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from meshwire.tools.api.server import ApiServer
from meshwire.tools.client import apply_command
from tests.api_helpers import call, private_server, topology

TOKEN = "lab-token-0123456789"
COLLECTION = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"


def request(
    server: ApiServer, method: str, path: str, authorization: str = "", body: bytes = b""
) -> int:
    """The status of `method path` with header `authorization` ("" none)."""
    req = urllib.request.Request(server.url + path, data=body or None, method=method)
    req.add_header("Content-Type", "application/json")
    if authorization:
        req.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            status = json.loads(exc.read())
            assert (status["kind"], status["reason"]) == ("Status", "Unauthorized")
        return exc.code


def names(server: ApiServer) -> list[str]:
    """The Topology objects in the API, read with the token."""
    req = urllib.request.Request(server.url + COLLECTION)
    req.add_header("Authorization", tokens.header(TOKEN))
    with urllib.request.urlopen(req, timeout=10) as answer:
        return sorted(item["metadata"]["name"] for item in json.loads(answer.read())["items"])


async def test_a_request_without_the_token_or_with_another_is_401_and_changes_nothing(
    tmp_path: Path,
) -> None:
    async with private_server(tmp_path, token=TOKEN) as server:
        body = json.dumps(topology("r1", "r2")).encode()
        right = tokens.header(TOKEN)
        refused = [
            await call(request, server, "POST", COLLECTION, "", body),
            await call(request, server, "POST", COLLECTION, tokens.header("guess"), body),
            await call(request, server, "POST", COLLECTION, right[:-1], body),
            await call(request, server, "POST", COLLECTION, "Basic " + TOKEN, body),
            await call(request, server, "GET", COLLECTION),
            await call(request, server, "GET", "/apis"),
        ]
        assert refused == [401] * 6
        assert await call(names, server) == []  # nothing was created
        assert await call(request, server, "POST", COLLECTION, right, body) == 201
        # The scheme is case-insensitive: the Kubernetes client sends "bearer".
        assert await call(request, server, "GET", COLLECTION, "bearer " + TOKEN) == 200
        assert await call(names, server) == ["r1"]


async def test_the_daemons_client_and_apply_present_the_token_from_its_file(
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "token"
    token = tokens.generate(token_file)
    assert token_file.stat().st_mode & 0o777 == 0o600
    lab_file = tmp_path / "lab.yml"
    lab_file.write_text(yaml.safe_dump_all([topology("r1", "r2"), topology("r2", "r1")]))
    async with private_server(tmp_path, token=token) as server:
        argv = ["-f", str(lab_file), "--server", server.url]
        assert await call(apply_command.main, argv) == 1  # refused without the token
        assert await call(apply_command.main, [*argv, "--token-file", str(token_file)]) == 0

        api = await make_api_client(server.url, "", str(token_file))
        try:
            listed = await aio_client.CustomObjectsApi(api).list_namespaced_custom_object(
                GROUP, VERSION, "default", PLURAL
            )
        finally:
            await api.close()
        assert sorted(item["metadata"]["name"] for item in listed["items"]) == ["r1", "r2"]
