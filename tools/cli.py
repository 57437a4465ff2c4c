"""The `meshwire` command: dispatches each subcommand to the module that owns it.

Every command module exposes `main(argv: list[str]) -> int`; this file only
routes, so `meshwire <command> --help` is answered by the module itself and a
command's dependencies are imported only when it runs.
"""

from __future__ import annotations

import importlib
import sys

# command words -> module (relative to meshwire) whose main() runs them, or
# `module:function` for a module that runs more than one command.
COMMANDS: dict[tuple[str, ...], str] = {
    ("daemon",): "control.daemon.command",
    ("api", "serve"): "tools.api.command",
    ("apply",): "tools.client.apply_command",
    ("delete",): "tools.client.delete_command",
    ("cni", "install"): "control.cni.install",
    ("cni", "uninstall"): "control.cni.uninstall",
    ("lab", "graph"): "tools.graph.command:lab_main",
    ("lab",): "tools.lab.command",
    ("graph",): "tools.graph.command:cluster_main",
    ("config", "defaults"): "tools.client.config_command",
    ("links",): "tools.client.links_command",
    ("certs",): "tools.client.certs_command",
    ("capture",): "tools.client.capture",
}

USAGE = """usage: meshwire COMMAND [ARGS]

commands:
  daemon --config FILE            the node daemon (control + dataplane workers)
  api serve --db FILE --listen H:P
                                  the embedded Kubernetes-style API for Topology objects
  apply -f FILE [--server URL | --kubeconfig F]
                                  create or update the Topology objects in a file
  delete -f FILE [--server URL | --kubeconfig F]
                                  delete the Topology objects a file names
  cni install --bin-dir D --conf-dir D [--config FILE]
                                  install the CNI shim as `meshnet` and chain it
  cni uninstall --bin-dir D --conf-dir D
                                  take the shim out of the chain and remove it (links stay)
  lab up|status|check|down|...    a whole lab on one machine
  lab graph -o FILE | --serve H:P a picture of the lab (.svg .dot .mmd .json), or a live page
  graph --kubeconfig F [-n NS] -o FILE | --serve H:P
                                  a picture of a namespace's lab on a cluster
  links [--url URL | --config F] [--state S] [--json]
                                  this node's link ends, their state and last error
  config defaults                 print the config file with every default
  certs init DIR                  the cluster's CA, CA key and wire key, and their Secret
  capture NS/POD:INTF | --netns PATH INTF [-w FILE|-] [-c N] [--seconds S]
                                  a link end's frames as pcap (on the pod's node)
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    for words, module in sorted(COMMANDS.items(), key=lambda item: -len(item[0])):
        if tuple(args[: len(words)]) == words:
            name, _, function = module.partition(":")
            entry = importlib.import_module(f"meshwire.{name}")
            result: int = getattr(entry, function or "main")(args[len(words) :])
            return result
    stream = sys.stdout if args[:1] in (["-h"], ["--help"], []) else sys.stderr
    if args and stream is sys.stderr:
        print(f"meshwire: unknown command {' '.join(args[:2])!r}", file=sys.stderr)
    print(USAGE, file=stream, end="")
    return 0 if stream is sys.stdout else 2


if __name__ == "__main__":
    sys.exit(main())
