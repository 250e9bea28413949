"""Shared test set-up: engines run offline, on the CPU, deterministically."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # fairseq checkpoints hold non-tensor objects
os.environ.setdefault("MPLBACKEND", "Agg")

from slurm_helpers import slurm_cluster  # noqa: E402,F401  -- the one-node SLURM cluster fixture
