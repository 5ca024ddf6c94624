"""`s3 train` for the reading searcher (searcher.kind = 'reading'): the searcher that wins, taught by the frozen
generator's own gain, on the user's own questions and corpus.

    s3 train --config configs/reading_smoke.toml          # stages below; kill it and run it again: it resumes
    s3 search --policy runs/train/reading_smoke/searcher "a question"

Stages (the run directory, training.output_dir, keeps each one's output; a stage that is done is not redone):

    credit    per training question, the start's documents and the candidate pages (candidates.py), and each page's
              credit: the gain in log p(gold answer) when the generator sees it added to the start (credit.py), or
              with training.reading.credit = 'genacc' (any generator: served, API) the gain in the accuracy of its
              own answer; one line a question in credit.jsonl, resumable (the slow stage: one generator pass a page)
    reader    a LoRA pointwise reader learns the credit (reader_fit.py: KL to softmax(gain / temperature)), one
              optimizer step a few questions; checkpoints/reader-step-N every training.checkpoint.every steps (adapter and
              optimizer state), resumed from the newest; metrics.jsonl has the loss of every step
    ranker    the reader scores every question's candidates; a logistic ranker over its score, the page's rank and the
              names that link it to the start (ranker_fit.py) is fitted on the training questions' credit labels; the
              number of pages to add (0..max_pages) and the score below which none is added are chosen on the held-out
              questions (training.heldout.questions)
    export    searcher/ : searcher.json (kind 'reading', the chosen settings, what taught it), ranker.json, reader/ (the
              adapter): a searcher directory `s3 search / serve / mcp / eval --policy DIR` load; report.json and
              reading.png (the loss curve and the held-out choosers)

No gold paragraph is read unless training.reading.credit = 'gold'; where the data has gold labels the report says how
often each chooser's first pick is gold (the probe's measure), for the user's information only.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from s3core.errors import ConfigError, S3Error
from s3core.io import append_jsonl, file_sha256, iter_jsonl, write_json_atomic
from s3core.types import QAExample
from training.config import TrainSettings
from training.reading.candidates import Candidates
from training.reading.credit import CreditStore

__all__ = ["ReadingRun", "train_reading"]

Log = Callable[[str], None]
CHUNK = 32  # questions whose candidates are built in one batched retrieval
TAUGHT = {"logprob": "{model}'s credit (the gain in log p(gold answer) a page brings)",
          "genacc": "{model}'s credit (the gain in its answers' accuracy a page brings)",
          "gold": "gold paragraph labels"}
GENACC_QUESTIONS = 4  # 'genacc' credit: questions whose answers (1 + candidates each) are asked in one batch


def _first(scores: list[float]) -> int:
    """The index of the highest score (ties: the earlier)."""
    return min(range(len(scores)), key=lambda j: (-scores[j], j))


class Stopped(Exception):
    """The time budget ran out between two units of work; the run resumes from its files."""


class ReadingRun:
    """One `s3 train` of the reading searcher over its run directory."""

    def __init__(self, cfg: TrainSettings, *, max_seconds: float | None = None, log: Log = print,
                 max_cost_usd: float | None = None) -> None:
        if cfg.searcher.kind != "reading":
            raise ConfigError(f"ReadingRun trains searcher.kind = 'reading', got {cfg.searcher.kind!r}")
        self.cfg, self.t, self.r = cfg, cfg.training, cfg.training.reading
        self.out = cfg.resolve(self.t.output_dir).resolve()
        self.credit_path = (cfg.resolve(self.r.credit_path).resolve() if self.r.credit_path
                            else self.out / "credit.jsonl")
        self.log = log
        self.max_cost_usd = max_cost_usd  # 'genacc' credit's paid calls (s3 train --max-cost-usd), else budget_usd
        self.missing = 0  # questions the last credit stage could not score (a failed call): asked again next run
        self.deadline = None if max_seconds is None else time.monotonic() + max_seconds
        self.k0 = cfg.retriever.k
        self.read_last = cfg.searcher.reading.read_last
        if self.read_last <= self.k0:
            raise ConfigError(f"searcher.reading.read_last = {self.read_last} reads nothing past retriever.k = "
                              f"{self.k0}: set it above {self.k0}")
        gen = cfg.generator_resolved
        if self.r.credit == "logprob" and not gen.model.startswith("local/"):
            raise ConfigError(f"training.reading.credit = 'logprob' reads the answer's log-probability from the "
                              f"generator; generator.model = {gen.model!r} is not an offline model (local/<name>): use "
                              "training.reading.credit = 'genacc' (the gain in its answers' accuracy, any generator), an "
                              "offline generator, or training.reading.credit = 'gold' where the data has gold paragraphs")
        if self.r.credit == "genacc":  # a key that is not configured: one error now, before any data or model
            from generator_adapters.build import check_key

            check_key(gen, "generator")
            if cfg.eval.metric == "judge" or (cfg.eval.metric == "genacc" and cfg.eval.use_judge):
                check_key(cfg.judge_resolved, "judge")

    # ------------------------------------------------------------------------------------------------------ helpers

    def _check_time(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise Stopped

    def _data(self) -> tuple[list[QAExample], list[QAExample], Any, bool]:
        """(training questions, held-out questions, retriever, titled) of the prepared set (no baseline: the reading
        searcher's trainer never asks the generator for naive RAG's answers)."""
        from searcher.build import build_retriever
        from searcher.title_following.script import has_titles
        from training.prep.data import Preparation

        prep = Preparation(self.cfg, log=self.log)
        prep.needs_baseline = prep.reward_reads_baseline = False
        data = prep.prepared()
        qs = [q for q in data.examples if q.golden_answers and q.golden_answers[0].strip()]
        held_n = self.t.heldout.questions
        train, held = (qs[:-held_n], qs[-held_n:]) if held_n else (qs, [])
        if self.r.questions is not None:
            train = train[: self.r.questions]
        retriever = build_retriever(self.cfg.retriever, data.index_dir)
        titled = bool(has_titles(retriever))
        start = self.cfg.searcher.reading.start
        if start == "title_following" and not titled:
            raise ConfigError("searcher.reading.start = 'title_following' needs a titled index; this one has no titles")
        if start != "auto":
            titled = start == "title_following"
        self.log(f"train: reading: {len(train)} training and {len(held)} held-out questions; start: "
                 f"{'the title-following script' if titled else f'naive top-{self.k0}'}; candidates: ranks "
                 f"{self.k0 + 1}-{self.read_last}")
        return train, held, retriever, titled

    def _candidates(self, retriever: Any, qs: list[QAExample], titled: bool) -> dict[str, Candidates]:
        out: dict[str, Candidates] = {}
        for lo in range(0, len(qs), CHUNK):
            part = qs[lo:lo + CHUNK]
            built = Candidates.build(retriever, [q.question for q in part], k0=self.k0, read_last=self.read_last,
                                     titled=titled, cfg=self.cfg.searcher)
            for q, c in zip(part, built, strict=True):
                gold = set(q.supporting_ids)
                c.gold = [d.id in gold for d in c.candidates]
                out[q.id] = c
        return out

    def _fingerprint(self) -> dict[str, Any]:
        from s3runtime.llm_local import model_fingerprint

        gen = self.cfg.generator_resolved
        if self.r.credit == "gold":
            return {"credit": "gold"}
        if self.r.credit == "genacc":
            ev = self.cfg.eval
            judged = ev.metric == "judge" or (ev.metric == "genacc" and ev.use_judge)
            return {"credit": "genacc", "generator": model_fingerprint(gen.model, gen.api_base), "prompt": gen.prompt,
                    "temperature": gen.temperature, "max_tokens": gen.max_tokens, "metric": ev.metric,
                    "judge": model_fingerprint(self.cfg.judge_resolved.model) if judged else None, "k0": self.k0,
                    "read_last": self.read_last}
        return {"credit": "logprob", "generator": model_fingerprint(gen.model, gen.api_base), "prompt": gen.prompt,
                "answer": "the first gold answer, teacher-forced, sum of token log-probs", "k0": self.k0,
                "read_last": self.read_last}

    # ------------------------------------------------------------------------------------------------------- stages

    def credit(self, qs: list[QAExample], cands: dict[str, Candidates]) -> CreditStore:
        """Every question's credit in credit.jsonl (resumes; 'gold' labels need no generator)."""
        store = CreditStore(self.credit_path, self._fingerprint())
        todo = [q for q in qs if cands[q.id].candidates and not store.fresh(q, cands[q.id])]
        if not todo:
            return store
        self.log(f"train: credit: {len(store)} questions scored, {len(todo)} to score")
        if self.r.credit == "gold":
            from generator_adapters.likelihood import Credit

            for q in todo:
                c = cands[q.id]
                store.add(q, c, Credit(0.0, [float(g) for g in c.gold], 0, 0, 0), 0.0)
            return store
        if self.r.credit == "genacc":
            return self._genacc_credit(store, todo, cands)
        from generator_adapters.likelihood import AnswerLikelihood

        lik = AnswerLikelihood(self.cfg.generator_resolved, threads=self.r.threads)
        t0 = time.perf_counter()
        try:
            for i, q in enumerate(todo, 1):
                self._check_time()
                c = cands[q.id]
                t = time.perf_counter()
                store.add(q, c, lik.credit(q.question, c.start, c.candidates, q.golden_answers), time.perf_counter() - t)
                if i % 10 == 0 or i == len(todo):
                    each = (time.perf_counter() - t0) / i
                    self.log(f"train: credit: {i}/{len(todo)} questions, {each:.1f} s each, "
                             f"~{each * (len(todo) - i) / 60:.0f} min left")
        finally:
            lik.close()
        return store

    def _genacc_credit(self, store: CreditStore, todo: list[QAExample], cands: dict[str, Candidates]) -> CreditStore:
        """'genacc': each page's credit is Acc(G(Q, start + page)) - Acc(G(Q, start)), the generator's own answers
        scored by eval.metric (eval/accuracy.py, the GBR reward's Acc), GENACC_QUESTIONS questions a batch (their
        calls concurrent, generator.concurrency at a time). A question with a failed call (no answer, no verdict) is
        missing, not scored: it is asked again on the next run."""
        from eval.build import build_accuracy
        from generator_adapters.client import run_sync
        from generator_adapters.likelihood import Credit

        acc = build_accuracy(self.cfg.generator_resolved, self.cfg.judge_resolved, self.cfg.eval)
        budget = self._budget(acc)
        t0 = time.perf_counter()
        done = missing = 0
        try:
            for lo in range(0, len(todo), GENACC_QUESTIONS):
                self._check_time()
                part = todo[lo:lo + GENACC_QUESTIONS]
                asks = [(q, [*cands[q.id].start, *([] if d is None else [d])])
                        for q in part for d in [None, *cands[q.id].candidates]]
                questions, docs, golden = ([q.question for q, _ in asks], [d for _, d in asks],
                                           [q.golden_answers for q, _ in asks])
                if budget.limit_usd is not None:  # every paid call of the batch bounded before any of it is made
                    budget.check(sum(acc.project(questions, docs, golden)),
                                 f"the credit of questions {lo + 1}-{lo + len(part)} ({len(asks)} answers)")
                before = acc.usage()
                t = time.perf_counter()
                try:  # run_sync: litellm's HTTP clients of the batch's event loop closed with it
                    scores = run_sync(acc(questions, docs, golden))
                finally:  # what the batch's calls cost, recorded whether or not they all came back
                    budget.spend(acc.usage().get("cost_usd", 0.0) - before.get("cost_usd", 0.0))
                    write_json_atomic(self._spend_path, {"spent_usd": budget.spent_usd})
                each = (time.perf_counter() - t) / len(part)
                i = 0
                for q in part:
                    c = cands[q.id]
                    got = scores[i:i + 1 + len(c.candidates)]
                    i += len(got)
                    if any(s is None for s in got):
                        missing += 1  # a failed call is missing, not wrong: scored again next run
                        continue
                    base = float(got[0])  # type: ignore[arg-type]
                    store.add(q, c, Credit(base=base, gains=[float(s) - base for s in got[1:]],  # type: ignore[arg-type]
                                           answer_tokens=0, computed_tokens=0, prompt_tokens=0), each)
                    done += 1
                n = lo + len(part)
                per = (time.perf_counter() - t0) / n
                self.log(f"train: credit (genacc): {n}/{len(todo)} questions ({missing} missing: a failed call), "
                         f"{per:.1f} s each, ~{per * (len(todo) - n) / 60:.0f} min left")
        finally:
            acc.close()
        self.missing = missing
        return store

    @property
    def _spend_path(self) -> Path:
        """What the paid credit calls of this credit store have cost, over every invocation (beside the store)."""
        return self.credit_path.with_name(self.credit_path.stem + ".spend.json")

    def _budget(self, acc: Any) -> Any:
        """The 'genacc' credit's spend, kept beside the store over every invocation, and its cap: `s3 train
        --max-cost-usd`, else training.budget_usd (limit None = no cap, the spend still kept). A paid model of unknown
        price is refused before the first call of a capped run."""
        from generator_adapters.budget import Budget, require_known_prices

        limit = self.max_cost_usd if self.max_cost_usd is not None else self.t.budget_usd
        setting = "--max-cost-usd" if self.max_cost_usd is not None else "training.budget_usd"
        if limit is not None:
            require_known_prices(acc.clients(), setting)
        spent = 0.0
        if self._spend_path.is_file():
            import json

            spent = float(json.loads(self._spend_path.read_text()).get("spent_usd", 0.0))
        return Budget(limit, spent_usd=spent, setting=setting)

    def _targets(self, rows: list[dict[str, Any]]) -> list[tuple[str, list[float]]]:
        from training.reading.reader_fit import credit_target, gold_target

        out = []
        for row in rows:
            gains = row["gains"]
            if len(gains) < 2:
                continue
            if self.r.credit == "gold":
                target = gold_target([g > 0 for g in gains])
                if target is None:
                    continue
            else:
                if max(gains) - min(gains) < 1e-6:
                    continue  # a question no page moves teaches nothing
                target = credit_target(gains, self.r.temperature)
            out.append((row["id"], target))
        return out

    def reader(self, train: list[QAExample], cands: dict[str, Candidates], store: CreditStore) -> Path:
        """Train the reader on the scored training questions; the final adapter is checkpoints/reader-final."""
        import random

        from training.reading.reader_fit import ReaderFit

        ckpts = self.out / "checkpoints"
        final = ckpts / "reader-final"
        if (final / "adapter_config.json").is_file():
            return final
        by_id = {q.id: q for q in train}
        items = [(qid, tgt) for qid, tgt in self._targets([store[q.id] for q in train if q.id in store])]
        if not items:
            raise S3Error("train: reader: no training question has candidates whose credit differs: nothing to learn "
                          "(more questions, or a generator that reads the documents)")
        per_epoch = -(-len(items) // self.r.batch_questions)
        total = per_epoch * self.r.epochs
        saved = sorted(ckpts.glob("reader-step-*"), key=lambda p: int(p.name.rsplit("-", 1)[1]))
        resume = saved[-1] if saved else None
        fit = ReaderFit(self.r.reader_base, lora_r=self.r.lora_r, lora_alpha=self.r.lora_alpha,
                        lr=self.r.learning_rate, seed=self.t.seed, threads=self.r.threads, resume=resume)
        if resume is not None:
            self.log(f"train: reader: resumed from {resume.name} (step {fit.steps} of {total})")
        else:
            self.log(f"train: reader: {len(items)} questions, {total} steps of {self.r.batch_questions}")
        t0 = time.perf_counter()
        done0 = fit.steps
        while fit.steps < total:
            self._check_time()
            epoch, k = divmod(fit.steps, per_epoch)
            order = list(items)
            random.Random(self.t.seed + epoch).shuffle(order)  # the data order: a function of seed and step
            part = order[k * self.r.batch_questions:(k + 1) * self.r.batch_questions]
            batch = [(by_id[qid].question, cands[qid].candidates, tgt) for qid, tgt in part]
            t = time.perf_counter()
            loss = fit.step(batch)
            append_jsonl(self.out / "metrics.jsonl", [{"stage": "reader", "step": fit.steps, "loss": round(loss, 5),
                                                       "seconds": round(time.perf_counter() - t, 2)}])
            if fit.steps % self.t.checkpoint.every == 0 or fit.steps == total:
                fit.save(ckpts / f"reader-step-{fit.steps}")
                for old in sorted(ckpts.glob("reader-step-*"), key=lambda p: int(p.name.rsplit("-", 1)[1]))[
                        : -self.t.checkpoint.keep]:
                    import shutil

                    shutil.rmtree(old)
            if fit.steps % 10 == 0 or fit.steps == total:
                each = (time.perf_counter() - t0) / max(fit.steps - done0, 1)
                self.log(f"train: reader: step {fit.steps}/{total}, loss {loss:.4f}, {each:.1f} s a step")
        fit.save(final, optimizer=False)
        return final

    def ranker(self, train: list[QAExample], held: list[QAExample], cands: dict[str, Candidates],
               store: CreditStore, reader_dir: Path) -> dict[str, Any]:
        """The reader's scores of every question's candidates (reader_scores.jsonl, resumable), the ranker fitted on
        the training questions, the stop chosen on the held-out ones."""
        from searcher.title_following.links import ranker_rows, ranker_score
        from searcher.title_following.reader import PointwiseReader
        from training.reading.ranker_fit import choose_stop, fit_ranker

        path = self.out / "reader_scores.jsonl"
        sha = file_sha256(reader_dir / "adapter_model.safetensors")
        have = {}
        if path.exists():
            have = {r["id"]: r["scores"] for _, r in iter_jsonl(path, torn_tail="skip") if r.get("reader") == sha}
        qs = [q for q in [*train, *held] if q.id in store and cands[q.id].candidates]
        todo = [q for q in qs if q.id not in have]
        if todo:
            reader = PointwiseReader.load(str(reader_dir), threads=self.r.threads)
            for i, q in enumerate(todo, 1):
                self._check_time()
                s = [round(x, 4) for x in reader.scores(q.question, cands[q.id].candidates)]
                append_jsonl(path, [{"id": q.id, "reader": sha, "scores": s}])
                have[q.id] = s
                if i % 50 == 0 or i == len(todo):
                    self.log(f"train: ranker: the reader scored {i}/{len(todo)} questions' pages")

        def rows_of(q: QAExample) -> list[dict[str, float]]:
            c = cands[q.id]
            return ranker_rows(q.question, c.start, c.candidates, c.ranks, have[q.id])

        x, y = [], []
        for q in train:
            if q.id in have:
                x += rows_of(q)
                y += [g >= self.r.positive_gain for g in store[q.id]["gains"]]
        if len(set(y)) < 2:
            raise S3Error(f"train: ranker: the training questions' pages are all {'helping' if y and y[0] else 'not helping'} "
                          f"(training.reading.positive_gain = {self.r.positive_gain}): no ranker can be fitted")
        weights = fit_ranker(x, y)
        held_q = [q for q in held if q.id in have]
        scores = [[ranker_score(weights, r) for r in rows_of(q)] for q in held_q]
        gains = [store[q.id]["gains"] for q in held_q]
        if held_q:
            pages, min_score, tried = choose_stop(scores, gains, max_pages=self.r.max_pages)
        else:
            pages, min_score, tried = 1, None, {}
            self.log("train: ranker: no held-out questions (training.heldout.questions = 0): one page is added, "
                     "always")
        self.log(f"train: ranker: fitted on {len(y)} pages ({sum(y)} helping); held-out choice: {pages} page(s)"
                 f"{f', min score {min_score}' if min_score is not None else ''} ({tried})")
        return {"weights": weights, "pages": pages, "min_score": min_score, "tried": tried,
                "held": self._held_report(held_q, cands, store, have, scores)}

    def _held_report(self, held: list[QAExample], cands: dict[str, Candidates], store: CreditStore,
                     reader: dict[str, list[float]], ranker: list[list[float]]) -> dict[str, Any]:
        """On the held-out questions: the mean credit of the page each chooser puts first, and (where the data has gold
        labels) how often it is gold."""
        choosers: dict[str, Callable[[int, QAExample], list[float]]] = {
                    "credit (oracle)": lambda i, q: store[q.id]["gains"],
                    "bm25 order": lambda i, q: [-float(r) for r in cands[q.id].ranks],
                    "reader": lambda i, q: reader[q.id], "ranker": lambda i, q: ranker[i]}
        out: dict[str, Any] = {"questions": len(held)}
        for name, f in choosers.items():
            firsts = []
            for i, q in enumerate(held):
                firsts.append(_first(f(i, q)))
            gains = [store[q.id]["gains"][j] for q, j in zip(held, firsts, strict=True)]
            gold = [cands[q.id].gold[j] for q, j in zip(held, firsts, strict=True) if any(cands[q.id].gold)]
            out[name] = {"mean_credit": round(statistics.fmean(gains), 4) if gains else None,
                         "best_is_gold": round(statistics.fmean(gold), 3) if gold else None}
        return out

    def export(self, reader_dir: Path, fitted: dict[str, Any], titled: bool, n_train: int) -> Path:
        """searcher/: searcher.json, ranker.json, reader/ (the adapter)."""
        import shutil

        from searcher.trained import RECORD_FILE

        where = self.out / "searcher"
        if where.exists():
            shutil.rmtree(where)
        where.mkdir(parents=True)
        shutil.copytree(reader_dir, where / "reader")
        write_json_atomic(where / "ranker.json", {"weights": fitted["weights"], "ranks": [self.k0 + 1, self.read_last],
                                                  "reader": "reader"})
        gen = self.cfg.generator_resolved
        record = {
            "format": 2, "kind": "reading",
            "searcher": {"context_cap": self.cfg.searcher.context_cap,
                         "reading": {"read_last": self.read_last, "ranker": "ranker.json", "reader": "reader",
                                     "start": "auto", "pages": fitted["pages"], "min_score": fitted["min_score"]}},
            "card": {"applies": "titled" if titled else "any",
                     "about": f"a reading searcher trained by `s3 train` on {n_train} questions: "
                              f"{'the title-following script' if titled else f'naive top-{self.k0}'} plus up to "
                              f"{fitted['pages']} page(s) of ranks {self.k0 + 1}-{self.read_last}, picked by a ranker over "
                              f"a LoRA reader taught by {TAUGHT[self.r.credit].format(model=gen.model)}",
                     "measured": []},
            "trained": {"credit": self._fingerprint(), "reader_base": self.r.reader_base,
                        "reader_sha256": file_sha256(where / "reader" / "adapter_model.safetensors"),
                        "ranker_sha256": file_sha256(where / "ranker.json"), "questions": n_train,
                        "held_out": fitted["held"], "stop_tried": fitted["tried"]},
        }
        write_json_atomic(where / RECORD_FILE, record)
        return where

    def dry_run(self, sample: int = 16) -> str:
        """What the run would do and cost, without a generator pass: the questions, the candidates a question, the
        questions already scored, and the tokens the scoring would run through the generator (measured on `sample`
        questions with the generator's own tokenizer and prompt, the shared prefix counted once)."""
        train, held, retriever, titled = self._data()
        qs = [*train, *held]
        cands = self._candidates(retriever, qs[:sample], titled)
        per_q = statistics.fmean(len(c.candidates) for c in cands.values()) if cands else 0.0
        done = 0
        if self.credit_path.exists():
            done = len(CreditStore(self.credit_path, self._fingerprint()))
        lines = [f"dry run: {len(train)} training + {len(held)} held-out questions, ~{per_q:.1f} candidate pages a "
                 f"question (of {len(cands)} sampled); {done} already scored ({self.credit_path.name})"]
        if self.r.credit == "logprob" and cands:
            from generator_adapters.generator import Generator
            from s3runtime.llm_score import LocalScorer, common_prefix

            gen = Generator(self.cfg.generator_resolved)
            scorer = LocalScorer(self.cfg.generator_resolved.model.removeprefix("local/"), threads=1)
            try:
                computed = []
                for q in qs[:sample]:
                    c = cands[q.id]
                    base = scorer.prompt_tokens(gen.messages(q.question, c.start))
                    n = len(base)
                    for d in c.candidates:
                        p = scorer.prompt_tokens(gen.messages(q.question, [*c.start, d]))
                        n += len(p) - common_prefix(base, p)
                    computed.append(n)
            finally:
                scorer.close()
            each = statistics.fmean(computed)
            left = max(len(qs) - done, 0)
            lines.append(f"credit: {1 + per_q:.1f} scoring passes a question, ~{each:.0f} tokens run through "
                         f"{self.cfg.generator_resolved.model} a question (the start's prefix once); "
                         f"~{each * left / 1e6:.2f}M tokens for the {left} questions left: ~{each * left / 55 / 3600:.1f} h "
                         "at 55 tokens/s (the offline 1.5B on this 2-core CPU; the 0.5B ~3x faster)")
        if self.r.credit == "genacc" and cands:
            left = max(len(qs) - done, 0)
            calls = (1 + per_q) * left
            gcfg = self.cfg.generator_resolved
            ev = self.cfg.eval
            judged = ev.metric == "judge" or (ev.metric == "genacc" and ev.use_judge)
            lines.append(f"credit (genacc): {1 + per_q:.1f} answers a question from {gcfg.model} (the start, then each "
                         f"page added), up to {gcfg.max_tokens} tokens each: ~{calls:.0f} generator calls for the {left} "
                         "questions left" + (f", plus a judge call ({self.cfg.judge_resolved.model}) for each answer "
                                             "whose span check fails" if judged else "")
                         + "; answers already in the generator's response cache are free (`s3 train --max-cost-usd` "
                         "caps a paid run)")
        lines.append(f"reader: LoRA r={self.r.lora_r} on {self.r.reader_base}, {self.r.epochs} epoch(s), "
                     f"{self.r.batch_questions} questions a step; ranker and stop (0..{self.r.max_pages} pages) chosen "
                     f"on the {len(held)} held-out questions; output: {self.out / 'searcher'}")
        return "\n".join(lines)

    def run(self) -> dict[str, Any]:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "config.json").write_text(self.cfg.model_dump_json(indent=2), encoding="utf-8")
        t0 = time.perf_counter()
        try:
            train, held, retriever, titled = self._data()
            cands = self._candidates(retriever, [*train, *held], titled)
            store = self.credit([*train, *held], cands)
            if self.missing:  # the reader is trained once on the credit: not before every question has its credit
                self.log(f"train: reading: {self.missing} question(s) have no credit (a failed generator or judge "
                         "call); the same command asks them again, then trains")
                return {"stopped": "credit missing", "missing": self.missing,
                        "seconds": round(time.perf_counter() - t0, 1)}
            reader_dir = self.reader(train, cands, store)
            fitted = self.ranker(train, held, cands, store, reader_dir)
        except Stopped:
            self.log("train: reading: the time budget is spent; the same command resumes from the run directory")
            return {"stopped": "time budget", "seconds": round(time.perf_counter() - t0, 1)}
        where = self.export(reader_dir, fitted, titled, len(train))
        summary = {"searcher": str(where), "pages": fitted["pages"], "min_score": fitted["min_score"],
                   "held_out": fitted["held"], "seconds": round(time.perf_counter() - t0, 1)}
        write_json_atomic(self.out / "report.json", summary)
        self._plot()
        self.log(f"train: reading: done: {where} (s3 search --policy {where} \"a question\")")
        return summary

    def _plot(self) -> None:
        """reading.png: the reader's loss per step."""
        rows = [r for _, r in iter_jsonl(self.out / "metrics.jsonl", torn_tail="skip") if r.get("stage") == "reader"] \
            if (self.out / "metrics.jsonl").exists() else []
        if not rows:
            return
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], lw=1)
        ax.set_xlabel("reader step")
        ax.set_ylabel("KL to the credit's distribution")
        ax.set_title("the reader learning the generator's credit")
        fig.tight_layout()
        fig.savefig(self.out / "reading.png", dpi=120)
        plt.close(fig)


def train_reading(cfg: TrainSettings, *, max_seconds: float | None = None, log: Log = print) -> dict[str, Any]:
    """`s3 train` with searcher.kind = 'reading' (`ReadingRun`)."""
    return ReadingRun(cfg, max_seconds=max_seconds, log=log).run()
