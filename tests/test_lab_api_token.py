"""Issue #39: a lab's API answers only its owner.

`meshwire lab up` writes a token (mode 0600) into the lab directory and its
embedded API asks every request for it. Another local user, who reaches the
API on the host's loopback as anyone can, gets 401 and changes nothing;
`lab up` (its apply) and `lab status`, run by the owner, work.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from lab_helpers import unique_lab

from meshwire.control.auth import token as tokens
from meshwire.control.model.topology import GROUP, PLURAL, VERSION
from meshwire.tools.lab.runtime import MeshwireRuntime
from meshwire.tools.lab.state import LabDir

pytestmark = pytest.mark.root

COLLECTION = f"/apis/{GROUP}/{VERSION}/namespaces/default/{PLURAL}"
NOBODY = 65534
FORGED = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "Topology",
    "metadata": {"name": "pwn", "namespace": "default"},
    "spec": {"links": []},
}


def status_as(uid: int, method: str, url: str, body: bytes = b"") -> int:
    """The HTTP status `method url` gets from a process of user `uid`, with no token.
    (A raw request: after setuid, the interpreter may not read its own lazy imports.)"""
    address = urllib.parse.urlsplit(url)
    head = (
        f"{method} {address.path} HTTP/1.0\r\nHost: {address.netloc}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    script = (
        "import encodings.idna, os, socket, sys\n"
        f"os.setgid({uid}); os.setuid({uid})\n"
        f"s = socket.create_connection(({address.hostname!r}, {address.port}), timeout=10)\n"
        f"s.sendall({head.encode() + body!r})\n"
        "print(s.recv(64).split()[1].decode())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def names(url: str, token: str) -> list[str]:
    request = urllib.request.Request(url, headers={"Authorization": tokens.header(token)})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return sorted(item["metadata"]["name"] for item in json.loads(answer.read())["items"])


def test_the_labs_api_refuses_another_user_and_serves_its_owner(tmp_path: Path) -> None:
    with unique_lab(tmp_path) as lab:
        # The API and the apply, no daemon: what the token guards is the API itself.
        runtime = MeshwireRuntime(with_daemons=False)
        assert lab.run("up", str(lab.file), "--wait", "0", runtime=runtime) == 0  # type: ignore[arg-type]
        directory = LabDir(lab.directory)
        info = directory.token_file.stat()
        assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.geteuid()
        state = directory.load()
        assert state.host_url, "the lab has no API on the host's loopback"
        url = state.host_url + COLLECTION
        before = names(url, directory.token())
        assert before  # lab up applied its topology, presenting the token

        assert status_as(NOBODY, "GET", url) == 401
        assert status_as(NOBODY, "POST", url, json.dumps(FORGED).encode()) == 401
        assert status_as(0, "GET", url) == 401  # root too, without the token
        assert names(url, directory.token()) == before  # nothing was created
        assert lab.run("status") == 0
