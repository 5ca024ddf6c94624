"""`s3 config show`: print the effective configuration (file + overrides) as TOML-like JSON."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from s3.config import S3Config


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("config", help="show the effective configuration", parents=[common])
    p.add_argument("action", choices=["show"], nargs="?", default="show")
    p.set_defaults(handler=_show)


def _show(args: argparse.Namespace, cfg: S3Config) -> int:
    print(json.dumps(cfg.model_dump(mode="json"), indent=2))
    return 0
