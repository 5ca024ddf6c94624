"""The oracle replies of the format warm-up (training/prep/oracle.py), through the real s3 parser and prompt builder."""

from __future__ import annotations

import json
from pathlib import Path

from s3core.types import Document, QAExample
from searcher.protocol import build_s3_prompt, information_observation, parse_s3_reply, render_information
from training.prep.oracle import gold_titles, oracle_script

Q = "Who directed the film about the inventor of the Earthship?"
GOLD = {Q: ["Garbage Warrior", "Oliver Hodge (director)"]}


def _window(*titles: str) -> str:
    return render_information([Document(id=t, title=t, text=f"text of {t}") for t in titles], 48)


def test_selects_gold_in_window_and_asks_for_the_missing_title() -> None:
    prompt = build_s3_prompt(Q, _window("Earthship", "Garbage Warrior", "Michael Reynolds"), 3)
    reply = oracle_script(GOLD, max_select=3, max_turns=3)(prompt, 0)
    act = parse_s3_reply(reply, window_size=3)
    assert act.invalid_reason is None
    assert act.selected == (2,)
    assert act.search_complete is False
    assert act.query == "Oliver Hodge (director)"  # titles with parentheses and quotes stay valid JSON


def test_stops_when_every_gold_title_was_seen_or_turns_are_spent() -> None:
    prompt = build_s3_prompt(Q, _window("Earthship", "Garbage Warrior"), 3)
    prompt += information_observation(_window("Oliver Hodge (director)", "Earthship"))
    act = parse_s3_reply(oracle_script(GOLD, 3, 3)(prompt, 0), window_size=2)
    assert (act.selected, act.search_complete, act.query) == ((1,), True, None)
    # gold never retrieved: stop after max_turns searches, selecting nothing (not the A.5 fallback)
    lost = build_s3_prompt(Q, _window("Earthship"), 3) + information_observation(_window("Adobe"))
    act = parse_s3_reply(oracle_script(GOLD, 3, max_turns=1)(lost, 0), window_size=1)
    assert (act.selected, act.search_complete, act.invalid_reason) == ((), True, None)


def test_the_prompts_own_example_does_not_confuse_the_oracle() -> None:
    # the instruction's worked example contains <question>/<information> tags too: only the last question counts
    prompt = build_s3_prompt(Q, _window("Garbage Warrior"), 3)
    assert prompt.count("<question>") >= 1
    act = parse_s3_reply(oracle_script(GOLD, 3, 3)(prompt, 0), window_size=1)
    assert act.selected == (1,) and act.query == "Oliver Hodge (director)"


def test_gold_titles_from_metadata_or_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "p1", "title": "Alû", "text": "..."}, {"id": "p2", "title": "Lilu (mythology)", "text": "..."},
        {"id": "p3", "title": "Other", "text": "..."},
    ]))
    ex = [
        QAExample(id="a", question="If Gallu is a demon Lilu is what?", golden_answers=["a spirit"],
                  metadata={"supporting_ids": ["p2", "p1", "p2"]}),
        QAExample(id="b", question=" Q2 ", golden_answers=["x"], metadata={"supporting_titles": ["T1", "T1", "T2"]}),
        QAExample(id="c", question="Q3", golden_answers=["x"]),
    ]
    assert gold_titles(ex, corpus) == {
        "If Gallu is a demon Lilu is what?": ["Lilu (mythology)", "Alû"], "Q2": ["T1", "T2"], "Q3": [],
    }
