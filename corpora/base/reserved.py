"""Reserved names every layer shares.

``FBANK`` names the filterbank baseline (80-d log-mel, no pretraining) wherever a checkpoint name
goes: a study config's checkpoints, ``--ckpt``, the results store and the report's tables. It is
never a file and never in a registry (ssl_pretrain.checkpoints resolves it; analysis lists it as
the reference row)."""
FBANK = "FBANK"
