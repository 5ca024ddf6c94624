"""The experiments behind benchmarks/*.py: the tested logic of each measurement (tables, selections, reports), one
module per benchmark, above the `s3` layer (it may import every package; no package imports it). benchmarks/<name>.py
is the thin command line that calls experiments/<name>.py."""
