"""How long the shipped trained searcher takes per question, on the runtime chosen automatically against today's
torch path (issue 61), and whether the runtime changes its documents.

    run(data_dir, index_dir, n_new=20, n_old=5) -> {"new": {...}, "old": {...}, "ratio_p50", "same_documents", ...}
    kernels(gguf_files, threads=1) -> [{"file", "threads", "prompt_tok_s", "decode_tok_s"}, ...]   # the floor
    token_budget(index, questions) -> {"new_prompt_tokens", "reused_tokens", "written_tokens"} per question
    exports(index, questions) -> each GGUF export's p50 and documents, and how many match the first's
    launches({"quiet": [res, ...], "busy": [...]}) -> per condition, the median and range over launches of each number

Warm: the searcher is built once (model loaded, index open), then `search_one` per question, timed one at a time —
what `/search` runs for a lone request, without the few milliseconds of HTTP. "old" is the path before issue 61:
torch (transformers, the LoRA merged) with torch's default threads (every core). "new" is `searcher.runtime = auto`
(llama.cpp on a CPU, its threads governed call by call: searcher/policy/threads.py). Cold: `s3 search` as a subprocess, one
question, load included.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from searcher.build import build_policy, build_retriever, build_searcher, trained_settings
from searcher.config import RetrieverConfig, SearcherConfig
from searcher.policies import shipped_policy


def prepare(shared: Path, work: Path) -> tuple[Path, Path]:
    """hotpotqa_dev500 prepared into work/data and indexed (bm25) into work/index, once."""
    from dataprep.prepare import prepare as prepare_data
    from searcher.retrieval import build_index

    data, index = work / "data", work / "index"
    if not (data / "questions.jsonl").is_file():
        prepare_data("hotpotqa", [shared / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"], data)
    if not (index / "index.json").is_file():
        build_index(data / "corpus.jsonl", "bm25", index, RetrieverConfig())
    return data, index


def _searcher(index: Path, runtime: str, threads: int | None) -> Any:
    scfg, rcfg, _ = trained_settings(shipped_policy(), SearcherConfig(runtime=runtime),  # type: ignore[arg-type]
                                     RetrieverConfig(), index=index)
    return build_searcher(scfg, build_retriever(rcfg, index), build_policy(scfg, threads=threads), k0=rcfg.k)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def warm(index: Path, questions: list[str], runtime: str, threads: int | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    searcher = _searcher(index, runtime, threads)
    load = time.perf_counter() - t0
    print(f"{runtime}: loaded in {load:.1f}s ({searcher.policy.name.split(':', 1)[0]})", file=sys.stderr, flush=True)
    searcher.search_one(questions[0])  # warm-up (first call pays lazy initialisation)
    secs, docs, valid = [], [], 0
    for q in questions:
        t = time.perf_counter()
        r = searcher.search_one(q)
        secs.append(time.perf_counter() - t)
        docs.append([d.id for d in r.documents])
        print(f"{runtime}: question {len(secs)}/{len(questions)} {secs[-1]:.2f}s", file=sys.stderr, flush=True)
        valid += all(s.invalid_reason is None for s in r.steps)
    gov = getattr(searcher.policy, "governor", None)  # llama.cpp's thread governor: where it ended, how often it fell
    return {"runtime": runtime, "policy": searcher.policy.name.split(":", 1)[0], "threads": threads,
            "governor": None if gov is None else {"threads_at_end": gov.threads, "drops": gov.drops},
            "load_s": round(load, 2), "n": len(questions), "p50_s": round(statistics.median(secs), 3),
            "p95_s": round(pct(secs, 0.95), 3), "min_s": round(min(secs), 3), "max_s": round(max(secs), 3),
            "valid_questions": valid, "seconds": [round(x, 3) for x in secs], "documents": docs}


def cold(index: Path, question: str, runtime: str) -> float:
    """`s3 search --index INDEX QUESTION` from a fresh process (imports, model load, search)."""
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "s3.cli", "search", "--index", str(index), question,
                    "--set", f"searcher.runtime={runtime}"], check=True, capture_output=True, text=True,
                   env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    return round(time.perf_counter() - t, 2)


def run(data: Path, index: Path, n_new: int = 20, n_old: int = 5, colds: int = 1) -> dict[str, Any]:
    from s3core.corpus import read_questions

    qs = [q.question for q in read_questions(data / "questions.jsonl")][: max(n_new, n_old)]
    new = warm(index, qs[:n_new], "auto", None)
    old = warm(index, qs[:n_old], "torch", os.cpu_count())
    same = sum(a == b for a, b in zip(new["documents"], old["documents"], strict=False))
    return {
        "load_1min": os.getloadavg()[0], "cpus": os.cpu_count(), "new": new, "old": old,
        "ratio_p50": round(old["p50_s"] / new["p50_s"], 2) if new["p50_s"] else None,
        "same_documents": same, "compared": min(n_new, n_old),
        "cold_new_s": [cold(index, qs[0], "auto") for _ in range(colds)],
    }


def kernels(files: list[Path], threads: int = 1, prompt: int = 800, written: int = 40, reps: int = 3) -> list[dict[str, Any]]:
    """llama.cpp's own rates on each GGUF file, no agent around it: `prompt` tokens evaluated in one call (what a
    turn's new window costs) and `written` tokens one at a time (what a reply costs); medians over `reps`. A search's
    floor is new_prompt_tokens / prompt_tok_s + written_tokens / decode_tok_s."""
    from llama_cpp import Llama

    rows = []
    ids = [(i * 7919) % 40000 + 100 for i in range(prompt)]  # fixed token ids inside the vocabulary
    for f in files:
        llm = Llama(model_path=str(f), n_ctx=4096, n_batch=512, n_threads=threads, n_threads_batch=threads,
                    verbose=False)
        pp, tg = [], []
        for _ in range(reps):
            llm.reset()
            t = time.perf_counter()
            llm.eval(ids)
            pp.append(prompt / (time.perf_counter() - t))
            t = time.perf_counter()
            for i in range(written):
                llm.eval([123 + i])
            tg.append(written / (time.perf_counter() - t))
        rows.append({"file": f.name, "threads": threads, "prompt_tok_s": round(statistics.median(pp), 1),
                     "prompt_tok_s_range": [round(min(pp), 1), round(max(pp), 1)],
                     "decode_tok_s": round(statistics.median(tg), 1),
                     "decode_tok_s_range": [round(min(tg), 1), round(max(tg), 1)]})
        print(f"kernels: {rows[-1]}", file=sys.stderr, flush=True)
        del llm
    return rows


def token_budget(index: Path, questions: list[str]) -> dict[str, Any]:
    """What the llama.cpp policy evaluates per question: prompt tokens it had to compute (after the KV cache of the
    previous prompt), prompt tokens the cache served, and tokens it wrote, summed over the question's policy calls
    (the search loop calls the policy with one prompt at a time, so its `reused_tokens` belongs to that prompt)."""
    if not questions:
        raise ValueError("token_budget needs at least one question")
    searcher = _searcher(index, "llamacpp", None)
    policy = searcher.policy
    searcher.search_one(questions[0])  # the instructions' KV is cached from here on, as in a warm server
    inner = policy.generate
    calls: list[tuple[int, int, int]] = []

    def counted(prompts: Any, **kw: Any) -> Any:
        if len(prompts) != 1:
            raise ValueError(f"token_budget counts one prompt a call; the loop sent {len(prompts)}")
        outs = inner(prompts, **kw)
        calls.extend((o.prompt_tokens, policy.reused_tokens, o.completion_tokens) for o in outs)
        return outs

    policy.generate = counted
    per_q = []
    try:
        for q in questions:
            calls.clear()
            searcher.search_one(q)
            per_q.append({"calls": len(calls), "new_prompt_tokens": sum(p - r for p, r, _ in calls),
                          "reused_tokens": sum(r for _, r, _ in calls), "written_tokens": sum(w for *_, w in calls)})
    finally:
        policy.generate = inner
    med = {k: statistics.median(r[k] for r in per_q) for k in per_q[0]}
    return {"n": len(per_q), "median": med, "questions": per_q}


def exports(index: Path, questions: list[str], dtypes: tuple[str, ...] = ("q8_0", "f16")) -> dict[str, Any]:
    """The warm loop on each GGUF export of the shipped policy (its seconds and documents), and on how many
    questions every export returns the same documents as the first: whether a smaller export may be the default."""
    from searcher.policy.llamacpp_policy import LlamaCppPolicy

    scfg, rcfg, _ = trained_settings(shipped_policy(), SearcherConfig(runtime="llamacpp"), RetrieverConfig(),
                                     index=index)
    out: dict[str, Any] = {}
    for dtype in dtypes:
        policy = LlamaCppPolicy.load(str(shipped_policy()), dtype=dtype)
        searcher = build_searcher(scfg, build_retriever(rcfg, index), policy, k0=rcfg.k)
        searcher.search_one(questions[0])
        secs, docs = [], []
        for q in questions:
            t = time.perf_counter()
            docs.append([d.id for d in searcher.search_one(q).documents])
            secs.append(round(time.perf_counter() - t, 3))
        out[dtype] = {"p50_s": round(statistics.median(secs), 3), "seconds": secs, "documents": docs}
        print(f"export {dtype}: p50 {out[dtype]['p50_s']}s", file=sys.stderr, flush=True)
        del policy, searcher
    first = out[dtypes[0]]["documents"]
    out["same_documents"] = {d: sum(a == b for a, b in zip(first, out[d]["documents"], strict=True)) for d in dtypes[1:]}
    out["n"] = len(questions)
    return out


def markdown(res: dict[str, Any]) -> str:
    n, o = res["new"], res["old"]
    lines = ["| path | policy runtime | questions | p50 (s) | p95 (s) | range (s) | valid replies | load (s) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in (("new (searcher.runtime = auto)", n), ("today's (torch, default threads)", o)):
        lines.append(f"| {name} | {r['policy']} | {r['n']} | {r['p50_s']} | {r['p95_s']} | {r['min_s']}-{r['max_s']} "
                     f"| {r['valid_questions']}/{r['n']} | {r['load_s']} |")
    lines += ["", f"p50 ratio (today / new): {res['ratio_p50']}x; the same documents on {res['same_documents']} of "
              f"{res['compared']} questions both paths ran; cold `s3 search` (load included): {res['cold_new_s']} s.",
              f"1-minute load average at the end: {res['load_1min']:.2f} on {res['cpus']} CPUs."]
    return "\n".join(lines) + "\n"


LAUNCH_KEYS = {"new p50 (s)": ("new", "p50_s"), "new p95 (s)": ("new", "p95_s"), "old p50 (s)": ("old", "p50_s"),
               "old p95 (s)": ("old", "p95_s"), "p50 ratio old / new": ("ratio_p50",), "cold new (s)": ("cold_new_s",),
               "new load (s)": ("new", "load_s"), "old load (s)": ("old", "load_s"), "load average": ("load_1min",)}


def _get(res: dict[str, Any], path: tuple[str, ...]) -> float:
    v: Any = res
    for k in path:
        v = v[k]
    return float(statistics.median(v)) if isinstance(v, list) else float(v)


def launches(groups: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each condition's launches (separate processes of `run`) summarised: per number the median over launches and
    its range, the questions each launch timed, and the documents both runtimes chose alike, summed over launches.

    >>> r = {"new": {"p50_s": 2.0, "p95_s": 3.0, "load_s": 1.0, "n": 4}, "old": {"p50_s": 8.0, "p95_s": 9.0,
    ...      "load_s": 2.0, "n": 2}, "ratio_p50": 4.0, "cold_new_s": [5.0], "load_1min": 0.1, "same_documents": 2,
    ...      "compared": 2}
    >>> launches({"quiet": [r, r | {"ratio_p50": 6.0}, r | {"ratio_p50": 5.0}]})["quiet"]["p50 ratio old / new"]
    {'median': 5.0, 'range': [4.0, 6.0]}
    """
    out: dict[str, Any] = {}
    for cond, rs in groups.items():
        if not rs:
            raise ValueError(f"no launch of condition {cond!r}")
        row: dict[str, Any] = {"launches": len(rs), "questions_new": rs[0]["new"]["n"], "questions_old": rs[0]["old"]["n"],
                               "same_documents": sum(r["same_documents"] for r in rs),
                               "compared": sum(r["compared"] for r in rs)}
        for name, path in LAUNCH_KEYS.items():
            xs = [_get(r, path) for r in rs]
            row[name] = {"median": round(statistics.median(xs), 3), "range": [round(min(xs), 3), round(max(xs), 3)]}
        out[cond] = row
    return out


def launches_markdown(summary: dict[str, Any]) -> str:
    conds = list(summary)
    lines = ["| | " + " | ".join(f"{c} (median, range over {summary[c]['launches']} launches)" for c in conds) + " |",
             "| --- | " + " | ".join("---:" for _ in conds) + " |"]
    for name in LAUNCH_KEYS:
        cells = [f"{summary[c][name]['median']} ({summary[c][name]['range'][0]}-{summary[c][name]['range'][1]})"
                 for c in conds]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| questions timed a launch (new / old) | "
                 + " | ".join(f"{summary[c]['questions_new']} / {summary[c]['questions_old']}" for c in conds) + " |")
    lines.append("| same documents, both runtimes | "
                 + " | ".join(f"{summary[c]['same_documents']} of {summary[c]['compared']}" for c in conds) + " |")
    return "\n".join(lines) + "\n"
