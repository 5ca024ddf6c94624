"""Reports on a run, read from its directory: curves (plots.py), the training-behaviour section of `s3 analyze`
(behavior.py), the projected spend of `s3 train --dry-run` (dryrun.py)."""
