"""The reading searcher's trainer (searcher.kind = 'reading', `s3 train`): per training question the start's documents
and the candidate pages (candidates.py), each candidate's credit from the frozen generator (credit.py), a reader
taught by that credit, a ranker over it, and the export to a searcher directory."""
