"""`s3` — one command line for data, indexes, retrieval, search, evaluation, training and the demo.

Every command takes `--config FILE` and `--set section.key=value` (repeatable). Command modules live in
s3/commands/; each exposes `register(subparsers, common)` and does its heavy imports inside its handlers, so
`s3 --help` stays instant. Errors the toolkit raises on purpose (S3Error) and failed file / socket operations on the
paths and ports a user gave (OSError) print one clear line and exit 2, no traceback. A reader that stops reading the
output (`s3 ... | head -3`) ends the command quietly, exit 141 (128 + SIGPIPE, as a piped tool killed by it).
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
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
        sys.stdout.flush()  # what a pipe still buffers goes now, where a reader that has gone is handled below
        return int(rc or 0)
    except S3Error as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError as e:
        if not stdout_closed():  # a socket or a pipe of the command's own: an error like any other
            return _os_error(e)
        quiet_stdout()
        return BROKEN_PIPE_EXIT
    except OSError as e:  # a path or a port the user gave: a missing file, a file where a folder belongs, ...
        return _os_error(e)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a piped tool its reader's exit killed


def _os_error(e: OSError) -> int:
    from s3core.io import describe_os_error

    print(f"error: {describe_os_error(e)}", file=sys.stderr)
    return 2


def stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (`s3 ... | head` after head exits): the pipe reports an
    error condition to poll(). False for a terminal, a file, or a stream without a file descriptor."""
    try:
        fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else -1
        if fd < 0 or not hasattr(select, "poll"):
            return False
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(event & select.POLLERR for _, event in poller.poll(0))
    except (OSError, ValueError):
        return False


def quiet_stdout() -> None:
    """Point standard output at /dev/null, so that what is still buffered for the gone reader is dropped at exit
    instead of failing Python's last flush with a second BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ is not None else 1)
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
