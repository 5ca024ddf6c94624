"""Data preparation: the training set (load, filter, baseline, answerable), the warm-up teachers and gold
visibility (oracle.py), the warm-up's rejection sampling (distill.py). Imports no other layer of training/ but the
bottom one (config, rewards, rundir)."""
