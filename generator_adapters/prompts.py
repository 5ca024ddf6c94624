"""Prompts of the frozen generator and the judge (the s3 paper, Appendix C), and how contexts are rendered.

A prompt setting is either a registered name (below) or a template string with the named fields in braces.

    >>> from s3core.types import Document
    >>> print(render_context([Document(id="1", title="Paris", text="Capital of France.")]))
    Doc 1 (Title: Paris) Capital of France.
    >>> print(render_answer_prompt("s3_answer", "Where?", "Doc 1 (Title: Paris) Capital of France."))
    Use the following contexts (some might be irrelevant) on demand:
    Contexts: Doc 1 (Title: Paris) Capital of France.
    Question: Where?
    Important: You MUST directly answer the question without any other text.
    >>> print(render_judge_prompt("s3_judge", "It is Paris.", ["Paris", "City of Paris"]))
    Please check if any of the golden answers is contained in the following response: It is Paris.
    Golden answers: ['Paris', 'City of Paris']
    Please directly answer with 'yes' or 'no'.
"""

from __future__ import annotations

import hashlib
import string
from collections.abc import Sequence

from s3core.errors import ConfigError
from s3core.types import Document

__all__ = [
    "ANSWER_PROMPTS",
    "JUDGE_PROMPTS",
    "NO_CONTEXT_PROMPTS",
    "prompt_hash",
    "render_answer_prompt",
    "render_context",
    "render_judge_prompt",
    "resolve_template",
]

# Figure 12 of the s3 paper: the frozen generator's answer prompt.
ANSWER_PROMPTS: dict[str, str] = {
    "s3_answer": (
        "Use the following contexts (some might be irrelevant) on demand:\n"
        "Contexts: {context}\n"
        "Question: {question}\n"
        "Important: You MUST directly answer the question without any other text."
    ),
}

# The same instruction without retrieved contexts (the "no retrieval" baseline).
NO_CONTEXT_PROMPTS: dict[str, str] = {
    "s3_no_context": (
        "Question: {question}\n"
        "Important: You MUST directly answer the question without any other text."
    ),
}

# Figure 13 of the s3 paper: judge_check. Golden answers are rendered as a Python list, as str(A) in the paper.
JUDGE_PROMPTS: dict[str, str] = {
    "s3_judge": (
        "Please check if any of the golden answers is contained in the following response: {response}\n"
        "Golden answers: {golden_answers}\n"
        "Please directly answer with 'yes' or 'no'."
    ),
}


def _fields(template: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as e:
        raise ConfigError(f"prompt template is not a valid format string ({e}): {template[:80]!r}") from None


def resolve_template(setting: str, registry: dict[str, str], fields: set[str], what: str) -> str:
    """A registered prompt name, or a template that uses exactly `fields` (checked, so typos fail early)."""
    if setting in registry:
        return registry[setting]
    used = _fields(setting)
    if not used:
        raise ConfigError(
            f"{what} prompt {setting!r} is neither a known name ({', '.join(sorted(registry))}) "
            f"nor a template with {', '.join('{' + f + '}' for f in sorted(fields))}"
        )
    if used != fields:
        raise ConfigError(
            f"{what} prompt template must use the fields {sorted(fields)}, it uses {sorted(used)}: {setting[:80]!r}"
        )
    return setting


def render_context(documents: Sequence[Document]) -> str:
    """Documents as the s3 generator sees them: one `Doc i (Title: t) text` line each, numbered from 1."""
    return "\n".join(f"Doc {i} (Title: {d.title}) {d.text}" for i, d in enumerate(documents, start=1))


def render_answer_prompt(setting: str, question: str, context: str) -> str:
    template = resolve_template(setting, ANSWER_PROMPTS, {"context", "question"}, "answer")
    return template.format(context=context, question=question)


def render_judge_prompt(setting: str, response: str, golden_answers: Sequence[str]) -> str:
    template = resolve_template(setting, JUDGE_PROMPTS, {"response", "golden_answers"}, "judge")
    return template.format(response=response, golden_answers=str(list(golden_answers)))


def prompt_hash(*templates: str) -> str:
    """A short stable hash of the resolved template(s), for run records and leaderboard comparability."""
    h = hashlib.sha256()
    for t in templates:
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]
