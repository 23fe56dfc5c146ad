"""`keras-transformer`: the command line, one subcommand per pipeline stage.

Each subcommand loads the config and calls its stage's function; bad input (a config or a
corpus) prints one line to stderr and exits with status 2.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from pipelines import InputError


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one subcommand; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description="The Transformer of 'Attention Is All You Need' as an NMT pipeline.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    prepare = commands.add_parser(
        "prepare", help="corpus -> runs/NAME/data/{train,dev,test}.{src,tgt} + vocab/spm.model")
    prepare.add_argument("config", help="a pipeline YAML file or a builtin name (demo)")
    prepare.set_defaults(handler=_prepare)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return args.handler(args)
    except InputError as error:
        print(f"keras-transformer {args.command}: error: {error}", file=sys.stderr)
        return 2


def _prepare(args: argparse.Namespace) -> int:
    from pipelines.config import load_config
    from pipelines.prepare import prepare

    print(prepare(load_config(args.config)).format())
    return 0
