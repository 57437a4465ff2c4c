"""`meshwire certs init DIR [--force]`: the cluster's credentials, in files and as a Secret.

Writes DIR/ca.crt, DIR/ca.key, DIR/wire.key and DIR/secret.yaml (the Secret
`meshwire-auth` in namespace `meshwire` holding the three, which deploy/'s
DaemonSet mounts at /etc/meshwire-auth, where the `auth.*` defaults point):

    meshwire certs init ./meshwire-auth && kubectl apply -f ./meshwire-auth/secret.yaml

Exits 1 if a file exists (unless --force) or cannot be written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from meshwire.control.auth import certs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="meshwire certs",
        description="Make the cluster's credentials: a CA and its key (each daemon issues its "
        "own node certificate with them) and a wire key, as files and as a Secret manifest.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="write a new CA, CA key, wire key and Secret manifest")
    init.add_argument("dir", type=Path, help="directory to write into (created if missing)")
    init.add_argument("--force", action="store_true", help="replace files that exist")
    args = parser.parse_args(argv)
    try:
        paths = certs.init_dir(args.dir, force=args.force)
    except (certs.CredentialError, OSError) as exc:
        print(f"meshwire certs init: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    secret = args.dir / certs.SECRET
    print(f"apply it with: kubectl apply -f {secret}", file=sys.stderr)
    return 0
