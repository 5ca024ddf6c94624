"""`s3 report RUN_DIR`: a static HTML trajectory browser of one `s3 eval` run (searcher or Search-R1 mode).

One self-contained file, RUN_DIR/report/index.html (or --out): the data is embedded as JSON and the plots as data
URIs, so it opens from file:// with no server and no fetch. At the top, the run's summary (GenAcc, behaviour rates
from eval/behavior.py) and plots; below, a filterable list of questions (outcome correct / wrong / failed, dataset,
search turns, text); opening one shows the question, gold answers and gold paragraphs, each turn's query, the
retrieved documents with gold ones marked and selected ones ticked, the stop decision and the policy's own text,
then the generator's answer and the judge's verdict.
"""

from __future__ import annotations

import base64
import html
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.analysis import RunData, S3Analysis, _fmt, analyze_s3, dataset_rebuild_hint, load_run, plot_s3
from s3core.corpus import iter_corpus
from s3core.errors import S3Error

log = logging.getLogger("s3.report")

__all__ = ["Report", "build_report", "build_report_data", "missing_texts_hint", "summary_lines", "write_report"]

SNIPPET = 360  # characters of a document's text kept in the page


def _outcome(row: dict[str, Any] | None) -> str:
    if row is None or row.get("error"):
        return "failed"
    g = (row.get("metrics") or {}).get("genacc")
    return "failed" if g is None else "correct" if g >= 1.0 else "wrong"


def _verdict(row: dict[str, Any] | None) -> str:
    if row is None:
        return "no row"
    m = row.get("metrics") or {}
    if row.get("error"):
        return f"missing ({row['error']})"
    if m.get("judge") is None:
        return ("span check: a gold answer is in the answer (judge not asked)" if m.get("span") == 1.0
                else "not judged")
    return "judge: correct" if m["judge"] >= 1.0 else "judge: wrong"


def _doc_texts(run: RunData, ids: set[str]) -> dict[str, tuple[str, str]]:
    """(title, snippet) of the ids: from the dataset's corpus.jsonl when it is there, else from the run's index (its
    doc store), else titles only from the trajectories (snippet "")."""
    out: dict[str, tuple[str, str]] = {}
    corpus = run.dataset_dir / "corpus.jsonl" if run.dataset_dir else None
    if corpus is not None and corpus.is_file():
        for d in iter_corpus(corpus, check_unique=False):
            if d.id in ids:
                out[d.id] = (d.title or "", d.text[:SNIPPET])
    else:
        out.update(_index_texts(run, ids))
    for row in run.contexts.values():
        for d in row.get("documents") or []:
            if d.get("id") in ids and d["id"] not in out:
                out[d["id"]] = (d.get("title") or "", "")
    return out


def _index_texts(run: RunData, ids: set[str]) -> dict[str, tuple[str, str]]:
    """Texts from the run's retrieval index (run.json's, else RUN_DIR/../index) when it is there and can be read."""
    from eval.analysis import index_dir_of

    index = index_dir_of(run)
    if index is None or not ids:
        return {}
    try:
        from searcher.build import build_retriever
        from searcher.config import RetrieverConfig

        backend = str((run.config.get("retriever") or {}).get("backend") or "bm25")
        getter = getattr(build_retriever(RetrieverConfig(backend=backend), index), "get", None)  # type: ignore[arg-type]
        if getter is None:
            return {}
        order = sorted(ids)
        return {i: (d.title or "", d.text[:SNIPPET]) for i, d in zip(order, getter(order), strict=True) if d is not None}
    except (S3Error, ValueError, OSError) as e:
        log.warning(f"warning: {run.dir}: the index {index} could not be read for document texts ({e})")
        return {}


def missing_texts_hint(run: RunData) -> str:
    """Why documents have no text, and the command that fixes it (eval/analysis.py `dataset_rebuild_hint`)."""
    if run.dataset_dir is None:
        return ("no dataset folder was found (run.json's `dataset.dir`, RUN_DIR/../data): pass --dataset DIR, a folder "
                "`s3 data prepare` wrote, with its corpus.jsonl")
    return dataset_rebuild_hint(run.dataset_dir, "corpus.jsonl")


def build_report_data(run: RunData, analysis: S3Analysis | None, summary_lines: list[str]) -> dict[str, Any]:
    """The JSON the page embeds: run info, questions (with steps) and the documents they name."""
    order = list(run.rows) + [q for q in run.contexts if q not in run.rows]
    beh = {b.qid: b for b in analysis.behaviors} if analysis else {}
    questions, ids = [], set()
    for q in order:
        row, ctx = run.rows.get(q), run.contexts.get(q) or {}
        gold = sorted(run.gold.get(q, set()))
        steps = []
        for s in ctx.get("steps") or []:
            steps.append({"turn": s.get("turn"), "query": s.get("query"), "retrieved": s.get("retrieved_ids") or [],
                          "selected": s.get("selected_ids") or [], "stop": s.get("search_complete"),
                          "invalid": s.get("invalid_reason"), "fallback": bool(s.get("selection_fallback")),
                          "text": (s.get("policy_text") or "")[:1200]})
            ids.update(steps[-1]["retrieved"])
            ids.update(steps[-1]["selected"])
        final = [d["id"] for d in ctx.get("documents") or []] or list((row or {}).get("context_ids") or [])
        ids.update(final)
        ids.update(gold)
        b = beh.get(q)
        questions.append({
            "id": q, "question": (row or ctx).get("question") or "", "gold_answers": (row or {}).get("golden_answers") or [],
            "dataset": run.datasets.get(q, run.dir.parent.name), "outcome": _outcome(row),
            "answer": (row or {}).get("answer"), "verdict": _verdict(row), "error": (row or {}).get("error"),
            "turns": ctx.get("turns", (row or {}).get("turns")) or 0, "gold": gold, "final": final, "steps": steps,
            "support_recall": (row or {}).get("support_recall"),
            "behavior": None if b is None else {"redundant": b.redundant, "stopped": b.stopped,
                                                "premature": b.premature, "search_turns": b.search_turns},
        })
    docs = {i: list(v) for i, v in _doc_texts(run, ids).items()}
    with_text = sum(1 for v in docs.values() if v[1])
    texts = {"documents": len(ids), "with_text": with_text,
             "hint": missing_texts_hint(run) if with_text < len(ids) else None}
    return {"run": run.name, "method": run.method, "max_turns": run.max_turns, "summary": summary_lines,
            "questions": questions, "docs": docs, "texts": texts}


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:12px 20px}header h1{font-size:18px;margin:0}
main{display:grid;grid-template-columns:minmax(320px,38%) 1fr;gap:14px;padding:14px 20px}
section.summary{grid-column:1/3;background:#fff;border-radius:8px;padding:10px 16px;box-shadow:0 1px 2px #0002}
section.summary img{max-width:100%;margin-top:6px}
.filters{display:flex;gap:8px;flex-wrap:wrap;margin-bottom:8px}.filters select,.filters input{padding:4px}
#list{background:#fff;border-radius:8px;box-shadow:0 1px 2px #0002;max-height:75vh;overflow:auto}
.qrow{padding:6px 10px;border-bottom:1px solid #eee;cursor:pointer}.qrow:hover,.qrow.open{background:#eef3ff}
.tag{display:inline-block;font-size:11px;border-radius:9px;padding:0 7px;margin-right:4px;background:#e4e7ec}
.correct{background:#d5f5dd}.wrong{background:#fde2e1}.failed{background:#fff1c2}
#detail{background:#fff;border-radius:8px;box-shadow:0 1px 2px #0002;padding:10px 16px;max-height:75vh;overflow:auto}
.turn{border-left:3px solid #8aa4d6;margin:10px 0;padding:4px 10px}.doc{margin:3px 0;padding:3px 6px;border-radius:4px}
.doc.gold{background:#fff6d6;border:1px solid #e2c160}.doc .sel{font-weight:600;color:#176b2c}
pre{white-space:pre-wrap;background:#f3f4f6;padding:6px;border-radius:4px;font-size:12px}
"""

_JS = r"""
const D = JSON.parse(document.getElementById('data').textContent);
const $ = s => document.querySelector(s);
const esc = s => String(s ?? '').replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
function fill(sel, vals){ for (const v of vals){ const o=document.createElement('option'); o.value=o.textContent=v; $(sel).appendChild(o);} }
fill('#f-dataset', [...new Set(D.questions.map(q => q.dataset))].sort());
fill('#f-turns', [...new Set(D.questions.map(q => String(q.turns)))].sort());
function shown(){
  const o=$('#f-outcome').value, d=$('#f-dataset').value, t=$('#f-turns').value, x=$('#f-text').value.toLowerCase();
  return D.questions.filter(q => (!o || q.outcome===o) && (!d || q.dataset===d) && (!t || String(q.turns)===t)
    && (!x || q.question.toLowerCase().includes(x) || q.id.toLowerCase().includes(x)));
}
function renderList(){
  const qs = shown();
  $('#count').textContent = qs.length + ' of ' + D.questions.length + ' questions';
  $('#list').innerHTML = qs.map(q => `<div class="qrow" data-id="${esc(q.id)}"><span class="tag ${q.outcome}">${q.outcome}</span>`
    + `<span class="tag">${q.turns} turn${q.turns === 1 ? '' : 's'}</span><span class="tag">${esc(q.dataset)}</span><br>${esc(q.question)}</div>`).join('');
  for (const el of document.querySelectorAll('.qrow')) el.onclick = () => openQ(el.dataset.id);
}
function doc(id, gold, selected){
  const [title, text] = D.docs[id] || [id, ''];
  const g = gold.has(id), s = selected.has(id);
  return `<div class="doc${g ? ' gold' : ''}" data-doc="${esc(id)}">${s ? '<span class="sel">&#10003; selected</span> ' : ''}`
    + `${g ? '<span class="tag">gold</span>' : ''}<b>${esc(title)}</b> <small>${esc(id)}</small><br><small>${esc(text)}</small></div>`;
}
function openQ(id){
  const q = D.questions.find(x => x.id === id); if (!q) return;
  for (const el of document.querySelectorAll('.qrow')) el.classList.toggle('open', el.dataset.id === id);
  const gold = new Set(q.gold);
  let h = `<h2 id="d-question">${esc(q.question)}</h2><p><span class="tag ${q.outcome}" id="d-outcome">${q.outcome}</span>`
    + `<small>${esc(q.id)} &middot; ${esc(q.dataset)}</small></p><p><b>Gold answers:</b> <span id="d-gold">${esc(q.gold_answers.join(' | '))}</span></p>`;
  if (q.gold.length) h += `<details open><summary><b>Gold paragraphs (${q.gold.length})</b></summary>${q.gold.map(i => doc(i, gold, new Set(q.final))).join('')}</details>`;
  for (const s of q.steps){
    const sel = new Set(s.selected);
    const what = s.query ? `query: <q class="query">${esc(s.query)}</q>` : (s.turn === 0 ? 'no search yet' : 'no query');
    const stop = s.stop === true ? 'stop' : s.stop === false ? 'continue' : '-';
    h += `<div class="turn" data-turn="${s.turn}"><b>Turn ${s.turn}</b> &middot; ${what} &middot; decision: <b class="stop">${stop}</b>`
      + (s.invalid ? ` &middot; <span class="tag wrong">invalid: ${esc(s.invalid)}</span>` : '')
      + (s.fallback ? ' &middot; <span class="tag">no selection: whole window kept</span>' : '')
      + `<div>${s.retrieved.map(i => doc(i, gold, sel)).join('') || '<small>nothing retrieved</small>'}</div>`
      + (s.text ? `<details><summary>what the policy wrote</summary><pre>${esc(s.text)}</pre></details>` : '') + '</div>';
  }
  const b = q.behavior;
  if (b) h += `<p><small>search turns ${b.search_turns}; redundant ${b.redundant}; stopped early ${b.stopped}`
    + (b.premature === null ? '' : `; premature stop ${b.premature}`) + `; support recall ${q.support_recall ?? '-'}</small></p>`;
  h += `<h3>Answer</h3><p id="d-answer">${esc(q.answer ?? '(none)')}</p><p id="d-verdict"><b>${esc(q.verdict)}</b></p>`;
  $('#detail').innerHTML = h;
}
for (const s of ['#f-outcome','#f-dataset','#f-turns']) $(s).onchange = renderList;
$('#f-text').oninput = renderList;
renderList();
"""


@dataclass
class Report:
    """What `s3 report` wrote: the page, and how many of the documents it names show their text (the rest show a
    title or an id only; `hint` then says why and how to fix it)."""

    path: Path
    documents: int
    with_text: int
    hint: str | None


def write_report(run: RunData, analysis: S3Analysis | None, out: Path, plots: list[Path], summary_lines: list[str]) -> Report:
    """Write the browser page (out/index.html)."""
    out.mkdir(parents=True, exist_ok=True)
    data = build_report_data(run, analysis, summary_lines)
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")  # no "</script>" inside the data
    imgs = "".join(f'<img alt="{html.escape(p.name)}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
                   for p in plots if p.is_file())
    summary = "".join(f"<li>{html.escape(s)}</li>" for s in summary_lines)
    t = data["texts"]
    if t["hint"]:
        summary += (f'<li id="missing-texts" class="failed">{t["documents"] - t["with_text"]} of {t["documents"]} '
                    f"documents show no text: {html.escape(t['hint'])}</li>")
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>s3 report: {html.escape(run.name)}</title>
<style>{_CSS}</style></head><body><header><h1>Trajectories of {html.escape(run.name)}</h1>
<small>method {html.escape(run.method)} &middot; {len(data['questions'])} questions &middot; up to {run.max_turns} turns</small></header>
<main><section class="summary" id="summary"><ul>{summary}</ul>{imgs}</section>
<div><div class="filters"><select id="f-outcome"><option value="">any outcome</option><option>correct</option>
<option>wrong</option><option>failed</option></select><select id="f-dataset"><option value="">any dataset</option></select>
<select id="f-turns"><option value="">any turns</option></select><input id="f-text" placeholder="search questions">
<span id="count"></span></div><div id="list"></div></div>
<div id="detail"><p>Open a question on the left.</p></div></main>
<script type="application/json" id="data">{blob}</script><script>{_JS}</script></body></html>
"""
    path = out / "index.html"
    path.write_text(page)
    if t["hint"]:
        log.warning(f"warning: {t['documents'] - t['with_text']} of {t['documents']} documents in the report show no "
                    f"text: {t['hint']}")
    return Report(path=path, documents=t["documents"], with_text=t["with_text"], hint=t["hint"])


def summary_lines(a: Any) -> list[str]:
    """The few numbers at the top of the page (an S3Analysis or an eval/oversearch.py R1Analysis)."""
    if a is None:
        return []
    s = a.summary
    if isinstance(a, S3Analysis):
        g = s.get("genacc") or {}
        left_out = (f"; {s['rows_without_trajectory']} of the run's {s['rows']} results rows have no trajectory: "
                    f"the numbers below are over the {s['questions']} questions with one"
                    if s.get("rows_without_trajectory") else "")
        return [f"GenAcc {_fmt(g)} over {g.get('n', 0)} scored questions (95% bootstrap CI){left_out}",
                f"queries per question {_fmt(s.get('queries_per_question'))}; redundant turns "
                f"{_fmt(s.get('redundant_turn_rate'), True, with_n=True)}% of search turns; stops before the budget "
                f"{_fmt(s.get('stop_rate'), True, with_n=True)}% (with support missing "
                f"{_fmt(s.get('stop_missing_support_rate'), True, with_n=True)}% of the stops)",
                f"support recall {_fmt(s.get('support_recall'))}; selection precision "
                f"{_fmt(s.get('selection_precision'))}; invalid replies {_fmt(s.get('invalid_turn_rate'), True)}%"]
    return [f"{s['questions']} questions, {s['search_steps']} search steps, {s['non_search_steps']} non-search steps",
            f"under-search {_fmt(s['under_search_rate'], True)}% of answered non-search steps (wrong answers)"]


def build_report(run_dir: Path, out: Path, dataset_dir: Path | None = None) -> Report:
    """`s3 report`: read the run, analyse it (no model calls), plot, write out/index.html. Documents whose text
    cannot be found (no corpus.jsonl, no index) are counted and warned about, with the command that fixes it."""
    from eval.oversearch import analyze_search_r1

    run = load_run(run_dir, dataset_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots: list[Path] = []
    analysis: Any = None
    if run.method == "searcher" and run.contexts:
        analysis = analyze_s3(run)
        p = plot_s3([analysis], out / "behavior.png")
        plots += [p] if p else []
    elif run.method == "search_r1" and run.contexts:
        analysis = analyze_search_r1(run, None, None, None)
        p = analysis.plot(out)
        plots += [p] if p else []
    return write_report(run, analysis if isinstance(analysis, S3Analysis) else None, out, plots,
                        summary_lines(analysis))
