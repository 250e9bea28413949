"""``python -m ssl_pretrain.fairseq_entry fairseq_cli.MODULE ARGS...``: a fairseq command whose
``torch.load`` keeps torch's default ``weights_only=True``, with the project's allowlist.

fairseq 0.12 calls ``torch.load`` without ``weights_only``; torch >= 2.6 then loads weights only,
which refuses the ``argparse.Namespace`` fairseq-train keeps in its checkpoints. Rather than
switching the check off for the whole process (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``), the classes
of ssl_pretrain.safe_load.SAFE_GLOBALS are registered here, so fairseq itself reads a checkpoint
as data only. ssl_pretrain.run.start_fairseq starts every fairseq command through this module.

It also makes fairseq's speech-to-text model and beam search batch-invariant
(ssl_pretrain.fairseq_batch_invariance: the s2t conv subsampler no longer reads its batch
neighbours' padding, each hypothesis is capped by its own utterance's length). The patch is
applied to training and generation alike, so the model a test set is decoded with is the function
it was trained as; and it lives here, in the project's own entry point, not in a ``--user-dir``
package (presets refuse that flag: it would import code named by a config file).

It resets the root logger to a fresh interpreter's, for a command started warm (see below).

It flushes subnormal floats to zero (ssl_pretrain.device.flush_subnormals: fairseq's ST training
on FBANK features ran 2.5x slower on them).

All three run at import: fairseq's multi-GPU training spawns its ranks, and a spawned process imports
the parent's ``__main__`` module (this one) again before it loads anything.
"""
from __future__ import annotations

import importlib
import logging
import sys

import torch

from ssl_pretrain import fairseq_batch_invariance
from ssl_pretrain.device import flush_subnormals
from ssl_pretrain.safe_load import SAFE_GLOBALS

ENTRIES = ("fairseq_cli.train", "fairseq_cli.generate", "fairseq_cli.hydra_train")

# Started warm (ssl_pretrain.run.start_fairseq(warm=True)), this process is a fork of a server
# whose imports configured the root logger (SpeechBrain adds a handler): start from a fresh
# interpreter's, so that fairseq's command configures it as when it runs alone.
for _handler in list(logging.root.handlers):
    logging.root.removeHandler(_handler)
logging.root.setLevel(logging.WARNING)
torch.serialization.add_safe_globals(SAFE_GLOBALS)
flush_subnormals()
# The fairseq command's own module is imported before the patch imports fairseq's models, as it is
# when fairseq runs alone: fairseq_cli.train configures logging at import (its "| train | epoch 001 |"
# lines), and importing fairseq's models first would configure it another way. A spawned rank gets the
# parent's sys.argv, so it imports the same module here.
if len(sys.argv) > 1 and sys.argv[1] in ENTRIES:
    importlib.import_module(sys.argv[1])
fairseq_batch_invariance.install()


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ENTRIES:
        sys.exit(f"usage: python -m ssl_pretrain.fairseq_entry {{{','.join(ENTRIES)}}} ARGS...")
    sys.argv = [argv[0], *argv[1:]]
    importlib.import_module(argv[0]).cli_main()


if __name__ == "__main__":
    main(sys.argv[1:])
