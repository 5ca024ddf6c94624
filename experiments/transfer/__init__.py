"""The transfer studies (docs/transfer.md): does a searcher trained on HotpotQA beat naive RAG on questions it never saw,
and what must it beat. One package, one module per piece; each benchmarks/ script is a thin command line over one:

    methods.py        METHODS: every method the studies evaluate, name -> the `s3 eval` settings it runs with and what
                      it is (both command lines' --help print it); the old names their results keep
    attempt.py        benchmarks/transfer.py: an attempt after training (select, evaluate, report, ablation; snapshot /
                      restore across machines); configs/transfer.toml, transfer2.toml, results/transfer{,2}/
    checks.py         the zero-training checks' logic: A1 / A2, the title-following script and its controls, readers and
                      rankers where it ends, the paired tables
    checks_run.py     benchmarks/transfer_checks.py: the checks' stages (prepare, run, max-tokens, reach, read, report);
                      configs/transfer3.toml, results/transfer3/checks/
    ablation.py       benchmarks/transfer3_ablation.py: attempt 3's held-out ablation (results/transfer3/ablation/)
    heldout_modes.py  benchmarks/transfer3_heldout_modes.py: what held-out searches asked for (results/transfer3/)

`s3` runs as a subprocess through experiments/s3cli.py `run_s3`.
"""
