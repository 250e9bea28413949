"""Keyword functions behind the CLI leaves that run a model and score it: a package's function, then
analysis's scoring; the CLI (cmd_*.py) and the sweep's steps both call them (a step's ``calls()``
names the functions themselves), and ``CLI_LEAF`` says which command line each one is, for
`gendergap trace` to print the command that redoes a step."""
from gendergap.runs.asr import asr_finetune, asr_frozen
from gendergap.runs.probe import probe_run
from gendergap.runs.st import st_decode, st_train
from gendergap.runs.transcribe import asr_transcribe

# each function -> the CLI leaf whose option dests are its parameter names (gendergap.options.call)
CLI_LEAF = {asr_finetune: "asr finetune", asr_frozen: "asr frozen", st_train: "st train", st_decode: "st decode",
            probe_run: "probe run", asr_transcribe: "asr transcribe"}
