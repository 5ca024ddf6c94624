"""Data preparation: raw benchmark formats -> the FlashRAG-shaped questions + corpus every other flow reads.

    from dataprep import load, prepare, load_prepared
    corpus, questions = load("hotpotqa", ["hotpot_dev_distractor_v1.json"])   # Documents + QAExamples, in memory
    manifest = prepare("musique", [path], "data/musique_dev")                  # what `s3 data prepare` writes
    corpus_path, questions = load_prepared("data/musique_dev")                 # what evaluation and training read

- `records`: raw files as (line, record), whatever the layout (JSON array, JSON lines, one object)
- `builder`: the paragraph / question id rules (a contract) and the builder that merges, deduplicates and counts
- `answers`, `rows`: the gold answers and the other fields of a question row, in every layout the datasets use
- `formats/`: one module per raw format (HotpotQA, 2WikiMultihopQA, MuSiQue, FlashRAG, NQ / TriviaQA / PopQA /
  Bamboogle, MIRAGE, corpus files) and the registry `FORMATS`
- `prepare`: `load`, `prepare` (corpus.jsonl + questions.jsonl + manifest.json), `load_prepared`
- `training_sources`: the 'format:path' list of `training.data.sources` loaded into one corpus and question set
- `demo`: the newcomer demo's Wikipedia-summaries corpus and its 25 questions (`demo_questions.jsonl`)
"""

from dataprep.builder import LoadStats, join_sentences, paragraph_id
from dataprep.formats import FORMATS, DataFormat
from dataprep.prepare import (
    CORPUS_FILE,
    MANIFEST_FILE,
    QUESTIONS_FILE,
    LoadedData,
    Manifest,
    load,
    load_prepared,
    prepare,
)
from dataprep.records import iter_records

__all__ = [
    "CORPUS_FILE",
    "FORMATS",
    "MANIFEST_FILE",
    "QUESTIONS_FILE",
    "DataFormat",
    "LoadStats",
    "LoadedData",
    "Manifest",
    "iter_records",
    "join_sentences",
    "load",
    "load_prepared",
    "paragraph_id",
    "prepare",
]
