"""The README's RAG flow ("1. Plug a searcher into your RAG app") re-run exactly as written, on a titled and an
untitled corpus a user indexes the README's way (issue 79): what the chain sees and how long it takes.

    prepare(work, shared, n_hotpot) -> {corpus: Corpus}  # the user's folder: mine/, data/mine, indexes/mine
    launch(corpus, label, rounds) -> one fresh process running the flow: built.why, the documents, cold and warm s
    summary(launches) -> per corpus and label: cold and warm seconds, median [min, max] over launches
    documents(launches) -> per corpus: why, and per question the documents as the chain saw them
    markdown(results) -> the README.md of the results folder

A corpus folder is what a user has after "Your own data: the first ten minutes": their own files in `mine/`, `s3 data
prepare` into `data/mine`, `s3 index build` into `indexes/mine`. The flow runs there (`cwd`), so `load_config()`
reads that folder's config.toml and `Path("indexes/mine")` is the README's own path. Titled: the distinct paragraphs
of the first `n_hotpot` questions of hotpotqa_dev500 (raw HotpotQA, `s3 data prepare hotpotqa`), its first questions
asked. Untitled: 30 multi-line chunks of a robot-vacuum manual, `{"id": "r7-NN", "contents": "line1\\nline2"}`, no
title anywhere (`s3 data prepare flashrag`).

Cold: from launching the process (interpreter start, imports, `load_config`, `build_searcher`) to the first
`searcher.search_one(q)` returned. Warm: each call of the chain `S3Retriever(searcher=searcher) | format_docs` after
that, in that process (every question, `rounds` times; the first round also runs the README's `search_one(q)` once a
question, timed apart). The documents are recorded as the chain sees them: a callback
handler on the chain's run takes the retriever's documents (the chain itself is unchanged), and the context string
the chain returns is checked against `format_docs` of those documents. Threads: 1 where configurable
(`[searcher.reading] threads = 1` in the titled folder's config.toml, S3_LLAMA_THREADS=1 for the llama.cpp policy,
OMP/MKL threads 1).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ("titled", "untitled")
THREADS_ENV = {"S3_LLAMA_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
TITLED_CONFIG = "# threads of 1 where configurable (benchmarks/rag_flow.py)\n[searcher.reading]\nthreads = 1\n"
LAUNCHED_AT = "RAG_FLOW_LAUNCHED_AT"  # the parent's time.time() when it started the process

# the untitled corpus: a small product manual, multi-line chunks with the user's own ids, no title field; several
# first lines carry the answer (a reader that took the first line for a title would lose it)
MANUAL: list[tuple[str, str]] = [
    ("r7-01", "R7 Robot Vacuum user manual.\nRead all safety instructions before first use.\nKeep this manual."),
    ("r7-02", "What is in the box\nThe R7 robot, the charging dock, a power adapter, two side brushes and one filter."),
    ("r7-03", "Place the charging dock against a wall on a hard, level floor.\nLeave 0.5 m free on each side and 1.5 m "
              "in front of the dock."),
    ("r7-04", "Before the first run, charge the R7 for 5 hours.\nThe power light blinks while charging and stays on "
              "when the battery is full."),
    ("r7-05", "Press the power button for 3 seconds to switch the R7 on.\nPress it once to start cleaning and once "
              "again to pause."),
    ("r7-06", "Connecting to Wi-Fi\nThe R7 connects to 2.4 GHz networks only.\nOpen the R7 Home app and follow the "
              "pairing steps."),
    ("r7-07", "To reset the Wi-Fi connection, press the home and spot buttons together for 5 seconds.\nThe Wi-Fi "
              "light blinks quickly when the R7 is ready to pair again."),
    ("r7-08", "Cleaning modes\nAuto cleans the whole floor, Spot cleans a 1 m square, Edge follows the walls."),
    ("r7-09", "Suction power has three levels: Quiet, Standard and Max.\nMax shortens the run time by about 40 "
              "percent."),
    ("r7-10", "Scheduling\nSet a daily cleaning time in the R7 Home app.\nThe R7 leaves the dock on its own at that "
              "time."),
    ("r7-11", "Emptying the dustbin\nPress the bin release button and pull the bin out.\nEmpty it after every run."),
    ("r7-12", "Clean the filter once a week with a soft brush.\nReplace the filter every 2 months."),
    ("r7-13", "Replace the side brushes every 3 to 6 months.\nPull the old brush off its pin and push the new one on "
              "until it clicks."),
    ("r7-14", "Clean the main brush every week.\nCut away hair wound around it with the cleaning tool."),
    ("r7-15", "Wipe the cliff sensors and the charging contacts with a dry cloth every month.\nDirty cliff sensors "
              "make the R7 stop near stairs."),
    ("r7-16", "Error codes\nThe status light turns red and the R7 speaks the error code.\nThe app shows the code "
              "and what to do."),
    ("r7-17", "Error E07 means a wheel is stuck.\nLift the R7, remove anything wound around the wheels and turn them "
              "by hand."),
    ("r7-18", "Error E12 means the battery temperature is too high.\nMove the vacuum to a cooler room and wait 30 "
              "minutes."),
    ("r7-19", "Error E03 means the main brush is blocked.\nRemove the brush, cut away tangled hair and put it back."),
    ("r7-20", "Error E05 means the dustbin is missing.\nPut the dustbin back until it clicks."),
    ("r7-21", "Error E09 means the bumper is stuck.\nTap the bumper lightly all around until it moves freely."),
    ("r7-22", "Error E15 means the R7 cannot find its dock.\nCarry it to the dock and check that the dock has "
              "power."),
    ("r7-23", "Error E21 means the laser sensor is covered.\nWipe the laser cover on top of the R7 with a dry "
              "cloth."),
    ("r7-24", "The battery lasts about 120 minutes on Quiet suction.\nA full charge takes about 4 hours."),
    ("r7-25", "Storage\nCharge the battery fully before storing the R7.\nStore it in a cool, dry place."),
    ("r7-26", "Do not use the R7 outdoors or on wet floors.\nKeep cables and small objects off the floor before "
              "cleaning."),
    ("r7-27", "Updating the firmware\nThe R7 Home app offers updates when the robot is docked.\nDo not move the "
              "robot while it updates."),
    ("r7-28", "Warranty: the R7 has a 2 year warranty.\nThe battery is covered for 1 year."),
    ("r7-29", "If the R7 does not charge, clean the charging contacts.\nCheck that the dock's power light is on."),
    ("r7-30", "Specifications\nWeight 3.5 kg, height 9.5 cm, dustbin 0.4 l.\nNoise below 60 dB on Quiet."),
]
MANUAL_QUESTIONS: list[tuple[str, str]] = [
    ("What does error E12 mean?", "the battery temperature is too high"),
    ("How do I reset the Wi-Fi connection?", "press the home and spot buttons together for 5 seconds"),
    ("How often should the side brushes be replaced?", "every 3 to 6 months"),
    ("What should I do about error E07?", "remove anything wound around the wheels"),
]


@dataclass
class Corpus:
    """A user's folder (the flow's cwd), the questions asked there and the texts of the corpus by id, as the user
    wrote them (untitled) or as `s3 data prepare` wrote them (titled)."""

    name: str
    folder: Path
    questions: list[str]
    texts: dict[str, str] = field(default_factory=dict)
    titled: bool = True


def _env() -> dict[str, str]:
    return {**os.environ, **THREADS_ENV, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(
                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}


def _s3(folder: Path, *args: str) -> None:
    """`s3 ARGS` in the user's folder, as the README runs it."""
    print(f"+ (cd {folder} && s3 {' '.join(args)})", flush=True)
    done = subprocess.run([sys.executable, "-m", "s3.cli", *args], cwd=folder, env=_env(), text=True,
                          capture_output=True)
    if done.returncode:
        raise RuntimeError(f"s3 {args[0]} exited with {done.returncode}: {done.stderr[-2000:]}")


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _prepared(folder: Path, fmt: str, inputs: list[str]) -> None:
    """`s3 data prepare FMT --input ... --out data/mine` then `s3 index build --corpus data/mine/corpus.jsonl --out
    indexes/mine` (the README's steps 1 and 2), unless the index of these very inputs is there already."""
    stamp = folder / "indexes" / "mine.inputs.json"
    want = {p: (folder / p).read_text(encoding="utf-8") for p in inputs}
    if stamp.is_file() and json.loads(stamp.read_text(encoding="utf-8")) == want and (folder / "indexes/mine").is_dir():
        return
    _s3(folder, "data", "prepare", fmt, "--input", *inputs, "--out", "data/mine")
    _s3(folder, "index", "build", "--corpus", "data/mine/corpus.jsonl", "--out", "indexes/mine")
    stamp.write_text(json.dumps(want), encoding="utf-8")


def prepare(work: Path, shared: Path, n_hotpot: int = 20, n_questions: int = 4) -> dict[str, Corpus]:
    """The two user folders under `work`, prepared and indexed the README's way (skipped when already done)."""
    from s3core.corpus import iter_corpus

    titled = work / "titled"
    rows = [json.loads(line) for line in
            (shared / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl").read_text(encoding="utf-8").splitlines()[:n_hotpot]]
    _write_jsonl(titled / "mine" / "hotpotqa_dev_slice.jsonl", rows)  # the user's own raw HotpotQA file
    (titled / "config.toml").write_text(TITLED_CONFIG, encoding="utf-8")
    _prepared(titled, "hotpotqa", ["mine/hotpotqa_dev_slice.jsonl"])
    out = {"titled": Corpus("titled", titled, [r["question"] for r in rows[:n_questions]],
                            {d.id: d.text for d in iter_corpus(titled / "data" / "mine" / "corpus.jsonl")})}

    untitled = work / "untitled"
    _write_jsonl(untitled / "mine" / "corpus.jsonl", [{"id": i, "contents": c} for i, c in MANUAL])
    _write_jsonl(untitled / "mine" / "questions.jsonl", [
        {"id": f"q{n + 1}", "question": q, "golden_answers": [a]} for n, (q, a) in enumerate(MANUAL_QUESTIONS)])
    _prepared(untitled, "flashrag", ["mine/questions.jsonl", "mine/corpus.jsonl"])
    out["untitled"] = Corpus("untitled", untitled, [q for q, _ in MANUAL_QUESTIONS[:n_questions]], dict(MANUAL),
                             titled=False)
    return out


# ---- the flow, in a fresh process (python -m experiments.rag_flow QUESTIONS_JSON ROUNDS, cwd = the user's folder)


def flow(questions: list[str], rounds: int, launched_at: float) -> dict[str, Any]:
    """The README's block, as written, then the chain over every question `rounds` times; seconds and documents."""
    t_enter = time.time()
    from langchain_core.callbacks import BaseCallbackHandler

    from s3 import build_searcher, load_config
    from searcher.integrations.langchain import S3Retriever

    class Seen(BaseCallbackHandler):
        """The documents the retriever handed to the rest of the chain."""

        def __init__(self) -> None:
            self.documents: list[Any] = []

        def on_retriever_end(self, documents: Any, **kwargs: Any) -> None:
            self.documents = list(documents)

    def format_docs(docs: Any) -> str:
        return "\n\n".join(d.page_content for d in docs)

    t_imported = time.time()
    cfg = load_config()
    built = build_searcher(cfg, index=Path("indexes/mine"))
    why = built.why
    searcher = built.searcher
    t_built = time.time()
    result = searcher.search_one(questions[0])
    t_first = time.time()
    first = [{"id": d.id, "title": d.title, "score": d.score} for d in result.documents]

    chain = S3Retriever(searcher=searcher) | format_docs
    asked: dict[str, Any] = {}
    warm: list[float] = []
    search_one_warm: list[float] = []
    for r in range(rounds):
        for n, q in enumerate(questions):
            if r == 0 and n:  # the README's search_one once a question (the first question's was the cold call)
                t = time.perf_counter()
                result = searcher.search_one(q)
                search_one_warm.append(time.perf_counter() - t)
            seen = Seen()
            t = time.perf_counter()
            context = chain.invoke(q, config={"callbacks": [seen]})
            warm.append(time.perf_counter() - t)
            if r == 0:
                hits = first if n == 0 else [{"id": d.id, "title": d.title, "score": d.score} for d in result.documents]
                asked[q] = {
                    "question": q,
                    "search_one": hits,
                    "chain": [{"id": d.id, "metadata_id": d.metadata.get("id"), "title": d.metadata.get("title"),
                               "turn": d.metadata.get("turn"), "page_content": d.page_content}
                              for d in seen.documents],
                    "context": context,
                    "context_is_format_docs": context == format_docs(seen.documents),
                    "chain_ids_are_search_one_ids": [d.id for d in seen.documents] == [h["id"] for h in hits],
                }
    threads: dict[str, Any] = {"reading.threads": getattr(getattr(built.cfg.searcher, "reading", None), "threads",
                                                          None),
                               **{k: os.environ.get(k) for k in THREADS_ENV}}
    if "torch" in sys.modules:
        threads["torch"] = sys.modules["torch"].get_num_threads()
    return {"why": why, "kind": getattr(searcher, "kind", None), "threads": threads,
            "cold_s": round(t_first - launched_at, 3), "startup_s": round(t_enter - launched_at, 3),
            "import_s": round(t_imported - t_enter, 3), "build_s": round(t_built - t_imported, 3),
            "first_search_s": round(t_first - t_built, 3), "warm_s": [round(x, 4) for x in warm],
            "search_one_warm_s": [round(x, 4) for x in search_one_warm], "questions": list(asked.values())}


def launch(corpus: Corpus, label: str, rounds: int = 1, timeout_s: float = 900) -> dict[str, Any]:
    """One fresh process of the flow in the corpus's folder; its record, with what the parent saw around it."""
    load_before = os.getloadavg()
    launched_at = time.time()
    done = subprocess.run([sys.executable, "-m", "experiments.rag_flow", json.dumps(corpus.questions), str(rounds)],
                          cwd=corpus.folder, env={**_env(), LAUNCHED_AT: repr(launched_at)}, text=True,
                          capture_output=True, timeout=timeout_s)
    wall = time.time() - launched_at
    if done.returncode:
        raise RuntimeError(f"the flow failed on {corpus.name} ({done.returncode}): {done.stderr[-3000:]}")
    rec = json.loads(done.stdout.strip().splitlines()[-1])
    for q in rec["questions"]:
        for d in q["chain"]:
            d["users_id"] = d["id"] in corpus.texts
            d["text_is_corpus_text"] = corpus.texts.get(d["id"]) == d["page_content"]
    rec.update(corpus=corpus.name, label=label, wall_s=round(wall, 3), load_before=[round(x, 2) for x in load_before],
               load_after=[round(x, 2) for x in os.getloadavg()], cpus=os.cpu_count(),
               warm_median_s=round(statistics.median(rec["warm_s"]), 4),
               started=time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(launched_at)))
    return rec


# ---- summaries (pure: tests/unit/test_rag_flow_logic.py)


def _spread(xs: list[float]) -> list[float]:
    return [round(statistics.median(xs), 4), round(min(xs), 4), round(max(xs), 4)]


def summary(launches: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per corpus and label (in order of first appearance): launches, cold seconds and the launch's median warm
    call, each as [median, min, max] over launches."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for rec in launches:
        out.setdefault(rec["corpus"], {}).setdefault(rec["label"], {"runs": []})["runs"].append(rec)
    for labels in out.values():
        for label, cell in labels.items():
            runs = cell.pop("runs")
            labels[label] = {"launches": len(runs), "cold_s": _spread([r["cold_s"] for r in runs]),
                             "warm_s": _spread([r["warm_median_s"] for r in runs]),
                             "warm_calls": sum(len(r["warm_s"]) for r in runs)}
    return out


def documents(launches: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per corpus: the `built.why` lines seen, and per question the documents of its first launch, with whether every
    launch returned the same ids and texts."""
    out: dict[str, dict[str, Any]] = {}
    for rec in launches:
        c = out.setdefault(rec["corpus"], {"why": [], "questions": {}})
        if rec["why"] not in c["why"]:
            c["why"].append(rec["why"])
        for q in rec["questions"]:
            got = [(d["id"], d["page_content"]) for d in q["chain"]]
            if q["question"] not in c["questions"]:
                c["questions"][q["question"]] = {**q, "same_in_every_launch": True, "_key": got}
            elif c["questions"][q["question"]]["_key"] != got:
                c["questions"][q["question"]]["same_in_every_launch"] = False
    for c in out.values():
        for q in c["questions"].values():
            q.pop("_key")
    return out


def _cell(text: str, limit: int | None = None) -> str:
    """A text in one markdown table cell: its newlines shown as ⏎, pipes escaped, cut after `limit` characters."""
    shown = text if limit is None or len(text) <= limit else text[:limit] + f"… ({len(text)} chars)"
    return shown.replace("\\", "\\\\").replace("|", "\\|").replace("\r", "").replace("\n", " ⏎ ")


def _yes(x: bool) -> str:
    return "yes" if x else "**no**"


def markdown(results: dict[str, Any], text_limit: int = 160) -> str:
    """The results folder's README.md: per corpus what `built.why` said and the documents as the chain saw them, then
    the times (corpus x cold / warm x label)."""
    launches = results["launches"]
    lines = ["# The README's RAG flow, re-run as written (issue 79)", "",
             "Written by `benchmarks/rag_flow.py` (logic: `experiments/rag_flow.py`); raw records in results.json. "
             "Each launch is a fresh process in the user's folder running README section \"1. Plug a searcher into "
             "your RAG app\" as written: `load_config()`, `build_searcher(cfg, index=Path(\"indexes/mine\"))`, "
             "`built.why`, `searcher.search_one(q)`, then `S3Retriever(searcher=searcher) | format_docs`.", ""]
    for name, c in documents(launches).items():
        lines += [f"## {name} corpus", "", "`built.why`: " + " / ".join(f"`{w}`" for w in c["why"]), "",
                  "| question | # | id | metadata title | turn | page_content, as format_docs passes it (⏎ = newline) | the "
                  "user's id | = the corpus text | same every launch |", "| --- | ---: | --- | --- | ---: | --- | --- "
                  "| --- | --- |"]
        for q, row in c["questions"].items():
            if not row["context_is_format_docs"]:
                lines.append(f"| {_cell(q)} | | | | | **the chain's context differs from format_docs of its "
                             "documents** | | | |")
            if not row.get("chain_ids_are_search_one_ids", True):
                lines.append(f"| {_cell(q)} | | | | | **the chain's ids differ from search_one's: "
                             f"{', '.join(h['id'] for h in row['search_one'])}** | | | |")
            for n, d in enumerate(row["chain"], 1):
                lines.append(f"| {_cell(q) if n == 1 else ''} | {n} | `{_cell(d['id'])}` | {_cell(d['title'] or '')} "
                             f"| {d.get('turn', '')} | {_cell(d['page_content'], text_limit)} "
                             f"| {_yes(d.get('users_id', False))} | {_yes(d.get('text_is_corpus_text', False))} "
                             f"| {_yes(row['same_in_every_launch'])} |")
        lines.append("")
    lines += ["## Times", "",
              "Seconds, median [min, max] over launches. Cold: from launching the process to the first "
              "`search_one` returned (interpreter, imports, `load_config`, `build_searcher`, one search). Warm: a "
              "launch's median chain call after that (`chain.invoke(q)`: every question, each after its README "
              "`search_one(q)`, then again in any further `--rounds`). Turn: the search turn that admitted the "
              "document (0 = begin-with-search).", "",
              "| corpus | label | launches | cold s | warm s (calls) |", "| --- | --- | ---: | ---: | ---: |"]
    for name, labels in summary(launches).items():
        for label, s in labels.items():
            cold, warm = s["cold_s"], s["warm_s"]
            lines.append(f"| {name} | {label} | {s['launches']} | {cold[0]:.2f} [{cold[1]:.2f}, {cold[2]:.2f}] | "
                         f"{warm[0]:.3f} [{warm[1]:.3f}, {warm[2]:.3f}] ({s['warm_calls']}) |")
    return "\n".join(lines) + "\n"


def _child() -> None:
    questions = json.loads(sys.argv[1])
    rounds = int(sys.argv[2])
    rec = flow(questions, rounds, float(os.environ.get(LAUNCHED_AT, time.time())))
    sys.stdout.write("\n" + json.dumps(rec, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    _child()
