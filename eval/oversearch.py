"""Over-search and under-search of a Search-R1-mode run (Search Wisely, search-wisely-beta-grpo.md §2, Appendix A.1).

Steps: every reply of the policy is a step (the paper's step extraction, done here by the tag grammar instead of an
LLM): a *search step* is a reply with `<search>q</search>` whose query was run (its context c_t is the next window);
a *non-search step* is any other reply (an `<answer>`, or a reply with neither tag).

    over-search   a search step whose sub-query the policy answers the same from its own knowledge and the preceding
                  context as from the retrieved context. Two answers per step, both by the run's own policy: the
                  conversation up to and including the step's <think>, then "answer this query from your own
                  knowledge" (the paper's prompt, as a user turn), and the same with c_t inserted after the search;
                  the judge model says whether they agree (eval.accuracy's judge: is the context answer contained in
                  the memory answer). A step whose context answer is empty is unscored (None), not counted.
    under-search  a non-search step whose answer is wrong. The reference is the question's gold answer (the
                  paper asks a stronger model; the dataset's answers are stronger still) and correctness is the run's
                  own GenAcc (span check, then the judge). A non-search step with no answer is counted apart.

Rates carry percentile-bootstrap intervals over questions; both are split by the number of search steps of the
question, and searches are compared with annotated hops (MuSiQue, Bamboogle). `agreement` compares the judge's
verdicts with hand labels (a jsonl of {"key", "label"}).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eval.analysis import RunData, hop_table, hops_of
from eval.stats import ratio_ci
from s3core.errors import S3Error

__all__ = ["R1Analysis", "R1Step", "agreement", "analyze_search_r1", "extract_steps"]

MEMORY_PROMPT = ("I will use my own knowledge to answer this query and provide my answer to this query enclosed in "
                 "<query_answer> </query_answer> tags. Do not search. Query: {query}")
CONTEXT_PROMPT = ("I will use the information above to answer this query and provide my answer to this query enclosed "
                  "in <query_answer> </query_answer> tags. Query: {query}")
_QA = re.compile(r"<query_answer>(.*?)(?:</query_answer>|$)", re.S)
_THINK = re.compile(r"<think>(.*?)</think>", re.S)


@dataclass
class R1Step:
    """One reply of the Search-R1 policy, as a Search Wisely step."""

    qid: str
    index: int  # the reply's position in the trajectory (0 = the first reply)
    kind: str  # "search" | "answer" | "none"
    think: str
    query: str | None
    answer: str | None
    context_ids: list[str]
    searches_in_question: int = 0
    memory_answer: str | None = None
    context_answer: str | None = None
    over_search: bool | None = None  # search steps: the judge's verdict (None = unscored)
    correct: float | None = None  # answer steps: GenAcc of the answer

    @property
    def key(self) -> str:
        return f"{self.qid}#{self.index}"


def _parse(text: str) -> tuple[str, str | None, str | None]:
    from searcher.protocol import parse_search_r1_reply

    a = parse_search_r1_reply(text)
    return a.think or "", a.query, a.answer


def extract_steps(row: dict[str, Any]) -> list[R1Step]:
    """The replies of one Search-R1 contexts.jsonl row as steps. Step record i holds reply i (`policy_text`); a
    search in reply i was run when record i + 1 carries its query and window."""
    recs = row.get("steps") or []
    if recs and not any("policy_text" in r for r in recs):
        raise S3Error("this contexts.jsonl has no policy_text in its steps: it was written before `s3 eval` kept the "
                      "policy's replies; rerun the Search-R1 evaluation to analyse it")
    out = []
    for i, r in enumerate(recs):
        think, query, answer = _parse(r.get("policy_text") or "")
        nxt = recs[i + 1] if i + 1 < len(recs) else None
        ran = query is not None and nxt is not None and nxt.get("query") == query
        kind = "search" if ran else "answer" if answer is not None else "none"
        out.append(R1Step(qid=str(row["id"]), index=i, kind=kind, think=think, query=query if ran else None,
                          answer=answer, context_ids=list(nxt.get("retrieved_ids") or []) if ran and nxt else []))
    n = sum(1 for s in out if s.kind == "search")
    for s in out:
        s.searches_in_question = n
    return out


def _history(question: str, row: dict[str, Any], upto: int, render: Callable[[list[str]], str]) -> list[dict[str, str]]:
    """The chat the policy saw before reply `upto`: the Search-R1 prompt, earlier replies, their windows."""
    from searcher.protocol import build_search_r1_prompt

    msgs = [{"role": "user", "content": build_search_r1_prompt(question)}]
    recs = row.get("steps") or []
    for j in range(upto):
        msgs.append({"role": "assistant", "content": recs[j].get("policy_text") or ""})
        nxt = recs[j + 1] if j + 1 < len(recs) else None
        if nxt is not None and nxt.get("query"):
            msgs.append({"role": "user", "content": f"<information>{render(nxt.get('retrieved_ids') or [])}</information>"})
        elif nxt is not None:
            msgs.append({"role": "user", "content": "My previous action is invalid. Let me try again."})
    return msgs


def _qa(text: str | None) -> str | None:
    if text is None:
        return None
    m = _QA.search(text)
    ans = (m.group(1) if m else text).strip()
    ans = ans.split("\n")[0].strip()
    return ans or None


@dataclass
class R1Analysis:
    run: RunData
    steps: list[R1Step]
    summary: dict[str, Any]
    hops: dict[str, Any] | None
    agreement: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for key in ("over_search_rate", "under_search_rate", "under_search_rate_incl_no_answer"):
            r = self.summary.get(key) or {}
            ci = r.get("ci95") or [None, None]
            out.append({"run": self.run.name, "rate": key, "mean": r.get("mean"), "ci_lo": ci[0], "ci_hi": ci[1],
                        "n": r.get("n")})
        return out

    def markdown(self) -> list[str]:
        s = self.summary

        def pct(r: dict[str, Any] | None) -> str:
            if not r or r.get("mean") is None:
                return "-"
            ci = r.get("ci95") or [float("nan")] * 2
            return f"{100 * r['mean']:.1f} [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"

        lines = [f"## Search-R1 mode: {self.run.name}", "",
                 f"{s['questions']} questions, {s['search_steps']} search steps ({s['search_steps_scored']} scored), "
                 f"{s['non_search_steps']} non-search steps ({s['answer_steps']} with an answer, "
                 f"{s['no_answer_steps']} with neither tag).", "",
                 "| rate (%, 95% bootstrap CI over questions) | value | steps |", "| --- | ---: | ---: |",
                 f"| over-search (search steps answerable without the search) | {pct(s['over_search_rate'])} | "
                 f"{s['over_search_rate'].get('n')} |",
                 f"| under-search (answered non-search steps that are wrong) | {pct(s['under_search_rate'])} | "
                 f"{s['under_search_rate'].get('n')} |",
                 f"| under-search counting a non-search step without an answer as wrong | "
                 f"{pct(s['under_search_rate_incl_no_answer'])} | {s['under_search_rate_incl_no_answer'].get('n')} |",
                 "", "By the number of search steps in the question:", "",
                 "| searches | questions | over-search % (steps) | under-search % (steps) |",
                 "| ---: | ---: | ---: | ---: |"]
        for b in s["by_searches"]:
            o, u = b["over_search"], b["under_search"]
            lines.append(f"| {b['searches']} | {b['questions']} | {_pct1(o)} ({o['n']}) | {_pct1(u)} ({u['n']}) |")
        lines.append("")
        if self.hops:
            lines += ["Searches vs annotated hops (% of questions; correct by GenAcc):", "",
                      "| searches vs hops | correct % | incorrect % | sum % |", "| --- | ---: | ---: | ---: |"]
            for cat in ("less", "match", "more"):
                c = self.hops[cat]
                lines.append(f"| {cat} | {c['correct']:.1f} | {c['incorrect']:.1f} | {c['sum']:.1f} |")
            lines.append("")
        if self.agreement:
            a = self.agreement
            kappa = "undefined: one class only" if a["kappa"] is None else f"{a['kappa']:.2f}"
            lines += [f"Judge vs hand labels on {a['n']} steps: agreement {100 * a['agreement']:.1f}% "
                      f"(Cohen's kappa {kappa}); over-search steps {a['by_kind'].get('search', {})}, "
                      f"answer steps {a['by_kind'].get('answer', {})}.", ""]
        lines += [f"- {n}" for n in self.notes]
        lines.append("")
        return lines

    def plot(self, out: Path) -> Path | None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

        bs = self.summary["by_searches"]
        if not bs:
            return None
        fig, ax = plt.subplots(figsize=(6, 3.6))
        xs = [b["searches"] for b in bs]
        for key, lab, off in (("over_search", "over-search", -0.2), ("under_search", "under-search", 0.2)):
            ys = [b[key]["mean"] if b[key]["mean"] is not None else float("nan") for b in bs]
            ax.bar([x + off for x in xs], ys, 0.4, label=lab)
        ax.set_xlabel("search steps in the question")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # a count of steps: no 0.5, 1.5 ticks
        ax.set_ylabel("rate")
        ax.set_title(f"Search-R1: {self.run.name}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"search_r1_{re.sub(r'[^A-Za-z0-9]+', '_', self.run.name)}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        return path


def _pct1(r: dict[str, Any]) -> str:
    return "-" if r.get("mean") is None else f"{100 * r['mean']:.1f}"


def _rates(steps: list[R1Step], qids: list[str], n_resamples: int) -> dict[str, Any]:
    by_q: dict[str, list[R1Step]] = {q: [] for q in qids}
    for s in steps:
        by_q.setdefault(s.qid, []).append(s)
    qs = list(by_q)
    over_num = [sum(1 for s in by_q[q] if s.kind == "search" and s.over_search) for q in qs]
    over_den = [sum(1 for s in by_q[q] if s.kind == "search" and s.over_search is not None) for q in qs]
    und_num = [sum(1 for s in by_q[q] if s.kind == "answer" and s.correct == 0.0) for q in qs]
    und_den = [sum(1 for s in by_q[q] if s.kind == "answer" and s.correct is not None) for q in qs]
    all_num = [und_num[i] + sum(1 for s in by_q[q] if s.kind == "none") for i, q in enumerate(qs)]
    all_den = [und_den[i] + sum(1 for s in by_q[q] if s.kind == "none") for i, q in enumerate(qs)]
    kw = {"n_resamples": n_resamples}
    out = {"over_search_rate": ratio_ci(over_num, over_den, **kw), "under_search_rate": ratio_ci(und_num, und_den, **kw),
           "under_search_rate_incl_no_answer": ratio_ci(all_num, all_den, **kw)}
    out["over_search_rate"]["n"] = sum(over_den)
    out["under_search_rate"]["n"] = sum(und_den)
    out["under_search_rate_incl_no_answer"]["n"] = sum(all_den)
    return out


def analyze_search_r1(
    run: RunData,
    answer_subquery: Callable[[list[list[dict[str, str]]]], list[str | None]] | None,
    same_answer: Callable[[list[str | None], list[str | None]], list[bool | None]] | None,
    documents: Callable[[set[str]], dict[str, Any]] | None,
    *,
    n_resamples: int = 1000,
    max_search_steps: int | None = None,
    doc_chars: int = 400,
) -> R1Analysis:
    """The Search Wisely analysis of one `s3 eval --method search_r1` run.

    `answer_subquery(chats)`: the run's policy answering each chat (greedy); `same_answer(memory, context)`: the
    judge; `documents(ids)`: texts of retrieved ids. With `answer_subquery=None` only under-search is measured.
    `max_search_steps` bounds the policy / judge calls (the first steps in question order)."""
    from tqdm import tqdm

    if run.method != "search_r1":
        raise S3Error(f"{run.dir}: method {run.method!r}, not a Search-R1 run (`s3 eval --method search_r1`)")
    order = [q for q in run.rows if q in run.contexts]
    if not order:
        raise S3Error(f"{run.dir}: no trajectories (contexts.jsonl) to analyse")
    steps: list[R1Step] = []
    for q in order:
        st = extract_steps(run.contexts[q])
        g = (run.rows[q].get("metrics") or {}).get("genacc")
        for s in st:
            if s.kind == "answer":
                s.correct = None if g is None else float(g)
        steps += st
    notes = []
    searches = [s for s in steps if s.kind == "search"]
    todo = searches[:max_search_steps] if max_search_steps is not None else searches
    if answer_subquery is not None and same_answer is not None and documents is not None and todo:
        texts = documents({i for s in todo for i in s.context_ids})

        def render(ids: list[str]) -> str:
            return "\n".join(f"Doc {n + 1}(Title: {texts[i].title}) {texts[i].text[:doc_chars]}"
                             for n, i in enumerate(ids) if i in texts)

        bar = tqdm(total=len(todo), desc=f"over-search {run.name}", unit="step")
        for start in range(0, len(todo), 8):
            chunk = todo[start : start + 8]
            mem, ctx = [], []
            for s in chunk:
                row = run.contexts[s.qid]
                hist = _history(row["question"], row, s.index, render)
                mem.append([*hist, {"role": "assistant", "content": f"<think>{s.think}</think>"},
                            {"role": "user", "content": MEMORY_PROMPT.format(query=s.query)}])
                ctx.append([*hist, {"role": "assistant", "content": row["steps"][s.index].get("policy_text") or ""},
                            {"role": "user", "content": f"<information>{render(s.context_ids)}</information>\n\n"
                                                        + CONTEXT_PROMPT.format(query=s.query)}])
            outs = answer_subquery(mem + ctx)
            m_ans, c_ans = [_qa(o) for o in outs[: len(chunk)]], [_qa(o) for o in outs[len(chunk) :]]
            verdicts = same_answer(m_ans, c_ans)
            for s, m, c, v in zip(chunk, m_ans, c_ans, verdicts, strict=True):
                s.memory_answer, s.context_answer = m, c
                s.over_search = None if c is None else (False if m is None else v)
            bar.update(len(chunk))
        bar.close()
        if len(todo) < len(searches):
            notes.append(f"over-search measured on the first {len(todo)} of {len(searches)} search steps")
    summary: dict[str, Any] = {
        "questions": len(order), "search_steps": len(searches),
        "search_steps_scored": sum(1 for s in searches if s.over_search is not None),
        "non_search_steps": sum(1 for s in steps if s.kind != "search"),
        "answer_steps": sum(1 for s in steps if s.kind == "answer"),
        "no_answer_steps": sum(1 for s in steps if s.kind == "none"),
    }
    summary.update(_rates(steps, order, n_resamples))
    by: list[dict[str, Any]] = []
    counts = sorted({s.searches_in_question for s in steps})
    for n in counts:
        qs = [q for q in order if any(s.qid == q and s.searches_in_question == n for s in steps)]
        sub = [s for s in steps if s.searches_in_question == n]
        r = _rates(sub, qs, n_resamples)
        by.append({"searches": n, "questions": len(qs), "over_search": r["over_search_rate"],
                   "under_search": r["under_search_rate"]})
    summary["by_searches"] = by
    hop_items = []
    for q in order:
        h = hops_of(q, run.datasets.get(q, run.dir.parent.name))
        if h is not None:
            n = sum(1 for s in steps if s.qid == q and s.kind == "search")
            hop_items.append((n, h, (run.rows[q].get("metrics") or {}).get("genacc")))
    return R1Analysis(run=run, steps=steps, summary=summary, hops=hop_table(hop_items) if hop_items else None,
                      notes=notes)


def agreement(steps: Sequence[R1Step], labels_path: Path) -> dict[str, Any]:
    """The judge's verdicts vs hand labels: {"n", "agreement", "kappa" (None when undefined), "by_kind"}. A label row is {"key": "qid#i",
    "label": true|false} where the label answers the judge's question for that step (search step: the two answers
    agree = over-search; answer step: the answer is correct)."""
    by_key = {s.key: s for s in steps}
    pairs: list[tuple[str, bool, bool]] = []
    for n, line in enumerate(labels_path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            key, label = str(obj["key"]), obj["label"]
        except (ValueError, KeyError, TypeError) as e:
            raise S3Error(f"{labels_path}:{n}: expected {{\"key\": \"qid#i\", \"label\": true|false}} ({e})") from None
        s = by_key.get(key)
        if s is None or not isinstance(label, bool):
            raise S3Error(f"{labels_path}:{n}: {key!r} is not a step of this run, or its label is not true/false")
        verdict = s.over_search if s.kind == "search" else (None if s.correct is None else s.correct == 1.0)
        if verdict is None:
            continue
        pairs.append((s.kind, bool(verdict), label))
    if not pairs:
        raise S3Error(f"{labels_path}: no labelled step has a judge verdict")
    agree = sum(v == lab for _, v, lab in pairs) / len(pairs)
    pv = sum(v for _, v, _ in pairs) / len(pairs)
    pl = sum(lab for _, _, lab in pairs) / len(pairs)
    pe = pv * pl + (1 - pv) * (1 - pl)
    kappa = (agree - pe) / (1 - pe) if pe < 1 else None  # undefined when labels and verdicts are all one class
    by_kind: dict[str, Any] = {}
    for kind in ("search", "answer"):
        sub = [(v, lab) for k, v, lab in pairs if k == kind]
        if sub:
            by_kind[kind] = {"n": len(sub), "agreement": round(sum(v == lab for v, lab in sub) / len(sub), 3)}
    return {"n": len(pairs), "agreement": agree, "kappa": kappa, "by_kind": by_kind}


def steps_jsonl(a: R1Analysis, path: Path) -> None:
    """Every step with its answers and verdicts (what the hand labels are made from)."""
    with path.open("w") as f:
        for s in a.steps:
            f.write(json.dumps({"key": s.key, **asdict(s)}) + "\n")
