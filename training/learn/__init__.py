"""The update: the learner interface and its batch types (api.py), the learners (learner.py, learner_group.py), the
advantage estimators (advantages.py), the losses (algorithms.py), the weights as an engine loads them
(weight_sync.py) and a checkpoint exported as a model (export.py)."""
