"""Gold answers in the shapes the raw datasets use, normalised to a de-duplicated list of non-empty strings.

A plain string (HotpotQA `answer`), a list (FlashRAG `golden_answers`, MuSiQue `answer_aliases`), a stringified
list ('["a", "b"]' in the NQ / TriviaQA odqa files, "['a', 'b']" in PopQA's `possible_answers`), TriviaQA's
original {"Value", "Aliases"} object, or a number (Bamboogle years). Stringified lists are parsed as literals only
(`json`, then `ast.literal_eval`): never evaluated as code.
"""

from __future__ import annotations

import ast
import json

from s3core.errors import DataFormatError

__all__ = ["parse_answers"]


def _maybe_literal_list(value: str) -> object:
    """'["a", "b"]' or "['a', 'b']" -> list (json first, then ast.literal_eval: literals only, never code)."""
    s = value.strip()
    if not (s.startswith("[") and s.endswith("]")):
        return value
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        pass
    try:
        parsed = ast.literal_eval(s)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value  # e.g. "[citation needed]": a plain answer that happens to be bracketed
    return parsed if isinstance(parsed, list | tuple) else value


def parse_answers(value: object, where: str) -> list[str]:
    """Normalise the many shapes of gold answers into a de-duplicated list of non-empty strings.

    `where` ("file:line (field)") prefixes the DataFormatError raised for anything else.
    """
    if value is None:
        return []
    if isinstance(value, str):
        value = _maybe_literal_list(value)
    if isinstance(value, dict):  # TriviaQA's original {"Value", "Aliases", ...}
        items: list[object] = []
        if "Value" in value or "value" in value:
            items.append(value.get("Value", value.get("value")))
        items.extend(value.get("Aliases", value.get("aliases", [])) or [])
        value = items
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple):
        got = type(value).__name__
        raise DataFormatError(f"{where}: gold answers must be a string or a list of strings, got {got}")
    out: list[str] = []
    for a in value:
        if isinstance(a, bool) or not isinstance(a, str | int | float):
            raise DataFormatError(f"{where}: a gold answer must be a string, got {a!r}")
        s = str(a).strip()
        if s and s not in out:
            out.append(s)
    return out
