"""Configuration plumbing shared by every layer: strict pydantic sections, TOML loading, `--set` overrides.

Each package declares the section(s) it owns (searcher/config.py, generator_adapters/config.py, ...); `s3/config.py`
assembles them into one `S3Config` that maps one to one onto config.toml. Unknown keys are errors naming the valid keys.
"""

from __future__ import annotations

import json
import tomllib
import typing
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from s3core.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


NONE_WORDS = frozenset({"none", "null"})


def _admits_none(annotation: object) -> bool:
    return annotation is None or type(None) in typing.get_args(annotation)


class Section(BaseModel):
    """Base of every config section: unknown keys are rejected, assignments are validated.

    TOML has no null, so for a setting that may be None (off) the words "none" / "null" (any case) mean None, in a
    file and in `--set key=none` alike: `generator.cache_path = "none"` turns the cache off, it does not name a file
    called "none". Settings that cannot be None keep the word as it is."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=())

    @model_validator(mode="before")
    @classmethod
    def _none_words(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        fixed: dict[str, Any] | None = None
        for name, field in cls.model_fields.items():
            value = data.get(name)
            if isinstance(value, str) and value.strip().lower() in NONE_WORDS and _admits_none(field.annotation):
                fixed = dict(data) if fixed is None else fixed
                fixed[name] = None
        return data if fixed is None else fixed


def _format_validation_error(err: ValidationError, model: type[BaseModel], where: str) -> str:
    lines = [f"invalid configuration{where}:"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            parent: type[BaseModel] | None = model
            for part in e["loc"][:-1]:
                field = parent.model_fields.get(str(part)) if parent is not None else None
                ann = field.annotation if field is not None else None
                parent = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
                if parent is None:
                    break
            valid = sorted(parent.model_fields) if parent is not None else []
            lines.append(f"  unknown key '{loc}'" + (f"; valid keys here: {', '.join(valid)}" if valid else ""))
        elif isinstance(e.get("input"), dict):  # a cross-field check: its message names the fields
            lines.append(f"  {loc + ': ' if loc else ''}{e['msg'].removeprefix('Value error, ')}")
        else:
            lines.append(f"  {loc}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def parse_override(item: str) -> tuple[list[str], Any]:
    """Parse one `--set a.b.c=value`. The value is read as JSON when it parses (numbers, true/false, lists),
    otherwise as a plain string.

    >>> parse_override("searcher.max_turns=2")
    (['searcher', 'max_turns'], 2)
    >>> parse_override("generator.model=openai/gpt-4o-mini")
    (['generator', 'model'], 'openai/gpt-4o-mini')
    """
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set expects section.key=value, got {item!r}")
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError(f"--set expects section.key=value, got {item!r}")
    raw = raw.strip()
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return path, lowered == "true"
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `--set` overrides onto a nested dict (in place) and return it."""
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for part in path[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {item!r}: '{part}' is a value, not a section")
            node = nxt
        node[path[-1]] = value
    return data


def load_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from None
    except UnicodeDecodeError as e:  # found by tests/unit/test_config_fuzz.py
        raise ConfigError(f"{p}: not valid TOML: not UTF-8 text (byte {e.start})") from None


def build_model(model: type[M], data: dict[str, Any], where: str = "") -> M:
    """Validate `data` into `model`, turning pydantic's error into a ConfigError that names the bad keys."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format_validation_error(e, model, where)) from None
