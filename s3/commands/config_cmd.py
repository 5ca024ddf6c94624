"""`s3 config show`: print the effective configuration (files + overrides) as JSON: relative paths resolved (against
the config file's folder, as every command resolves them) and key-shaped values redacted."""

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


def _redacted(value: Any) -> Any:
    """Every string through the one redaction step (a key pasted where a variable NAME belongs is not echoed)."""
    from s3core.credentials import redact

    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return redact(value) if isinstance(value, str) else value


def effective_config(cfg: S3Config) -> dict[str, Any]:
    """What `s3 config show` prints: the configuration with its path keys resolved and key-shaped values redacted."""
    from s3.config import _absolutize_paths

    data = cfg.model_dump(mode="json")
    _absolutize_paths(data, cfg.base_dir)
    return _redacted(data)  # type: ignore[no-any-return]


def _show(args: argparse.Namespace, cfg: S3Config) -> int:
    print(json.dumps(effective_config(cfg), indent=2))
    return 0
