"""What a searcher's run record says of it (searcher/base.py `Searcher.identity`): paths as a run directory records
them, and the hash of the GGUF behind an offline model string. eval/build.py records the generator's with the same."""

from __future__ import annotations

import os
from pathlib import Path

from s3core.io import file_sha256

__all__ = ["gguf_sha256", "local_path", "relative"]


def relative(path: Path, run_dir: Path) -> str:
    """A path as run.json records it: relative to the run directory, so a run that moves with its data (a committed
    result, a fresh clone elsewhere) still finds it (eval/analysis.py `resolve_recorded` reads both forms).

    >>> relative(Path("/x/data/hotpot"), Path("/x/runs/qwen05/naive_rag"))
    '../../../data/hotpot'
    """
    return os.path.relpath(path.resolve(), run_dir.resolve())


def local_path(path: str | None, run_dir: Path | None) -> str | None:
    """A setting's path as run.json records it: relative to the run directory when it is a folder or file here (a
    committed result carries no path of the machine that made it), as given otherwise (a hub name, None, or no run
    directory to be relative to).

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp()); (root / "policies/p").mkdir(parents=True)
    >>> local_path(str(root / "policies/p"), root / "results/run"), local_path("org/model", root), local_path(None, root)
    ('../../policies/p', 'org/model', None)
    """
    if run_dir is None:
        return path
    return relative(Path(path), run_dir) if path and Path(path).exists() else path


def gguf_sha256(model: str, api_base: str | None = None) -> str | None:
    """sha256 of the GGUF behind an offline model string (s3runtime.llm_local.model_fingerprint; hashed from the file
    when the registry has no pinned value yet); None for any other model."""
    from s3runtime import llm_local, local_models

    info = llm_local.model_fingerprint(model, api_base)
    if "gguf_sha256" not in info:
        return None
    if info["gguf_sha256"]:
        return str(info["gguf_sha256"])
    name = model.partition("/")[2]
    return file_sha256(local_models.gguf_path(name))
