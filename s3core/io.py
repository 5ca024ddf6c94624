"""File helpers every layer shares: jsonl with line numbers, append-and-resume logs, sha256, atomic writes.

One implementation each, so "what happens to a line torn by a kill" has one answer everywhere:

- `iter_jsonl` / `read_jsonl`: strict readers. A malformed line is a `DataFormatError` naming `path:line`;
  with `torn_tail="skip"` an unparseable *last* line (a write cut short by a kill) is passed over instead.
- `read_log_jsonl`: lenient reader for logs a person may also append to (metrics.jsonl): complete object lines only.
- `repair_tail` + `append_jsonl`: the append-and-resume pair. Before appending to a file another run may have been
  killed while writing, cut its partial last line; each append is one write followed by fsync.
- `file_sha256`, `text_sha256`, `write_json_atomic`, `write_jsonl_atomic`, `write_text_atomic`.
- `file_lock`: an exclusive advisory lock, so concurrent first runs build a file once and never interleave writes.
- `stored`: a jsonl file kept compressed (`FILE.jsonl.gz`, how benchmarks/results archives per-question rows) reads
  as FILE: the readers above open a `.gz` name through gzip, `latest_by_id` and `read_log_jsonl` read FILE.gz where
  only it exists, and `repair_tail` (the step before every append) unpacks it back to FILE, so a resumed run appends
  to the rows it had.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import json
import os
import shutil
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from s3core.errors import DataFormatError

JsonObject = dict[str, Any]  # a parsed JSON object: its values are JSON, typed at the point of use

_CHUNK = 1 << 20
_GZIP_DAMAGE = (gzip.BadGzipFile, EOFError, zlib.error)  # a bad header, a cut-off stream, damage inside it


# ----------------------------------------------------------------------------------------------- reading


def stored(path: str | Path) -> Path:
    """Where a jsonl file's rows are: `path` itself, else its compressed copy `path.gz` where only that exists (a
    folder of results archived with `gzip -9 -n`), else `path` (missing)."""
    p = Path(path)
    if not p.is_file() and p.suffix != ".gz":
        gz = p.with_name(p.name + ".gz")
        if gz.is_file():
            return gz
    return p


def _lines(path: Path, *, strict_utf8: bool = False) -> Iterator[tuple[int, str, bool, bool]]:
    """(lineno, text, complete, is_last) per line, streamed with one line of look-ahead; a line is incomplete when
    it is the last one and the file lacks a final newline. Bytes that are not UTF-8 become U+FFFD, or with
    `strict_utf8` a DataFormatError naming the line and the byte offset in the file."""
    errors = "strict" if strict_utf8 else "replace"
    with (gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")) as fh:
        prev: bytes | None = None
        lineno = start = 0  # start: the file offset of `prev`
        try:
            for raw in fh:
                if prev is not None:
                    yield lineno, prev.decode("utf-8", errors), True, False
                    start += len(prev)
                prev = raw
                lineno += 1
            if prev is not None:
                complete = prev.endswith(b"\n")
                yield lineno, prev.decode("utf-8", errors).rstrip("\n"), complete, True
        except UnicodeDecodeError as e:
            raise DataFormatError(f"{path}:{lineno}: not UTF-8 text ({e.reason} at byte {start + e.start})") from None
        except _GZIP_DAMAGE as e:
            raise DataFormatError(f"{path}: not a complete gzip file ({e}); gunzip -t names the damage") from None


def iter_jsonl(
    path: str | Path,
    *,
    torn_tail: Literal["error", "skip"] = "error",
    what: str = "a JSON object",
    strict_utf8: bool = False,
) -> Iterator[tuple[int, JsonObject]]:
    """(lineno, object) for each non-blank line of a jsonl file.

    A line that is not a JSON object is a DataFormatError naming the file and line. With `torn_tail="skip"` the last
    line is dropped when it has no final newline or does not parse (a write cut short by a kill): resumable files.
    With `strict_utf8` a byte that is not UTF-8 is a DataFormatError too (raw inputs), not a replacement character.
    """
    p = Path(path)
    if not p.is_file():
        raise DataFormatError(f"file not found: {p}")
    for lineno, text, complete, is_last in _lines(p, strict_utf8=strict_utf8):
        if lineno == 1:
            text = text.lstrip("\ufeff")  # a byte-order mark some editors write
        if not text.strip():
            continue
        if torn_tail == "skip" and is_last and not complete:
            return
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            if torn_tail == "skip" and is_last:
                return
            raise DataFormatError(f"{p}:{lineno}: not valid JSON ({json_error_text(e, text)})") from None
        if not isinstance(obj, dict):
            raise DataFormatError(f"{p}:{lineno}: expected {what}, got {type(obj).__name__}")
        yield lineno, obj


def json_error_text(e: json.JSONDecodeError, line: str | None = None) -> str:
    r"""What is wrong with JSON that did not parse, for people: `Expecting ',' delimiter at column 26`. With `line`
    (the one JSON-lines line that was parsed) the column is within that line, and a line that ends before its value
    is complete says so, instead of json's position past the line's end ("line 2, column 1" of a one-line text).

    >>> import json
    >>> text = '{"id": "b", "text": "beta"\n'
    >>> try:
    ...     json.loads(text)
    ... except json.JSONDecodeError as e:
    ...     print(json_error_text(e, text))
    the line ends at column 26 before its JSON is complete: a closing brace, bracket or quote is missing (Expecting ',' delimiter)
    """
    if line is not None:
        body = line.rstrip()
        if e.pos >= len(body):
            return (f"the line ends at column {len(body)} before its JSON is complete: a closing brace, bracket or "
                    f"quote is missing ({e.msg.removesuffix(' at')})")
        col = e.pos + 1 - (line.rfind("\n", 0, e.pos) + 1)
    else:
        col = e.colno
    return f"{e.msg}{'' if e.msg.endswith(' at') else ' at'} column {col}"


def read_jsonl(path: str | Path, *, torn_tail: Literal["error", "skip"] = "error") -> list[JsonObject]:
    """Every object of a jsonl file (see `iter_jsonl`)."""
    return [obj for _, obj in iter_jsonl(path, torn_tail=torn_tail)]


def read_log_jsonl(path: str | Path) -> list[JsonObject]:
    """Every complete JSON-object line of a log file; anything else (a torn or hand-edited line) is passed over."""
    p = stored(path)
    out: list[JsonObject] = []
    if not p.is_file():
        return out
    for _, text, complete, _last in _lines(p):
        if not complete or not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def latest_by_id(path: str | Path, *, what: str = "row") -> dict[str, JsonObject]:
    """The final view of an append-only jsonl log keyed by "id": the latest row per id (a torn last line is skipped,
    a broken line elsewhere or a row without an id is an error naming it). A missing file is empty; one stored only
    as `path.gz` is read from there (`stored`)."""
    p = stored(path)
    latest: dict[str, JsonObject] = {}
    if not p.is_file():
        return latest
    for lineno, row in iter_jsonl(p, torn_tail="skip", what=f"a {what}"):
        if "id" not in row:
            raise DataFormatError(f"{p}:{lineno}: a {what} needs an 'id'")
        latest[str(row["id"])] = row
    return latest


# ----------------------------------------------------------------------------------------------- appending


def repair_tail(path: str | Path) -> int:
    """Cut a partial last line (left by a kill mid-write) so appends start on a fresh line. Returns bytes cut.
    A file stored only as `path.gz` is unpacked back to `path` first (and the .gz removed: one copy of the rows),
    so the appends that follow extend the rows it held."""
    p = Path(path)
    _unpack(p)
    if not p.is_file():
        return 0
    size = p.stat().st_size
    if size == 0:
        return 0
    with p.open("rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return 0
        pos, keep = size, 0
        while pos > 0:
            start = max(0, pos - (1 << 16))
            fh.seek(start)
            j = fh.read(pos - start).rfind(b"\n")
            if j >= 0:
                keep = start + j + 1
                break
            pos = start
        fh.truncate(keep)
        fh.flush()
        os.fsync(fh.fileno())
        return size - keep


def _unpack(p: Path) -> None:
    gz = stored(p)
    if gz == p:
        return
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        with gzip.open(gz, "rb") as src, tmp.open("wb") as dst:
            shutil.copyfileobj(src, dst, _CHUNK)
            dst.flush()
            os.fsync(dst.fileno())
    except _GZIP_DAMAGE as e:
        tmp.unlink(missing_ok=True)
        raise DataFormatError(f"{gz}: not a complete gzip file ({e}); gunzip -t names the damage") from None
    except BaseException:  # a full disk, an interrupt: the archive stays, no half-written file is left
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, p)
    _fsync_dir(p.parent)  # the plain file is durable before its archive goes
    gz.unlink(missing_ok=True)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_jsonl(path: str | Path, rows: Sequence[JsonObject]) -> None:
    """Append rows as one write, then flush + fsync: a batch is on disk before the next one starts."""
    if not rows:
        return
    payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    with Path(path).open("ab") as fh:
        fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())


# ----------------------------------------------------------------------------------------------- hashing


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while block := fh.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def path_from(folder: str | Path, path: str | Path) -> str:
    """`path` as a manifest in `folder` records it: relative to that folder (the folder and the data can move
    together, e.g. a committed prepared directory in a fresh clone elsewhere), absolute when no relative path exists.

    >>> path_from("/srv/s3/main/data", "/srv/s3/shared/a.json")
    '../../shared/a.json'
    """
    target, base = Path(path).resolve(), Path(folder).resolve()
    try:
        return os.path.relpath(target, base)
    except ValueError:  # another drive (Windows)
        return str(target)


# ----------------------------------------------------------------------------------------------- atomic writes


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write through a temporary sibling, fsync, rename: readers see the old file or the new one, never half."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, p)


def write_json_atomic(path: str | Path, obj: object) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def write_jsonl_atomic(path: str | Path, rows: Iterable[JsonObject]) -> int:
    """Write rows as jsonl atomically; returns the count."""
    lines = [json.dumps(r, ensure_ascii=False) + "\n" for r in rows]
    write_text_atomic(path, "".join(lines))
    return len(lines)


# ----------------------------------------------------------------------------------------------- locks


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on `path` (created with its folder): concurrent builders wait, never interleave."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def describe_os_error(e: OSError) -> str:
    """One clear sentence for a failed file or socket operation (what the CLI prints instead of a traceback): names
    the path and, for "not a directory" / "file exists", the part of the path that is a file."""
    name = e.filename if e.filename is not None else ""
    path = Path(str(name)) if name else None
    if isinstance(e, NotADirectoryError | FileExistsError) and path is not None:
        for part in (path, *path.parents):
            if part.exists() and not part.is_dir():
                return f"{path}: {part} is a file, not a directory"
    if isinstance(e, FileNotFoundError) and path is not None:
        return f"no such file or directory: {path}"
    if isinstance(e, IsADirectoryError) and path is not None:
        return f"{path} is a directory, not a file"
    if isinstance(e, PermissionError) and path is not None:
        return f"permission denied: {path}"
    what = e.strerror or str(e) or type(e).__name__
    return f"{what}: {path}" if path is not None else what


class ReadOnlyFile:
    """A file held open read-only for positioned reads (`os.pread`, `os.preadv` on `self._fd`): nothing of it stays
    in this process but the descriptor. Closed by `close()`, or when the object is collected."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDONLY)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        with contextlib.suppress(OSError, AttributeError):  # a half-built object has no _fd
            self.close()
