"""`s3` — one command line for data, indexes, retrieval, search, evaluation, training and the demo.

Every command takes `--config FILE` and `--set section.key=value` (repeatable). Command modules live in
s3/commands/; each exposes `register(subparsers, common)` and does its heavy imports inside its handlers, so
`s3 --help` stays instant. Errors the toolkit raises on purpose (S3Error) and failed file / socket operations on the
paths and ports a user gave (OSError) print one clear line and exit 2, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from s3core.errors import S3Error
from s3core.frameworks import keep_jax_off_gpus

# Command modules, in help order. Each registers one or more subcommands.
COMMAND_MODULES = [
    "s3.commands.config_cmd",
    "s3.commands.data",
    "s3.commands.retrieval",
    "s3.commands.search",
    "s3.commands.searchers",
    "s3.commands.serve",
    "s3.commands.mcp",
    "s3.commands.evaluate",
    "s3.commands.analyze",
    "s3.commands.train",
    "s3.commands.demo",
    "s3.commands.models",
    "s3.commands.doctor",
]


def _common_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config", action="append", default=None, metavar="FILE",
        help="config file, or a preset name from configs/ (repeatable: later files win; default ./config.toml, "
        "else the built-in defaults), e.g. --config cpu --config mine.toml",
    )
    common.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="override one config value (repeatable), e.g. --set searcher.max_turns=2",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="s3", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = _common_parser()
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub, common)
    return parser


# Output that is not a terminal (a pipe, a file) is not wrapped: rich wraps at 80 columns when it cannot see a
# terminal, and a table cut into lines at column 80 is hard to grep or read back. COLUMNS is what rich (and shutil)
# read; a value the user set wins.
UNWRAPPED_COLUMNS = "1000"


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    keep_jax_off_gpus()  # a JAX some dependency imports never grabs the GPU (s3core/frameworks.py)
    parser = build_parser()
    args = parser.parse_args(argv)  # --help keeps argparse's own wrapping
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0
    set_columns = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    if set_columns:
        os.environ["COLUMNS"] = UNWRAPPED_COLUMNS
    try:
        return _run(args)
    finally:
        if set_columns:
            os.environ.pop("COLUMNS", None)


def _run(args: argparse.Namespace) -> int:
    try:
        from s3.config import load_config

        cfg = load_config(args.config, args.overrides)
        rc = args.handler(args, cfg)
        return int(rc or 0)
    except S3Error as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a path or a port the user gave: a missing file, a file where a folder belongs, ...
        from s3core.io import describe_os_error

        print(f"error: {describe_os_error(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
