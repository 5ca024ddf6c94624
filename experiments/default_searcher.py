"""Which searcher runs when none is named, and how long it takes (issue 78): `s3 search` and `s3 serve` as a user runs
them, on a titled corpus, the same corpus without titles, and the hotpotqa_dev500 index.

    corpora(work, shared) -> {"readme_titled": index, "readme_untitled": index, "dev500": index}, questions
    launch(index, questions, n_warm, busy) -> one launch: cold `s3 search` (load included) and warm `/search` seconds
    summary(launches) -> per corpus and condition, the median and range over launches

Cold: `s3 search --index IDX --json Q` as a subprocess, wall time, the searcher line it prints. Warm: `s3 serve
--index IDX` on loopback, `n_warm` questions POSTed to /search one at a time after one untimed request, each timed
end to end (HTTP included); /health's `searcher` block says what ran. Busy: beside a competing 2-thread job (a torch
matmul loop, started before the launch), the load this project's machine facts warn about.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

S3 = [sys.executable, "-m", "s3.cli"]

# the README's corpus (its "Try it" block), as a user indexes it; untitled: the same lines without their titles
README_DOCS = [
    ("earthship", "Earthship", "An Earthship is a passive solar house made of natural and recycled materials such as "
     "tyres filled with earth. The architect Michael Reynolds invented the Earthship in the 1970s in New Mexico."),
    ("garbage-warrior", "Garbage Warrior", "Garbage Warrior is a 2007 documentary film about the architect Michael "
     "Reynolds and his Earthship houses. It was directed by Oliver Hodge."),
    ("michael-reynolds", "Michael Reynolds (architect)", "Michael Reynolds is an American architect based in Taos, New "
     "Mexico, known for the Earthship."),
    ("kant", "Immanuel Kant", "Immanuel Kant was a German philosopher born in 1724 in Königsberg, Prussia. He wrote the "
     "Critique of Pure Reason."),
    ("critique", "Critique of Pure Reason", "The Critique of Pure Reason is a book by the German philosopher Immanuel "
     "Kant, first published in 1781."),
]
README_QUESTIONS = ["Who directed the film about the inventor of the Earthship?",
                    "Where was the author of Critique of Pure Reason born?"]
BUSY = "import torch\ntorch.set_num_threads(2)\na = torch.randn(768, 768)\nwhile True:\n    a = (a @ a).tanh()\n"


def _env() -> dict[str, str]:
    return {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _index(corpus: Path, out: Path) -> Path:
    if not (out / "index.json").is_file():
        subprocess.run([*S3, "index", "build", "--corpus", str(corpus), "--out", str(out)], check=True, env=_env(),
                       capture_output=True)
    return out


def corpora(work: Path, shared: Path) -> tuple[dict[str, Path], dict[str, list[str]]]:
    """The three indexes (built once under `work`) and the questions asked of each."""
    from dataprep.prepare import prepare
    from s3core.corpus import read_questions, write_corpus
    from s3core.types import Document

    out: dict[str, Path] = {}
    for name, titled in (("readme_titled", True), ("readme_untitled", False)):
        folder = work / name
        folder.mkdir(parents=True, exist_ok=True)
        write_corpus(folder / "corpus.jsonl", [Document(id=i, title=t if titled else "", text=x)
                                               for i, t, x in README_DOCS])
        out[name] = _index(folder / "corpus.jsonl", folder / "index")
    data = work / "dev500" / "data"
    if not (data / "questions.jsonl").is_file():
        prepare("hotpotqa", [shared / "hotpotqa_dev500" / "hotpotqa_dev_500.jsonl"], data)
    out["dev500"] = _index(data / "corpus.jsonl", work / "dev500" / "index")
    dev = [q.question for q in read_questions(data / "questions.jsonl")]
    return out, {"readme_titled": README_QUESTIONS, "readme_untitled": README_QUESTIONS, "dev500": dev}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cold(index: Path, question: str) -> dict[str, Any]:
    """`s3 search --json` in a fresh process: wall seconds and the searcher line it printed."""
    t0 = time.perf_counter()
    r = subprocess.run([*S3, "search", "--index", str(index), "--json", question], env=_env(), capture_output=True,
                       text=True, timeout=900)
    seconds = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"s3 search failed ({r.returncode}): {r.stderr[-2000:]}")
    line = next((x for x in r.stderr.splitlines() if x.startswith("searcher: ")), "")
    docs = json.loads(r.stdout)["documents"]
    return {"seconds": round(seconds, 3), "searcher": line.removeprefix("searcher: "),
            "documents": [{"id": d["id"], "title": d["title"], "text": d["text"][:80]} for d in docs]}


def warm(index: Path, questions: list[str]) -> dict[str, Any]:
    """`s3 serve` on loopback; one untimed request, then each question's /search seconds, one at a time."""
    import httpx

    port = _free_port()
    proc = subprocess.Popen([*S3, "serve", "--index", str(index), "--port", str(port)], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.perf_counter()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"s3 serve exited: {proc.stderr.read()[-2000:] if proc.stderr else ''}")
            try:
                health = httpx.get(f"{url}/health", timeout=5).json()
                break
            except httpx.HTTPError:
                time.sleep(0.5)
        load = time.perf_counter() - t0
        with httpx.Client(timeout=600) as client:
            client.post(f"{url}/search", json={"question": questions[0]}).raise_for_status()
            times = []
            for q in questions:
                t = time.perf_counter()
                client.post(f"{url}/search", json={"question": q}).raise_for_status()
                times.append(time.perf_counter() - t)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"load_s": round(load, 2), "searcher": health.get("searcher"), "seconds": [round(x, 3) for x in times],
            "p50": round(statistics.median(times), 3)}


def launch(indexes: dict[str, Path], questions: dict[str, list[str]], n_warm: int, busy: bool) -> dict[str, Any]:
    """One launch of every corpus, quiet or beside the competing job."""
    job = subprocess.Popen([sys.executable, "-c", BUSY]) if busy else None
    try:
        if job is not None:
            time.sleep(5)
        out: dict[str, Any] = {"busy": busy, "corpora": {}}
        for name, index in indexes.items():
            qs = questions[name]
            out["corpora"][name] = {"cold": cold(index, qs[0]), "warm": warm(index, qs[:n_warm])}
        out["load_average"] = os.getloadavg()[0]
        return out
    finally:
        if job is not None:
            job.terminate()
            job.wait(timeout=30)


def summary(launches: list[dict[str, Any]]) -> dict[str, Any]:
    """Per condition and corpus: the searcher that ran, and the median (range) over launches of the cold seconds and
    the warm /search p50."""
    out: dict[str, Any] = {}
    for cond in ("quiet", "busy"):
        runs = [x for x in launches if x["busy"] == (cond == "busy")]
        if not runs:
            continue
        for name in runs[0]["corpora"]:
            colds = [r["corpora"][name]["cold"]["seconds"] for r in runs]
            p50s = [r["corpora"][name]["warm"]["p50"] for r in runs]
            out.setdefault(cond, {})[name] = {
                "searcher": runs[0]["corpora"][name]["cold"]["searcher"], "launches": len(runs),
                "cold_s": [statistics.median(colds), min(colds), max(colds)],
                "warm_p50_s": [statistics.median(p50s), min(p50s), max(p50s)]}
    return out


def markdown(summ: dict[str, Any]) -> str:
    lines = ["| condition | corpus | searcher that ran (why) | cold `s3 search` s, median (range) | warm /search p50 s, "
             "median (range) |", "| --- | --- | --- | ---: | ---: |"]
    for cond, rows in summ.items():
        for name, r in rows.items():
            c, w = r["cold_s"], r["warm_p50_s"]
            lines.append(f"| {cond} ({r['launches']} launches) | {name} | {r['searcher']} | {c[0]:.2f} ({c[1]:.2f}-"
                         f"{c[2]:.2f}) | {w[0]:.3f} ({w[1]:.3f}-{w[2]:.3f}) |")
    return "\n".join(lines) + "\n"
