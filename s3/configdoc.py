"""Render the configuration models as a commented config.toml and as a markdown reference.

`python -m s3.configdoc toml > config.toml` and `python -m s3.configdoc markdown > docs/configuration.md`;
tests fail when either committed file is stale.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import BaseModel

from s3.config import S3Config


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):  # an inline table: {} or { key = value, ... }
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}" if v else "{}"
    raise TypeError(f"cannot render {v!r} as TOML")


def _sections(model: BaseModel, prefix: str) -> list[tuple[str, BaseModel]]:
    out = [(prefix, model)]
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out.extend(_sections(value, f"{prefix}.{name}" if prefix else name))
    return out


def render_toml(cfg: S3Config | None = None) -> str:
    cfg = cfg or S3Config()
    lines = [
        "# s3 configuration: every command reads this file (--config) and takes --set section.key=value overrides.",
        "# Generated from the pydantic models by `python -m s3.configdoc toml`; docs/configuration.md explains each key.",
        "# Relative paths are resolved against this file's folder.",
    ]
    for name in type(cfg).model_fields:
        for section_name, section in _sections(getattr(cfg, name), name):
            lines.append("")
            lines.append(f"[{section_name}]")
            for fname, field in type(section).model_fields.items():
                value = getattr(section, fname)
                if isinstance(value, BaseModel):
                    continue
                desc = (field.description or "").strip()
                if value is None:
                    lines.append(f"# {fname} =            # {desc} (unset)")
                else:
                    comment = f"  # {desc}" if desc else ""
                    lines.append(f"{fname} = {_toml_value(value)}{comment}")
    return "\n".join(lines) + "\n"


def _type_name(ann: Any) -> str:
    return ann.__name__ if isinstance(ann, type) else str(ann).replace("typing.", "")


def render_markdown(cfg: S3Config | None = None) -> str:
    cfg = cfg or S3Config()
    lines = [
        "# Configuration reference",
        "",
        "Generated from the pydantic models (`python -m s3.configdoc markdown`); a test fails when this page is stale.",
        "Every command takes `--config FILE` and `--set section.key=value`; unknown keys are errors naming the valid keys.",
    ]
    for name in type(cfg).model_fields:
        for section_name, section in _sections(getattr(cfg, name), name):
            doc = (type(section).__doc__ or "").strip().splitlines()
            lines += ["", f"## [{section_name}]", ""]
            if doc and not doc[0].startswith("Base of"):
                lines += [doc[0], ""]
            lines += ["| key | type | default | description |", "| --- | --- | --- | --- |"]
            for fname, field in type(section).model_fields.items():
                value = getattr(section, fname)
                if isinstance(value, BaseModel):
                    continue
                ann = _type_name(field.annotation).replace("|", "\\|")
                default = "unset" if value is None else f"`{_toml_value(value)}`"
                desc = (field.description or "").replace("|", "\\|")
                lines.append(f"| `{fname}` | {ann} | {default} | {desc} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "toml"
    sys.stdout.write(render_toml() if what == "toml" else render_markdown())
