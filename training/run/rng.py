"""Every random generator a training step draws from, captured into a checkpoint and restored on resume: Python's,
numpy's, torch's CPU generator and the generator of every accelerator device torch sees (CUDA: all GPUs; MPS).

    state = capture_rng()          # trainer_state.pt["rng"]
    restore_rng(state)             # a resume then samples what the uninterrupted run would have

A checkpoint written on a GPU machine resumes on a machine with fewer (or no) GPUs: the device states that have no
device here are skipped and named in the returned note, never an error; a checkpoint written before device states
were kept (no "cuda" entry) leaves the device generators as they are.
"""

from __future__ import annotations

import random
from typing import Any

__all__ = ["capture_rng", "restore_rng"]


def capture_rng() -> dict[str, Any]:
    import numpy as np
    import torch

    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()  # one ByteTensor per visible GPU
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        state["mps"] = torch.mps.get_rng_state()
    return state


def restore_rng(state: dict[str, Any]) -> str | None:
    """Restore `state` (capture_rng's); returns a note when device states could not all be restored here."""
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    notes = []
    cuda = state.get("cuda")
    if cuda:
        here = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if here:
            torch.cuda.set_rng_state_all(list(cuda)[:here])
        if here < len(cuda):
            notes.append(f"{len(cuda) - here} of the checkpoint's {len(cuda)} CUDA generator states have no GPU here")
    if state.get("mps") is not None:
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            torch.mps.set_rng_state(state["mps"])
        else:
            notes.append("the checkpoint's MPS generator state has no MPS device here")
    return "; ".join(notes) or None
