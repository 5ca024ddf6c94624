"""Typed records shared by every layer: documents, QA examples, search steps, results, trajectories.

These are the stable data contracts of the toolkit. They live in `s3core`, below every package: the searcher,
data preparation, generator adapters, evaluation and training all import from here, never the other way round.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

_M = TypeVar("_M", bound=BaseModel)


def construct_trusted(cls: type[_M], values: dict[str, Any]) -> _M:
    """An instance of `cls` from values our own code produced with the right types (every field given), built
    without validation: what `model_construct` does minus its per-call bookkeeping, ~10x cheaper on hot paths (the
    retriever's documents, the search loop's step records). Never use it on outside input."""
    obj = _new(cls)
    _setattr(obj, "__dict__", values)
    _setattr(obj, "__pydantic_fields_set__", set(values))
    _setattr(obj, "__pydantic_extra__", None)
    _setattr(obj, "__pydantic_private__", None)
    return obj


_new = object.__new__  # BaseModel defines no __new__
_setattr = object.__setattr__  # past BaseModel.__setattr__ (frozen models refuse it)


class Document(BaseModel):
    """One retrievable passage. `contents` follows the DPR / FlashRAG convention `"Title"\\ntext`."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="Stable passage id, unique within a corpus.")
    title: str = Field(default="", description="Passage title (Wikipedia page title for wiki corpora).")
    text: str = Field(default="", description="Passage body without the title.")
    score: float | None = Field(default=None, description="Retrieval score, when the document came from a search.")
    original_id: str | None = Field(
        default=None, description="The id the user's corpus gave this passage, where `s3 data prepare` had to change "
        "it (a duplicate or unusable id; the prepared manifest's `renamed_ids`); None when `id` is the corpus's own.")

    @property
    def contents(self) -> str:
        """The FlashRAG / Search-R1 `contents` string: `"Title"\\ntext`."""
        return f'"{self.title}"\n{self.text}'

    @classmethod
    def from_contents(cls, id: str, contents: str, score: float | None = None) -> Document:
        """Parse a `contents` string into title and text (s3core.corpus.TITLE_RULE): the title is the first line only
        where it is double-quoted (FlashRAG's `"Title"\\ntext`); any other contents is all text, never shortened.

        >>> Document.from_contents("a", '"Angkor Wat"\\nA temple.').title
        'Angkor Wat'
        >>> Document.from_contents("c2", "Error E12 means too hot.\\nMove it.").text
        'Error E12 means too hot.\\nMove it.'
        """
        first, sep, rest = contents.partition("\n")
        first = first.strip()
        if sep and len(first) >= 2 and first[0] == '"' and first[-1] == '"':
            return cls(id=id, title=first[1:-1], text=rest.strip(), score=score)
        return cls(id=id, title="", text=contents.strip(), score=score)


class QAExample(BaseModel):
    """A question in the FlashRAG shape: {"id", "question", "golden_answers", "metadata"}.

    `metadata["supporting_ids"]` holds the gold supporting-paragraph ids where the source format has them.
    """

    id: str
    question: str
    golden_answers: list[str]
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def supporting_ids(self) -> list[str]:
        return list(self.metadata.get("supporting_ids", []))


class SearchStep(BaseModel):
    """One turn of the search loop (turn 0 = begin-with-search on the question itself)."""

    turn: int
    query: str | None = Field(default=None, description="The query searched this turn (None if the action was invalid).")
    retrieved_ids: list[str] = Field(default_factory=list)
    selected_ids: list[str] = Field(default_factory=list)
    selection_fallback: bool = Field(
        default=False, description="True when no <important_info> was given and the A.5 rule admitted the whole window."
    )
    search_complete: bool | None = Field(default=None, description="The stop flag the policy emitted, if any.")
    invalid_reason: str | None = Field(default=None, description="Why the policy's action was invalid, if it was.")
    policy_text: str = Field(default="", description="What the policy wrote this turn.")
    policy_seconds: float = Field(default=0.0, description="The policy model's time on this turn's reply.")
    retrieval_seconds: float = Field(default=0.0, description="The retriever's time on this turn's search(es).")
    reader_seconds: float = Field(
        default=0.0, description="The reader model's time on this turn (the reading searcher's read; 0 elsewhere).")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    queries: list[str] | None = Field(
        default=None, description="Every query searched this turn when the policy gave several (searcher."
        "queries_per_turn > 1; `query` is the first); None for one query."
    )


class Trajectory(BaseModel):
    """Token-level record of a rollout for trainable policies.

    `mask[i] == 1` when token i was written by the policy, 0 when the environment inserted it (prompt, retrieved
    documents, tool output). Retrieved-token loss masking multiplies the policy-gradient loss by this mask.
    """

    prompt_ids: list[int] = Field(default_factory=list, description="Tokens of the initial prompt (never trained on).")
    response_ids: list[int] = Field(default_factory=list, description="Everything after the prompt, in order.")
    mask: list[int] = Field(default_factory=list, description="Same length as response_ids: 1 = policy, 0 = environment.")
    logprobs: list[float] = Field(
        default_factory=list, description="Sampling log-probabilities of response tokens (0.0 where mask is 0)."
    )

    def append(self, ids: list[int], written_by_policy: bool, logprobs: list[float] | None = None) -> None:
        """Append a span and record who wrote it: the only way tokens enter a trajectory."""
        self.response_ids.extend(ids)
        self.mask.extend([1 if written_by_policy else 0] * len(ids))
        if logprobs is not None and len(logprobs) != len(ids):
            raise ValueError(f"logprobs has {len(logprobs)} entries for {len(ids)} tokens")
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))


class SearchResult(BaseModel):
    """What a searcher returns for one question."""

    question_id: str | None = None
    question: str
    documents: list[Document] = Field(default_factory=list, description="Final context D_s3, deduplicated, turn order.")
    steps: list[SearchStep] = Field(default_factory=list)
    answer: str | None = Field(default=None, description="Set by end-to-end agents (Search-R1) that answer themselves.")
    trajectory: Trajectory | None = None
    seconds: float = 0.0
    error: str | None = Field(
        default=None,
        description="Set when the search ended early: a policy call failed, or the caller's deadline passed. `documents`"
        " are then what was admitted before, or D0 (begin-with-search) when nothing was: degraded, never empty for "
        "nothing.",
    )
    error_code: str | None = Field(default=None, description="The stable code of `error` (s3core.errors), e.g. "
                                   "'upstream_rate_limited', 'deadline_exceeded'.")

    @property
    def degraded(self) -> bool:
        """The search did not run to its end (see `error`)."""
        return self.error is not None

    @property
    def turns(self) -> int:
        """Search turns after begin-with-search (turn 0 does not count)."""
        return sum(1 for s in self.steps if s.turn > 0)

    @property
    def retrieved_documents_ids(self) -> list[str]:
        seen: dict[str, None] = {}
        for s in self.steps:
            for i in s.retrieved_ids:
                seen.setdefault(i, None)
        return list(seen)
