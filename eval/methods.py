"""The evaluation methods: where the documents D given to the frozen generator G come from.

    no_retrieval   G answers from the question alone
    naive_rag      D_RAG: the retriever's top-k (retriever.k) of the question itself
    title_following  the title-following script's documents (searcher.kind = "title_following", run live): D_RAG plus
                   the pages titled as a span it read; the control a trained searcher must beat (`--baseline` it)
    searcher       D_s3: the s3 searcher's documents, from a contexts file (`s3 search --out`) or the searcher run live
    search_r1      the Search-R1 agent's own answer (no frozen generator)
    search_r1_ret  the Search-R1 agent's retrieved documents fed to G

The one list of them: `s3 eval --method` offers it, the harness checks against it, the leaderboard orders its rows
by it and the demo runs a part of it.
"""

from __future__ import annotations

METHODS = ("no_retrieval", "naive_rag", "title_following", "searcher", "search_r1", "search_r1_ret")

# The `s3 eval` options each method uses; giving one it does not use is an error (never silently ignored).
OPTIONS_USED: dict[str, frozenset[str]] = {
    "no_retrieval": frozenset({"generator"}),
    "naive_rag": frozenset({"index", "generator"}),
    "title_following": frozenset({"index", "generator"}),
    "searcher": frozenset({"index", "contexts", "generator"}),
    "search_r1": frozenset({"index"}),
    "search_r1_ret": frozenset({"index", "generator"}),
}
