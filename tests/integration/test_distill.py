"""Distillation by rejection sampling (training.sft.keep = 'gbr_positive', training/prep/distill.py) on real components:
the real SmolLM2 tokenizer and learner, bm25 over the HotpotQA training slice, the oracle loop, and the generator
behind a REAL loopback OpenAI-compatible server that answers right only when BOTH gold paragraphs of a question are
in its context. The warm-up pool is exactly the questions whose oracle documents beat naive RAG, chosen by the
preparation stage (prepare_run), not by building: building calls the generator for nothing, the scores are cached, so
preparing the run again calls it no more, and `s3 train --dry-run` neither prepares nor distills."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generator_adapters.testing import FakeLLMServer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("training_data")]

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "configs" / "smoke.toml"
DATA = ROOT.parent / "shared" / "data" / "train_hotpotqa_musique100" / "hotpotqa_train.json"

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_the_warm_up_learns_only_from_oracle_trajectories_that_beat_naive_rag(tmp_path: Path) -> None:
    from dataprep import load
    from s3.cli import main as s3_main
    from s3.config import load_config
    from training.prep.distill import DISTILL_FILE
    from training.run.build import build_training, prepare_run
    from training.run.trainer import S3Trainer

    corpus, questions = load("hotpotqa", [DATA])
    title_of = {d.id: d.title for d in corpus}
    needs = {q.question: (q.golden_answers[0], [title_of[i] for i in q.supporting_ids]) for q in questions}

    def reply(prompt: str) -> str:
        q = prompt.split("Question: ", 1)[-1].split("\n", 1)[0]
        answer, titles = needs.get(q, ("", ["-"]))
        return answer if all(f"(Title: {t})" in prompt for t in titles) else "I do not know."

    with FakeLLMServer(reply=reply) as srv:
        over = [
            "generator.model=openai/fake", f"generator.api_base={srv.api_base}", "generator.cache_path=null",
            f"training.data.sources={json.dumps([f'hotpotqa:{DATA}'])}", f"training.data.dir={tmp_path / 'data'}",
            "training.data.max_questions=24", "training.data.keep_baseline_zero=false", "training.heldout.questions=0",
            f"training.output_dir={tmp_path / 'run'}", "training.reward=acc_plus_gbr", "eval.metric=span",
            "training.sft.steps=2", "training.sft.keep=gbr_positive", "training.sft.candidates=12",
            "training.total_steps=2", "training.rollout.batch_size=2", "searcher.k=8", "searcher.max_turns=2",
            "searcher.doc_token_budget=24", "searcher.max_new_tokens=24",
        ]
        cfg = load_config(SMOKE, over)
        logs: list[str] = []
        prepared = prepare_run(cfg, log=logs.append)
        calls = srv.stats()["requests"]
        assert any("preparation: preparing the training data" in x for x in logs)
        assert any("distillation" in x for x in logs) and prepared.sft_pool
        parts = build_training(cfg, prepared, log=lambda s: None)
        try:
            assert srv.stats()["requests"] == calls  # building makes no paid call: the stage made them all
            assert parts.sft_pool == prepared.sft_pool and parts.oracle is not None
            rows = [json.loads(x) for x in (tmp_path / "run" / DISTILL_FILE).read_text().splitlines()]
            assert len(rows) == 12 and all(r["acc"] is not None for r in rows)
            by_id = {r["id"]: r for r in rows}
            pool = parts.sft_pool
            assert pool is not None and pool  # the oracle reaches both gold paragraphs where naive top-3 has not
            kept = {parts.examples[i].id for i in pool}
            assert kept == {i for i, r in by_id.items() if r["gbr"] > 0}
            assert all(by_id[i]["acc"] == 1.0 and by_id[i]["acc_rag"] == 0.0 for i in kept)
            assert len(kept) < len(rows)  # some are rejected: naive RAG already answers, or the oracle did not help
            summary = json.loads((tmp_path / "run" / "distill_summary.json").read_text())
            assert summary["kept"] == len(kept) and summary["candidates"] == 12
            trainer = S3Trainer(parts, log=lambda s: None)
            assert {trainer.examples[i].id for s in range(2) for i in trainer.order.batch_indices(s)} <= kept
            trainer.close()
        finally:
            parts.close()
        again = prepare_run(cfg, log=lambda s: None)  # the data and the scores are cached: no generator call
        assert again.sft_pool == pool and srv.stats()["requests"] == calls
        # a dry run of a fresh run over the prepared data: no preparation stage, so no distillation and no paid call
        fresh = tmp_path / "fresh"
        sets = [x for o in over if not o.startswith("training.output_dir=") for x in ("--set", o)]
        assert s3_main(["train", "--config", str(SMOKE), *sets, "--set", f"training.output_dir={fresh}",
                        "--dry-run"]) == 0
        assert srv.stats()["requests"] == calls and not (fresh / DISTILL_FILE).exists()
