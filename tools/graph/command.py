"""`meshwire lab graph` and `meshwire graph`: write a picture, or serve the live page.

    meshwire lab graph (-o FILE | --serve HOST:PORT) [--name N | --dir D]
    meshwire graph --kubeconfig F [-n NAMESPACE] (-o FILE | --serve HOST:PORT)

`-o` writes the format its extension names: `.svg` (Graphviz draws it),
`.dot`, `.mmd` (Mermaid) or `.json`; `-` prints dot. `--serve` runs until
interrupted. Exit status 0; 1 when the lab, the cluster or Graphviz fails,
naming it; 2 for bad arguments (an unknown extension included).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path

from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from meshwire.tools.graph.formats import to_dot, to_json, to_mermaid
from meshwire.tools.graph.layout import GraphvizError, svg
from meshwire.tools.graph.model import Graph
from meshwire.tools.graph.serve import serve
from meshwire.tools.graph.sources import KubeSource, LabSource, Source
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.lab_names import LabNames, check_lab_name
from meshwire.tools.lab.state import LabDir

WRITERS: dict[str, Callable[[Graph], str]] = {
    ".svg": svg,
    ".dot": to_dot,
    ".gv": to_dot,
    ".mmd": to_mermaid,
    ".json": to_json,
}


def _output_options(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("-o", "--output", help="FILE.svg, .dot, .mmd or .json (- : dot on stdout)")
    what.add_argument("--serve", metavar="HOST:PORT", help="serve the live page")


def lab_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="meshwire lab graph", description="a picture of the lab, or a live page"
    )
    parser.add_argument("--name", default="lab", help="lab name (default: lab)")
    parser.add_argument("--dir", help="lab directory (default: /run/meshwire-lab/NAME)")
    _output_options(parser)
    args = parser.parse_args(argv)
    _check_output(parser, args.output)
    try:
        names = LabNames(check_lab_name(args.name))
        lab = LabDir.locate(args.name, args.dir)
        lab.load()
    except LabError as exc:
        print(f"meshwire lab graph: {exc}", file=sys.stderr)
        return 1
    return _run("meshwire lab graph", LabSource(lab, names), args)


def cluster_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="meshwire graph",
        description="a picture of a namespace's lab on a cluster, from its Topology objects",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: ~/.kube/config)")
    parser.add_argument("-n", "--namespace", default="default", help="(default: default)")
    parser.add_argument(
        "--inter-node-link-type",
        choices=("vxlan", "grpc"),
        default="vxlan",
        help="the daemons' inter_node_link_type, for the kind of links across nodes",
    )
    _output_options(parser)
    args = parser.parse_args(argv)
    _check_output(parser, args.output)
    try:
        source = KubeSource(args.kubeconfig, args.namespace, args.inter_node_link_type)
    except (ConfigException, OSError) as exc:
        print(f"meshwire graph: kubeconfig: {exc}", file=sys.stderr)
        return 1
    return _run("meshwire graph", source, args)


def _check_output(parser: argparse.ArgumentParser, output: str | None) -> None:
    if output and output != "-" and Path(output).suffix not in WRITERS:
        parser.error(f"{output}: the extension must be one of {', '.join(WRITERS)}")


def _run(prog: str, source: Source, args: argparse.Namespace) -> int:
    try:
        if args.serve:
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(serve(source, args.serve, lambda url: print(url, flush=True)))
            return 0
        graph = source.snapshot()
        if args.output == "-":
            sys.stdout.write(to_dot(graph))
            return 0
        path = Path(args.output)
        path.write_text(WRITERS[path.suffix](graph))
        print(f"{path}: {len(graph.pods)} pods, {len(graph.links)} links")
        return 0
    except GraphvizError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
    except (ApiException, OSError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
    except LabError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
    return 1
