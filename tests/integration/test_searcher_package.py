"""The documented way to use a trained searcher with `searcher/` alone (searcher/__init__.py): the committed transfer
policy (searcher/policies/smollm2-135m-hotpotqa, a LoRA adapter on the offline SmolLM2-135M) over a tiny bm25 index; the
adapter is committed without tokenizer files and loads with its base model's tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3core.corpus import write_corpus
from s3core.types import Document

pytestmark = pytest.mark.integration
pytest.importorskip("torch")
pytest.importorskip("peft")

SHIPPED = Path(__file__).resolve().parents[2] / "searcher" / "policies" / "smollm2-135m-hotpotqa"
DOCS = [
    Document(id="earthship", title="Earthship", text="An Earthship is a passive solar house designed by Michael Reynolds."),
    Document(id="garbage", title="Garbage Warrior", text="Garbage Warrior is a 2007 film by Oliver Hodge about Reynolds."),
    Document(id="hamlet", title="Hamlet", text="Hamlet is a tragedy written by William Shakespeare."),
    Document(id="solar", title="Passive solar", text="Passive solar design uses the sun to heat a building."),
]


@pytest.mark.slow  # one policy call of the LoRA searcher on CPU: ~50 s on a loaded 2-core machine
def test_a_trained_searcher_from_the_searcher_package_alone(tmp_path: Path) -> None:
    from searcher import S3Searcher, build_index, build_trained_searcher

    write_corpus(tmp_path / "corpus.jsonl", DOCS)
    index = build_index(tmp_path / "corpus.jsonl", "bm25", tmp_path / "indexes" / "wiki")
    searcher = build_trained_searcher("smollm2-135m-hotpotqa", index=index)  # the shipped RL policy, by name
    # searcher.runtime = auto: llama.cpp over the merged policy's GGUF on a CPU with llama-cpp-python (the set-up's)
    assert searcher.policy.name == f"llamacpp:{SHIPPED}"
    assert isinstance(searcher, S3Searcher)
    assert (searcher.cfg.max_turns, searcher.cfg.k, searcher.cfg.max_new_tokens) == (3, 8, 48)  # its searcher.json
    assert (searcher.cfg.additive, searcher.cfg.context_cap) == (True, 5)
    result = searcher.search_one("Who directed the film about the inventor of the Earthship?")
    assert result.error is None and result.documents
    assert {d.id for d in result.documents} <= {d.id for d in DOCS} and len(result.steps) <= 3
    assert len(result.documents) <= 5  # the cap it was trained with
    # no searcher named: the best shipped one for this index, which has titles (the reading searcher)
    assert build_trained_searcher(index=index).kind == "reading"


def test_an_adapter_without_tokenizer_files_loads_with_its_bases() -> None:
    from transformers import AutoTokenizer

    from searcher.policy.transformers_policy import TransformersPolicy, resolve_checkpoint

    bare = SHIPPED
    assert not (bare / "tokenizer_config.json").exists() and (bare / "adapter_config.json").is_file()
    base = AutoTokenizer.from_pretrained(str(resolve_checkpoint("smollm2-135m-instruct")))  # the adapter's base
    loaded = TransformersPolicy.load(str(bare))
    text = "<question>\nWho wrote Hamlet?\n</question> <information>Doc 1 (Title: Hamlet) text</information>"
    assert loaded.tokenizer(text).input_ids == base(text).input_ids
    assert loaded.tokenizer.chat_template == base.chat_template
    assert loaded.pad_id == base.convert_tokens_to_ids("<|im_end|>")  # the pad token the trained run saved
