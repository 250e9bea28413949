"""Downstream ASR on SSL checkpoints (the reference study's section 4).

- ``finetune``: end-to-end CTC fine-tuning of wav2vec 2.0 with SpeechBrain
  (``hparams/finetune_ctc.yaml``): 1024-d dense + LeakyReLU + softmax over characters,
  two Adam optimizers, optional encoder freezing, resumable budgets, greedy decoding.
- ``frozen``: frozen-feature CTC ASR (one layer or a learned weighted sum of all layers,
  cached features, global feature normalisation, TDNN and/or BiLSTM; ``hparams/frozen_ctc.yaml``).
- ``kaldi``: Kaldi data dir + feats.scp/ark export for hybrid ASR; Kaldi output import.
- ``text``: transcript normalisation and the character vocabulary; ``data``: SpeechBrain CSVs;
  ``common``: the shared Brain; ``rundir``/``decode``: run directories, hypothesis files.

Training writes models and ``id<TAB>text`` hypothesis/reference files; scoring is done by
``analysis`` from the CLI layer (gendergap/cmd_asr.py), never here.
"""
