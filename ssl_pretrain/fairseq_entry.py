"""``python -m ssl_pretrain.fairseq_entry fairseq_cli.MODULE ARGS...``: a fairseq command whose
``torch.load`` keeps torch's default ``weights_only=True``, with the project's allowlist.

fairseq 0.12 calls ``torch.load`` without ``weights_only``; torch >= 2.6 then loads weights only,
which refuses the ``argparse.Namespace`` fairseq-train keeps in its checkpoints. Rather than
switching the check off for the whole process (``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``), the classes
of ssl_pretrain.safe_load.SAFE_GLOBALS are registered here, so fairseq itself reads a checkpoint
as data only. ssl_pretrain.run.start_fairseq starts every fairseq command through this module.

The registration runs at import: fairseq's multi-GPU training spawns its ranks, and a spawned
process imports the parent's ``__main__`` module (this one) again before it loads anything.
"""
from __future__ import annotations

import importlib
import sys

import torch

from ssl_pretrain.safe_load import SAFE_GLOBALS

torch.serialization.add_safe_globals(SAFE_GLOBALS)

ENTRIES = ("fairseq_cli.train", "fairseq_cli.generate", "fairseq_cli.hydra_train")


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ENTRIES:
        sys.exit(f"usage: python -m ssl_pretrain.fairseq_entry {{{','.join(ENTRIES)}}} ARGS...")
    sys.argv = [argv[0], *argv[1:]]
    importlib.import_module(argv[0]).cli_main()


if __name__ == "__main__":
    main(sys.argv[1:])
