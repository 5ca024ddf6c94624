"""benchmarks/rag_flow.py's tables (experiments/rag_flow.py): medians and ranges per corpus and label, the documents
as the chain saw them, and the README table that shows them; fake launch records, no model."""

from __future__ import annotations

from typing import Any

from experiments.rag_flow import MANUAL, MANUAL_QUESTIONS, documents, markdown, summary


def _doc(i: str, text: str, title: str = "") -> dict[str, Any]:
    return {"id": i, "metadata_id": i, "title": title, "turn": 0, "page_content": text, "users_id": True,
            "text_is_corpus_text": True}


def _launch(corpus: str, label: str, cold: float, warm: list[float], docs: list[dict[str, Any]],
            why: str = "smollm2-135m-hotpotqa: the default for an index without titles") -> dict[str, Any]:
    return {"corpus": corpus, "label": label, "why": why, "cold_s": cold, "warm_s": warm,
            "warm_median_s": sorted(warm)[len(warm) // 2],
            "questions": [{"question": "What does error E12 mean?", "search_one": [{"id": d["id"]} for d in docs],
                           "chain": docs, "context": "\n\n".join(d["page_content"] for d in docs),
                           "context_is_format_docs": True, "chain_ids_are_search_one_ids": True}]}


E12 = _doc("r7-18", "Error E12 means the battery temperature is too high.\nMove the vacuum to a cooler room.")


def test_summary_is_the_median_and_range_over_launches_per_corpus_and_label() -> None:
    runs = [_launch("untitled", "quiet", c, [w], [E12]) for c, w in ((9.0, 2.0), (7.0, 3.0), (8.0, 1.0))]
    runs += [_launch("untitled", "beside a 2-thread job", c, [w, w + 2, w + 4], [E12]) for c, w in ((20.0, 5.0),)]
    runs.append(_launch("titled", "quiet", 11.0, [4.0], [E12]))
    s = summary(runs)
    assert list(s) == ["untitled", "titled"] and list(s["untitled"]) == ["quiet", "beside a 2-thread job"]
    assert s["untitled"]["quiet"] == {"launches": 3, "cold_s": [8.0, 7.0, 9.0], "warm_s": [2.0, 1.0, 3.0],
                                      "warm_calls": 3}
    # a launch's warm figure is its median call; the range is over launches, not calls
    assert s["untitled"]["beside a 2-thread job"]["warm_s"] == [7.0, 7.0, 7.0]
    assert s["untitled"]["beside a 2-thread job"]["warm_calls"] == 3
    assert s["titled"]["quiet"]["launches"] == 1


def test_documents_keep_the_first_launch_and_flag_a_launch_that_differs() -> None:
    other = _doc("r7-16", "Error codes\nThe status light turns red.")
    runs = [_launch("untitled", "quiet", 8.0, [2.0], [E12, other]), _launch("untitled", "busy", 9.0, [2.0], [E12])]
    runs.append(_launch("untitled", "busy", 9.0, [2.0], [E12], why="another searcher"))
    got = documents(runs)["untitled"]
    assert got["why"] == ["smollm2-135m-hotpotqa: the default for an index without titles", "another searcher"]
    row = got["questions"]["What does error E12 mean?"]
    assert [d["id"] for d in row["chain"]] == ["r7-18", "r7-16"] and row["same_in_every_launch"] is False
    assert "_key" not in row
    same = documents(runs[1:2])["untitled"]["questions"]["What does error E12 mean?"]
    assert same["same_in_every_launch"] is True


def test_the_readme_table_shows_texts_whole_with_their_newlines_and_the_times() -> None:
    bad = {**_doc("x|1", "a|b\nc", title="T"), "users_id": False, "text_is_corpus_text": False}
    runs = [_launch("untitled", "quiet", 8.0, [2.0], [E12, bad]), _launch("untitled", "quiet", 10.0, [4.0], [E12, bad])]
    md = markdown({"launches": runs})
    assert "## untitled corpus" in md and "`smollm2-135m-hotpotqa: the default for an index without titles`" in md
    # the first line kept, the newline visible, one table row per document
    assert ("| What does error E12 mean? | 1 | `r7-18` |  | 0 | Error E12 means the battery temperature is too high. ⏎ "
            "Move the vacuum to a cooler room. | yes | yes | yes |") in md
    assert "|  | 2 | `x\\|1` | T | 0 | a\\|b ⏎ c | **no** | **no** | yes |" in md
    assert "| untitled | quiet | 2 | 9.00 [8.00, 10.00] | 3.000 [2.000, 4.000] (2) |" in md
    long = markdown({"launches": [_launch("titled", "quiet", 1.0, [1.0], [_doc("p", "w " * 200, "P")])]},
                    text_limit=20)
    assert "w w w w w w w w w w … (400 chars)" in long


def test_a_chain_that_differs_from_format_docs_or_search_one_is_called_out() -> None:
    run = _launch("untitled", "quiet", 8.0, [2.0], [E12])
    run["questions"][0].update(context_is_format_docs=False, chain_ids_are_search_one_ids=False,
                               search_one=[{"id": "r7-17"}])
    md = markdown({"launches": [run]})
    assert "the chain's context differs from format_docs" in md and "differ from search_one's: r7-17" in md


def test_the_manual_fixture_is_untitled_multi_line_with_the_users_ids() -> None:
    assert len(MANUAL) == 30 and len({i for i, _ in MANUAL}) == 30
    assert all(i.startswith("r7-") and "\n" in text and not text.startswith('"') for i, text in MANUAL)
    assert dict(MANUAL)["r7-18"].startswith("Error E12 means the battery temperature is too high.\n")
    assert 3 <= len(MANUAL_QUESTIONS) <= 5
