"""The `s3` command line, the assembled configuration and the public build entry point (top of the import layers).

    from s3 import build_searcher, load_config

`build_searcher` / `load_config` are imported on first use, so `import s3` (and `s3 --help`) stay instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from s3.build import BuiltSearcher, build_searcher
    from s3.config import S3Config, load_config

__all__ = ["BuiltSearcher", "S3Config", "build_searcher", "load_config"]


def __getattr__(name: str) -> object:
    if name in ("BuiltSearcher", "build_searcher"):
        from s3 import build

        return getattr(build, name)
    if name in ("S3Config", "load_config"):
        from s3 import config

        return getattr(config, name)
    raise AttributeError(f"module 's3' has no attribute {name!r}")
