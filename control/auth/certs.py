"""The cluster's credentials: a CA, its key and the wire keys, and node certificates from them.

`meshwire certs init DIR` writes (certs_command.py):

    DIR/ca.crt      the cluster CA (config `auth.ca_cert`)
    DIR/ca.key      its private key (`auth.ca_key`), 0600
    DIR/wire.key    one wire key, hex (`auth.wire_key`), 0600
    DIR/secret.yaml all three as the Secret `meshwire-auth` that deploy/ mounts

Each daemon issues its own certificate at start (and again when the CA files
change) with the CA key: its subject and SANs name the node (DNS: node_name,
IP: node_ip), so the Peer service can check that a caller claiming node X
holds X's certificate. Whoever holds the CA key can mint any node's
certificate: the trust boundary is the Secret (as for the wire key), and a
pod without it is refused.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
WIRE_KEY = "wire.key"
SECRET = "secret.yaml"
SECRET_NAME = "meshwire-auth"
SECRET_NAMESPACE = "meshwire"
CA_DAYS = 3650
WIRE_KEY_BYTES = 32
# A node certificate outlives no CA, and is issued again at every daemon start.
NODE_DAYS = 365


class CredentialError(ValueError):
    """A credential file is missing or unusable; the message names the file."""


@dataclass(frozen=True)
class Issued:
    """A node's certificate and key (PEM), and the CA bundle that trusts peers (PEM)."""

    key: bytes
    chain: bytes
    roots: bytes


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def make_ca(name: str = "meshwire cluster CA", days: int = CA_DAYS) -> tuple[bytes, bytes]:
    """A new self-signed CA: (certificate PEM, key PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return _cert_pem(cert), _key_pem(key)


def make_wire_key() -> bytes:
    return (secrets.token_hex(WIRE_KEY_BYTES) + "\n").encode()


def init_dir(directory: Path, force: bool = False) -> list[Path]:
    """Writes a new CA, its key, a wire key and their Secret manifest into `directory`;
    returns the files. Refuses to overwrite any of them unless `force`."""
    paths = [directory / name for name in (CA_CERT, CA_KEY, WIRE_KEY, SECRET)]
    existing = [str(p) for p in paths if p.exists()]
    if existing and not force:
        raise CredentialError(f"{', '.join(existing)}: exists (--force replaces it)")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = make_ca()
    wire = make_wire_key()
    _write(paths[0], cert, 0o644)
    _write(paths[1], key, 0o600)
    _write(paths[2], wire, 0o600)
    _write(paths[3], secret_manifest(cert, key, wire).encode(), 0o600)
    return paths


def secret_manifest(cert: bytes, key: bytes, wire: bytes) -> str:
    files = ((CA_CERT, cert), (CA_KEY, key), (WIRE_KEY, wire))
    data = {name: base64.b64encode(value).decode() for name, value in files}
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET_NAME, "namespace": SECRET_NAMESPACE},
            "type": "Opaque",
            "data": data,
        },
        sort_keys=False,
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def issue(
    ca_bundle: bytes, ca_key: bytes, node_name: str, node_ip: str, where: tuple[str, str]
) -> Issued:
    """A certificate for this node, signed by the CA of `ca_bundle` whose key is `ca_key`.

    `where` names the two files (as config keys and paths) for errors."""
    try:
        cas = x509.load_pem_x509_certificates(ca_bundle)
    except ValueError as exc:
        raise CredentialError(f"{where[0]}: not a PEM certificate bundle ({exc})") from None
    try:
        signer = serialization.load_pem_private_key(ca_key, password=None)
    except (ValueError, TypeError) as exc:
        raise CredentialError(f"{where[1]}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(signer, ec.EllipticCurvePrivateKey):
        raise CredentialError(f"{where[1]}: an EC key is expected (meshwire certs init makes one)")
    public = signer.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    issuer = next(
        (
            ca
            for ca in cas
            if ca.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            == public
        ),
        None,
    )
    if issuer is None:
        raise CredentialError(f"{where[1]}: the key of no certificate in {where[0]}")
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    not_after = min(now + datetime.timedelta(days=NODE_DAYS), issuer.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, node_name)]))
        .issuer_name(issuer.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(node_name), x509.IPAddress(ipaddress.ip_address(node_ip))]
            ),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(signer, hashes.SHA256())
    )
    return Issued(_key_pem(key), _cert_pem(cert), ca_bundle)


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
