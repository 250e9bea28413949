"""The devices and precisions a command may ask for, and their help lines: the vocabulary of
``--device`` / ``--precision``, apart from ssl_pretrain.device (which imports torch) so that the
command line builds its parser, and answers --help, without importing torch."""
from __future__ import annotations

DEVICES = "auto|cpu|cuda|cuda:N"
PRECISIONS = ("fp32", "fp16", "bf16")
DEVICE_HELP = ("where the model runs: auto (CUDA when present, else CPU; default), cpu, cuda or cuda:N")
PRECISION_HELP = ("fp32 (default), fp16 (CUDA only) or bf16: mixed precision through autocast; weights and "
                  "optimizer state stay fp32")
