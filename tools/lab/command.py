"""`meshwire lab ...`: parse the command line and run one lab command.

Every command finds its lab by `--name` (default `lab`) under
/run/meshwire-lab, or by `--dir` when `up` was given one. Errors are printed
as `meshwire lab: <what>` with exit status 1; `check` exits 1 when a link fails
(a skipped link, one that nothing wires, does not fail it); `exec` exits with
its command's status. Options go before `exec`'s POD: what follows it is the
command.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from meshwire.tools.client import capture
from meshwire.tools.lab import emulate, podexec
from meshwire.tools.lab.check import check_all, tally
from meshwire.tools.lab.down import down
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.lab_names import LabNames, check_lab_name, netns_path
from meshwire.tools.lab.links import lab_links, topologies_of
from meshwire.tools.lab.ops import kill_api, kill_daemon, move_pod, partition_node, restart_pod
from meshwire.tools.lab.progress import for_stream
from meshwire.tools.lab.render import summary
from meshwire.tools.lab.runtime import MeshwireRuntime, Runtime
from meshwire.tools.lab.state import LabDir, LabState
from meshwire.tools.lab.status import api_items, api_statuses, gather, in_file_order, render
from meshwire.tools.lab.up import LINKS_TIMEOUT, UpOptions, up

# The commands that change the lab's state file: each holds its lock (LabDir.locked).
STATE_WRITERS = frozenset({"restart-pod", "move-pod", "kill-daemon", "kill-api"})


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="meshwire lab", description="a whole lab on one machine")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help)
        p.add_argument("--name", default="lab", help="lab name, 1-7 of [a-z0-9] (default: lab)")
        p.add_argument("--dir", help="lab directory (default: /run/meshwire-lab/NAME)")
        return p

    def wait_option(p: argparse.ArgumentParser, what: str) -> None:
        p.add_argument(
            "--wait",
            type=float,
            default=LINKS_TIMEOUT,
            help=f"seconds to wait for {what} (default: {LINKS_TIMEOUT:.0f}; 0: none)",
        )

    p = command("up", "build the lab from a lab file")
    p.add_argument("file", type=Path, help="meshnet Topology YAML, containerlab or KNE file")
    p.add_argument("--nodes", type=int, default=2, help="simulated nodes (default: 2)")
    p.add_argument("--placement", type=Path, help="YAML/JSON mapping `pod: node`")
    p.add_argument("--config", type=Path, help="daemon config every node starts from")
    wait_option(p, "every link end to be up")
    p.add_argument(
        "--no-daemon", action="store_true", help="nodes, pods and API only: no daemons, no CNI"
    )
    p.add_argument(
        "--kubeconfig",
        type=Path,
        help="the daemons watch the API server this kubeconfig names instead of an embedded "
        "API (it needs a Topology CRD: deploy/crd.yaml)",
    )
    p = command("status", "pods, nodes and links with their state and counters")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    command("check", "prove every link carries traffic")
    p = command("restart-pod", "CNI DEL, new netns, CNI ADD with a new container id")
    p.add_argument("pod")
    wait_option(p, "the pod's links to be up at both ends")
    p = command("move-pod", "CNI DEL on the pod's node, CNI ADD on another")
    p.add_argument("pod")
    p.add_argument("node")
    wait_option(p, "the pod's links to be up at both ends")
    p = command("kill-daemon", "SIGKILL a node's daemon and start it again")
    p.add_argument("node")
    command("kill-api", "SIGKILL the embedded API and start it again")
    p = command("partition", "cut a node off the underlay for a while, then plug it back")
    p.add_argument("node")
    p.add_argument("--seconds", type=float, default=5.0, help="how long (default 5)")
    p = command("impair", "set, clear or show the impairments of the frames an end sends")
    p.add_argument("end", metavar="POD:INTF")
    for flag, field in emulate.FLAGS.items():
        unit = field.rpartition("_")[2].replace("pct", "%").replace("mbps", "Mbit/s")
        # argparse expands %-formats in help: a literal % is written %%.
        text = f"{field} ({unit})".replace("%", "%%")
        p.add_argument(f"--{flag}", type=float, metavar=unit.upper(), help=text)
    p.add_argument("--clear", action="store_true", help="remove every impairment of the end")
    p = command("link", "pull (down) or plug back (up) the cable of a link")
    p.add_argument("end", metavar="POD:INTF")
    p.add_argument("state", choices=("down", "up"))
    p = command("capture", "an end's frames as pcap, from inside its pod")
    p.add_argument("end", metavar="POD:INTF")
    capture.add_options(p)
    p = command("exec", "run a command in a pod, as docker exec does")
    p.add_argument("-i", "--interactive", action="store_true", help="pass stdin to the command")
    p.add_argument("-t", "--tty", action="store_true", help="run it on a terminal")
    p.add_argument("pod")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="[--] CMD ...")
    p = command("logs", "the output of a pod's cmd")
    p.add_argument("pod")
    p.add_argument("-f", "--follow", action="store_true", help="go on until the cmd ends")
    command("down", "remove everything the lab made")
    # Listed for --help; `meshwire lab graph` is dispatched to tools/graph/command.py.
    command("graph", "a picture of the lab (.svg .dot .mmd .json), or a live page (--serve)")
    return top


def main(argv: list[str], runtime: Runtime | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        names = LabNames(check_lab_name(args.name))
        lab = LabDir.locate(args.name, args.dir)
        return run(args, names, lab, runtime)
    except LabError as exc:
        print(f"meshwire lab: {exc}", file=sys.stderr)
        return 1


def run(args: argparse.Namespace, names: LabNames, lab: LabDir, runtime: Runtime | None) -> int:
    if args.command == "up":
        options = UpOptions(
            args.file,
            args.nodes,
            args.placement,
            args.config,
            args.name,
            args.dir,
            args.wait,
            args.kubeconfig,
        )
        chosen = runtime or MeshwireRuntime(with_daemons=not args.no_daemon)
        state = up(options, chosen, for_stream(sys.stdout))
        placement = {key: pod.node for key, pod in state.pods.items()}
        links = lab_links(topologies_of(state.topologies), placement, state.inter_node_link_type)
        print(summary(state, links))
        return 0
    if args.command == "down":
        removed = down(lab, names)
        print(
            "\n".join(f"removed {line}" for line in removed)
            or f"lab {args.name}: nothing to remove"
        )
        return 0
    if args.command in STATE_WRITERS:
        with lab.locked():
            return _run_on(args, names, lab, lab.load(), runtime)
    return _run_on(args, names, lab, lab.load(), runtime)


def _run_on(
    args: argparse.Namespace, names: LabNames, lab: LabDir, state: LabState, runtime: Runtime | None
) -> int:
    """A command on a lab that exists, with its state as loaded."""
    chosen = runtime or MeshwireRuntime(with_daemons=state.with_daemons)
    if args.command == "status":
        status = gather(state, names)
        print(json.dumps(status, indent=2) if args.json else render(status))
        return 0
    if args.command == "check":
        placement = {key: pod.node for key, pod in state.pods.items()}
        # The API's objects, in the file's order: edits since `up` (a pulled cable).
        objects = in_file_order(state.topologies, api_items(state, names))
        links = lab_links(topologies_of(objects), placement, state.inter_node_link_type)
        statuses = api_statuses(state, names) or {}
        errors = {
            pod: s["plumbing_error"] for pod, s in statuses.items() if s.get("plumbing_error")
        }
        results = check_all(names, links, errors)
        for result in results:
            print(result.line())
        print(tally(results))
        return 1 if any(not r.ok for r in results) else 0
    if args.command == "exec":
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        return podexec.exec_in_pod(state, args.pod, argv, args.interactive, args.tty)
    if args.command == "logs":
        return podexec.show_logs(lab, state, args.pod, args.follow)
    if args.command == "restart-pod":
        print(restart_pod(lab, state, chosen, args.pod, args.wait))
    elif args.command == "move-pod":
        print(move_pod(lab, state, chosen, args.pod, args.node, args.wait))
    elif args.command == "kill-daemon":
        print(kill_daemon(lab, state, chosen, args.node))
    elif args.command == "kill-api":
        print(kill_api(lab, state, chosen))
    elif args.command == "partition":
        print(partition_node(state, args.node, args.seconds))
    elif args.command == "impair":
        changes = {
            field: getattr(args, flag)
            for flag, field in emulate.FLAGS.items()
            if getattr(args, flag) is not None
        }
        if changes and args.clear:
            raise LabError("impair: --clear takes no other flag")
        print(emulate.impair(state, names, args.end, changes, args.clear))
    elif args.command == "link":
        print(emulate.set_state(state, names, args.end, args.state))
    elif args.command == "capture":
        pod_name, intf = emulate.split_end(args.end)
        pod = state.pod(pod_name)
        what = f"meshwire lab capture {pod.key}:{intf}"
        return capture.run(netns_path(pod.netns), intf, args.write, args.count, args.seconds, what)
    return 0
