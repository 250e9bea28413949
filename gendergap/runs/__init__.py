"""Keyword functions behind the CLI leaves that run a model and score it: a package's function, then
analysis's scoring; the CLI (cmd_*.py) and the sweep's steps both call them (a step's ``calls()``
names the functions themselves). Each declares the command line it is with ``@cli_leaf``
(gendergap/runs/leaf.py), for `gendergap trace` to print the command that redoes a step."""
from gendergap.runs.asr import asr_finetune, asr_frozen
from gendergap.runs.leaf import LEAVES, cli_leaf, leaf_of
from gendergap.runs.probe import probe_run
from gendergap.runs.st import st_decode, st_train
from gendergap.runs.transcribe import asr_transcribe

__all__ = ["LEAVES", "asr_finetune", "asr_frozen", "asr_transcribe", "cli_leaf", "leaf_of", "probe_run", "st_decode",
           "st_train"]
