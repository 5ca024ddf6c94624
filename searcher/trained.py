"""What a trained searcher was trained with, written beside its weights so it is served the way it was trained.

A training run writes `searcher.json` into the run directory and into every checkpoint's `policy/` folder (so an
exported or copied policy carries it too):

    {"format": 1,
     "base_model": "smollm2-135m-instruct",
     "searcher": {"k": 3, "max_turns": 1, "max_select": 2, "doc_token_budget": 40, ...},   # the loop's settings
     "prompt_sha256": "...",                                                                 # the s3 instruction
     "retriever": {"backend": "bm25", "k": 3, "index": "data/index",                       # relative to the record
                   "index_fingerprint": "<sha256 of index.json, path and time left out>", "corpus_sha256": "...",
                   "rebuild": "s3 index build --corpus data/corpus.jsonl --backend bm25 --out data/index"}}

`s3 search --policy RUN_DIR` and `s3 serve --policy RUN_DIR` apply both, so a searcher trained with one turn is not
served with three. Whatever the user gives explicitly (--index, keys of a --config file, --set) wins; an index taken
from the record whose fingerprint no longer matches (rebuilt from another corpus) is a clear error with the command
that rebuilds the right one. A trained searcher needs `searcher/` (and `s3core/`) alone: so does this module.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Collection
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from s3core.errors import ConfigError, S3Error
from s3core.io import JsonObject, file_sha256, text_sha256, write_json_atomic
from searcher.config import RetrieverConfig, SearcherConfig
from searcher.protocol import s3_prompt_sha256

RECORD_FILE = "searcher.json"
# The [searcher] settings that shape the loop (what the policy sees and may do). Sampling and serving keys
# (temperature, concurrency, the backend) stay the user's.
LOOP_KEYS = (
    "begin_with_search", "k", "max_select", "max_turns", "doc_token_budget", "min_turns", "no_selection",
    "context_cap", "additive", "max_new_tokens", "queries_per_turn", "start", "start_cap",
)


class RetrieverRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")

    backend: str
    k: int
    index: str | None = None
    index_fingerprint: str | None = None
    corpus_sha256: str | None = None
    rebuild: str | None = None


class TrainedSearcherRecord(BaseModel):
    """searcher.json. `kind`: the searcher kind it runs (searcher/kinds.py; records before format 2 are 'llm'); a
    searcher that runs no policy of its own (a script, the reading searcher) records its settings only, with its kind's
    sections as tables ({"reading": {"read_last": 16, ...}}), and no retriever: it runs over the user's index. `card`:
    what `s3 searchers` shows of a shipped one (where it applies, what it measured)."""

    model_config = ConfigDict(extra="ignore")

    format: int = 1
    kind: str = "llm"
    base_model: str | None = None
    searcher: dict[str, int | str | bool | dict[str, int | float | str | bool | None] | None]
    prompt_sha256: str | None = None
    retriever: RetrieverRecord | None = None
    card: JsonObject | None = None
    trained: JsonObject | None = None  # a trained reading searcher: what taught it (generator, data, weights' hashes)


def index_fingerprint(index_dir: Path) -> str | None:
    """sha256 of what the index is: its self-description (index.json: format, backend, parameters, encoder, corpus
    sha256, doc count, docstore sha256) without where and when it was built (the corpus and encoder paths,
    `created`), so the same corpus indexed again, on another machine or in a fresh clone, has the same fingerprint."""
    meta = index_dir / "index.json"
    if not meta.is_file():
        return None
    try:
        desc = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return file_sha256(meta)  # not ours to parse: the file's bytes
    if not isinstance(desc, dict):
        return file_sha256(meta)
    desc.pop("created", None)
    desc.pop("title_rule", None)  # how titles were read shows in the doc store's sha256: an index built before the
    # rule whose passages it reads alike keeps its fingerprint (and the searchers and baselines recorded against it)
    for part in ("corpus", "encoder"):  # where the corpus and the encoder's files were on the building machine
        if isinstance(desc.get(part), dict):
            desc[part] = {k: v for k, v in desc[part].items() if k != "path"}
    return text_sha256(json.dumps(desc, sort_keys=True))


def _corpus_sha256(index_dir: Path) -> str | None:
    from searcher.retrieval.store import read_manifest

    try:
        manifest = read_manifest(index_dir)
    except S3Error:
        return None
    return manifest.corpus.sha256 if manifest.corpus else None


def make_record(
    searcher_cfg: SearcherConfig, retriever_cfg: RetrieverConfig, index_dir: Path | None, folder: Path,
    *, base_model: str | None = None, corpus: Path | None = None,
) -> TrainedSearcherRecord:
    """The record of a searcher trained with these settings over `index_dir`, paths relative to `folder`."""

    def rel(p: Path) -> str:
        return os.path.relpath(p.resolve(), folder.resolve())

    retr = RetrieverRecord(backend=retriever_cfg.backend, k=retriever_cfg.k)
    if index_dir is not None:
        retr.index = rel(index_dir)
        retr.index_fingerprint = index_fingerprint(index_dir)
        retr.corpus_sha256 = _corpus_sha256(index_dir)
        if corpus is not None:
            retr.rebuild = f"s3 index build --corpus {rel(corpus)} --backend {retriever_cfg.backend} --out {rel(index_dir)}"
    return TrainedSearcherRecord(
        base_model=base_model,
        searcher={k: getattr(searcher_cfg, k) for k in LOOP_KEYS},
        prompt_sha256=s3_prompt_sha256(searcher_cfg.max_select, searcher_cfg.queries_per_turn),
        retriever=retr,
    )


def write_record(record: TrainedSearcherRecord, folder: Path) -> Path:
    """Write `record` as folder/searcher.json (atomically). Its relative paths must be relative to `folder`."""
    path = folder / RECORD_FILE
    write_json_atomic(path, record.model_dump(mode="json"))
    return path


def relocate_record(src: Path, dst: Path) -> Path | None:
    """A policy folder copied from `src` to `dst` (an exported checkpoint): write its record into `dst` with the index
    and rebuild paths re-based, since they are relative to the record. None when `src` has no record."""
    path = src / RECORD_FILE
    if not path.is_file():
        return None
    record = TrainedSearcherRecord.model_validate_json(path.read_text(encoding="utf-8"))

    def move(p: str) -> str:
        return p if os.path.isabs(p) else os.path.relpath((src / p).resolve(), dst.resolve())

    retr = record.retriever
    if retr is None:  # nothing relative to move
        return write_record(record, dst)
    update: dict[str, str] = {}
    if retr.index:
        update["index"] = move(retr.index)
    if retr.rebuild:
        words = shlex.split(retr.rebuild)
        update["rebuild"] = shlex.join(move(w) if i and words[i - 1] in ("--corpus", "--out") else w
                                       for i, w in enumerate(words))
    return write_record(record.model_copy(update={"retriever": retr.model_copy(update=update)}), dst)


def find_record(policy: Path) -> tuple[TrainedSearcherRecord, Path] | None:
    """The record of a trained policy (a run directory, a checkpoint, or a policy/ folder) and the folder it is in.

    Looks in the policy folder itself, then up through checkpoint and run directories (at most three levels)."""
    p = policy.resolve()
    for folder in [p, *list(p.parents)[:3]]:
        path = folder / RECORD_FILE
        if path.is_file():
            try:
                record = TrainedSearcherRecord.model_validate_json(path.read_text(encoding="utf-8"))
            except ValueError as e:
                raise ConfigError(f"{path}: not a trained-searcher record ({e.__class__.__name__})") from None
            return record, folder
    return None


FILE_KEYS = ("ranker", "reader")  # settings that name a file: a trained searcher's own, beside its searcher.json


def _beside(folder: Path, key: str, value: object) -> object:
    """A file setting recorded relative to the searcher's folder (a trained reading searcher's ranker.json, reader/)
    as the path it is at; any other value as it is."""
    if key in FILE_KEYS and isinstance(value, str) and not Path(value).is_absolute() and (folder / value).exists():
        return str((folder / value).resolve())
    return value


def apply_record(
    record: TrainedSearcherRecord,
    folder: Path,
    searcher_cfg: SearcherConfig,
    retriever_cfg: RetrieverConfig,
    *,
    explicit: Collection[str] = (),
    index: Path | None = None,
) -> tuple[SearcherConfig, RetrieverConfig, Path | None]:
    """The searcher and retriever settings to serve a trained policy with, and its index.

    explicit: dotted keys the user set ("searcher.max_turns", "retriever.k"): those keep the user's value.
    index: an explicit --index (wins; the record's fingerprint is then not checked).
    """
    s_update: JsonObject = {k: v for k, v in record.searcher.items()
                                if k in LOOP_KEYS and f"searcher.{k}" not in explicit}
    if "searcher.kind" not in explicit:
        s_update["kind"] = record.kind
    base = searcher_cfg.model_dump()
    for section, table in record.searcher.items():  # a kind's own section: its recorded keys, except explicit ones
        if isinstance(table, dict) and section in SearcherConfig.model_fields:
            s_update[section] = {**base[section], **{k: _beside(folder, k, v) for k, v in table.items()
                                                     if f"searcher.{section}.{k}" not in explicit}}
    searcher_out = SearcherConfig.model_validate({**base, **s_update})
    if record.retriever is None:  # it runs over the user's index, with the user's retriever settings
        return searcher_out, retriever_cfg, index
    r_update: dict[str, object] = {}
    for key in ("backend", "k"):
        if f"retriever.{key}" not in explicit:
            r_update[key] = getattr(record.retriever, key)
    retriever_out = retriever_cfg.model_copy(update=r_update)
    if index is not None or "retriever.index" in explicit or record.retriever.index is None:
        return searcher_out, retriever_out, index
    recorded = (folder / record.retriever.index).resolve()
    rebuild = f" (rebuild it: cd {folder} && {record.retriever.rebuild})" if record.retriever.rebuild else ""
    if not recorded.is_dir():
        raise ConfigError(f"the searcher was trained with the index {recorded}, which is missing"
                          f"{_rebuild_hint(record.retriever.rebuild, folder)}")
    want = record.retriever.index_fingerprint
    if want is not None and want != index_fingerprint(recorded):
        raise ConfigError(
            f"the index {recorded} is not the one the searcher was trained with (index.json fingerprint differs){rebuild}; "
            "or pass --index DIR to use another index on purpose"
        )
    return searcher_out, retriever_out, recorded


def _rebuild_hint(rebuild: str | None, folder: Path) -> str:
    """How to get an index for a policy whose training index is missing: the recorded rebuild command when the corpus
    it names is there; else (a fresh clone: training corpora are not committed) the command the policy's README.md
    gives, and an index of one's own corpus with --index."""
    words = shlex.split(rebuild) if rebuild else []
    corpus = next((folder / w for i, w in enumerate(words) if i and words[i - 1] == "--corpus"), None)
    if rebuild and corpus is not None and corpus.is_file():
        return f" (rebuild it: cd {folder} && {rebuild}); or pass --index DIR"
    own = "pass --index DIR, an index of your own corpus (`s3 index build --corpus YOUR_CORPUS.jsonl --out indexes/mine`)"
    gone = f", and so is the corpus it was built from ({corpus.resolve()})" if corpus is not None else ""
    readme = folder / "README.md"
    said = re.findall(r"`(s3 (?:prepare-training|index build|data prepare) [^`]+)`",
                      readme.read_text(encoding="utf-8", errors="replace")) if readme.is_file() else []
    if said:
        return f"{gone}: rebuild it as {readme} says (`{said[0]}`), or {own}"
    return f"{gone}: {own}"
