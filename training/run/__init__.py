"""A training run: its preparation and assembly (build.py), the loop (trainer.py) and one step's rows (step.py), the
data order (schedule.py), the RNG state (rng.py), the held-out evaluation (evaluate.py), collapse detection
(collapse.py)."""
