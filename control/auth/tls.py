"""This node's Peer-service credentials: mutual TLS, re-issued when the CA files change.

`NodeCredentials` reads `auth.ca_cert` and `auth.ca_key`, issues this node's
certificate (certs.py) and hands out:

- server credentials that require a client certificate chaining to the CA
  bundle; grpc asks for them again at every new connection's handshake, so a
  new CA (files changed) applies to new connections while established ones keep
  theirs;
- channel credentials for calls to peers, with a `generation` that changes
  with the files, so the client opens new channels with the new ones;
- `identity_problem`: whether a caller's certificate names the node and address
  its request claims (a node may not speak for another).

The wire key file is checked at start too, so every credential error names its
config key before anything starts.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from meshwire.control.auth.certs import CredentialError, Issued, issue
from meshwire.control.common.config import AuthConfig
from meshwire.dataplane import preface

log = logging.getLogger(__name__)

_Stamp = tuple[tuple[int, int, int], ...]


def _read(key: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise CredentialError(
            f"{key}: {path}: {exc.strerror} (make the credentials with `meshwire certs init DIR`, "
            "or set auth.enabled false)"
        ) from None


def check_wire_key(auth: AuthConfig) -> None:
    """Raises CredentialError naming `auth.wire_key` if its file has no usable key."""
    text = _read("auth.wire_key", auth.wire_key)
    try:
        preface.parse_keys(text.decode(errors="replace"), auth.wire_key)
    except ValueError as exc:
        raise CredentialError(f"auth.wire_key: {exc}") from None


class NodeCredentials:
    def __init__(self, auth: AuthConfig, node_name: str, node_ip: str) -> None:
        self._auth = auth
        self.node_name = node_name
        self.node_ip = node_ip
        self._lock = threading.Lock()
        self.generation = 0
        self._stamp: _Stamp = ()
        self._issued = self._load()
        self._served = -1  # the generation the server credentials last handed out

    @property
    def issued(self) -> Issued:
        with self._lock:
            return self._issued

    def _stamp_now(self) -> _Stamp:
        out = []
        for path in (self._auth.ca_cert, self._auth.ca_key):
            s = os.stat(path)
            out.append((s.st_ino, s.st_size, s.st_mtime_ns))
        return tuple(out)

    def _load(self) -> Issued:
        try:  # taken before reading: a change while reading is seen by the next refresh
            stamp = self._stamp_now()
        except OSError:
            stamp = ()
        bundle = _read("auth.ca_cert", self._auth.ca_cert)
        key = _read("auth.ca_key", self._auth.ca_key)
        where = (f"auth.ca_cert: {self._auth.ca_cert}", f"auth.ca_key: {self._auth.ca_key}")
        issued = issue(bundle, key, self.node_name, self.node_ip, where)
        self._stamp = stamp
        return issued

    def refresh(self) -> bool:
        """Issues this node's certificate again if the CA files changed; returns whether it
        did. A bad new file is logged and the credentials in use are kept."""
        try:
            if self._stamp_now() == self._stamp:
                return False
            issued = self._load()
        except (OSError, CredentialError) as exc:
            log.warning("peer credentials: %s; keeping those in use", exc)
            return False
        with self._lock:
            self._issued = issued
            self.generation += 1
        log.info("peer credentials: the CA files changed; new connections use the new ones")
        return True

    def _configuration(self) -> Any:
        issued = self.issued
        return grpc.ssl_server_certificate_configuration(
            [(issued.key, issued.chain)], root_certificates=issued.roots
        )

    def server_credentials(self) -> Any:
        """Server credentials requiring a client certificate, fetched anew per handshake."""
        self._served = self.generation

        def fetch() -> Any:
            self.refresh()
            if self._served == self.generation:
                return None
            self._served = self.generation
            return self._configuration()

        return grpc.dynamic_ssl_server_credentials(
            self._configuration(), fetch, require_client_authentication=True
        )

    def channel_credentials(self) -> Any:
        issued = self.issued
        return grpc.ssl_channel_credentials(
            root_certificates=issued.roots, private_key=issued.key, certificate_chain=issued.chain
        )


def identity_problem(auth_context: Mapping[str, Sequence[bytes]], node: str, node_ip: str) -> str:
    """Why a caller whose TLS peer is `auth_context` may not speak as (node, node_ip); ""
    if it may: its certificate names both, as this node's own certificates do."""
    sans = auth_context.get("x509_subject_alternative_name", ())
    names = {v.decode(errors="replace") for v in sans}
    if not names:
        return "no client certificate"
    ips = set()
    for name in names:
        try:
            ips.add(ipaddress.ip_address(name))
        except ValueError:
            continue
    try:
        claimed_ip = ipaddress.ip_address(node_ip)
    except ValueError:
        claimed_ip = None
    if claimed_ip not in ips:
        return f"claims node_ip {node_ip} but its certificate names {', '.join(sorted(names))}"
    if node not in names:
        return f"claims node {node!r} but its certificate names {', '.join(sorted(names))}"
    return ""
