"""The config loader under hypothesis: any TOML file, any `--set`, any garbage gives a valid S3Config or one
ConfigError naming the problem, never another exception (the CLI turns ConfigError into one line). The tag parser's
properties are in test_protocol.py."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from s3.config import S3Config, load_config
from s3core.configbase import parse_override
from s3core.errors import ConfigError

SECTIONS = {name: sorted(field.annotation.model_fields) for name, field in S3Config.model_fields.items()  # type: ignore[union-attr]
            if hasattr(field.annotation, "model_fields")}
KEYS = [f"{s}.{k}" for s, keys in SECTIONS.items() for k in keys]

scalars = st.one_of(
    st.booleans(), st.integers(min_value=-10**6, max_value=10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32), st.text(max_size=20),
    st.sampled_from(["none", "None", "null", "", "0", "-1", "local/x", "openai/gpt", "http://127.0.0.1:1/v1", "1e9"]),
)
values = st.one_of(scalars, st.lists(scalars, max_size=3))


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) and ("." in repr(v) or "e" in repr(v)) else f"{v}.0"
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return json.dumps(v)  # a TOML basic string: JSON's escapes are TOML's


section_names = st.one_of(st.sampled_from(sorted(SECTIONS)), st.text(alphabet="abcxyz_", min_size=1, max_size=8))


@st.composite
def toml_documents(draw: st.DrawFn) -> str:
    lines = []
    for section in draw(st.lists(section_names, max_size=4, unique=True)):
        lines.append(f"[{section}]")
        known = SECTIONS.get(section, [])
        keys = draw(st.lists(st.one_of(st.sampled_from(known), st.text(alphabet="kqz_", min_size=1, max_size=6))
                             if known else st.text(alphabet="kqz_", min_size=1, max_size=6), max_size=5, unique=True))
        lines += [f"{k} = {toml_value(draw(values))}" for k in keys]
    return "\n".join(lines) + "\n"


def _load(files: list[Path] | None, overrides: list[str]) -> S3Config | None:
    try:
        return load_config(files, overrides)
    except ConfigError as e:
        assert str(e).strip()  # one message that says something
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=toml_documents())
def test_any_toml_file_is_a_config_or_a_config_error(doc: str, tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(doc, encoding="utf-8")
    cfg = _load([path], [])
    if cfg is not None:
        assert isinstance(cfg, S3Config)


@settings(max_examples=300, deadline=None)
@given(key=st.one_of(st.sampled_from(KEYS), st.text(max_size=20)), value=st.one_of(st.text(max_size=20),
       values.map(lambda v: json.dumps(v) if not isinstance(v, str) else v)))
def test_any_set_override_is_a_config_or_a_config_error(key: str, value: str) -> None:
    cfg = _load(None, [f"{key}={value}"])
    if cfg is not None and key in KEYS and value.strip().lower() in ("none", "null"):
        section, name = key.split(".")
        got = getattr(getattr(cfg, section), name)
        assert got is None or got == value or got == value.strip()  # none words mean None where None is allowed


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200))
def test_a_garbage_config_file_is_a_config_error(raw: bytes, tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    path.write_bytes(raw)
    _load([path], [])


@given(item=st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_parse_override_returns_or_raises_config_error(item: str) -> None:
    try:
        keys, _ = parse_override(item)
    except ConfigError:
        return
    assert keys and "=" in item


def test_the_fuzzer_knows_the_sections() -> None:
    assert {"retriever", "searcher", "generator", "judge", "eval", "training", "service"} <= set(SECTIONS)
    with pytest.raises(ConfigError):
        load_config(None, ["service.max_body_bytes=-1"])
