"""`meshwire config defaults`: print the full config file with every default."""

from __future__ import annotations

import argparse
import sys

from meshwire.control.common.config import defaults_yaml


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="meshwire config defaults",
        description="Print the daemon config file with every key, its default and its meaning.",
    )
    parser.parse_args(argv)
    sys.stdout.write(defaults_yaml())
    return 0
