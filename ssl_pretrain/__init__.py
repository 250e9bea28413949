"""wav2vec 2.0 pretraining with fairseq, and everything that turns its checkpoints into features.

    hardware.py           presets (presets/*.yaml) and GPU profiles -> max_tokens / update_freq
    manifest_check.py     fairseq wav2vec manifests checked before training (UserError per line)
    run.py                `pretrain run`: fairseq-hydra-train here, resumable, under the watchdog
    fairseq_entry.py      a fairseq command whose checkpoint loads go through the safe loader
    launch.py             `pretrain launch`: submitit (SLURM multi-node, or local), requeue, dry run
    watchdog.py           NaN / loss-scale / code-collapse / stuck detection, rollback, lower lr
    study_checkpoints.py  the study's own tiny checkpoints: pretrained until they learn, registered
    registry.py           named checkpoints with their pretraining gender make-up (Table 3)
    checkpoints.py        CheckpointRef: one reference to any checkpoint a command is given
    families.py           the SSL families a transformers folder may be (wav2vec2, hubert, wavlm, ...)
    invariant.py          the batch-invariant forward every scoring path shares, for every family
    safe_load.py          torch files loaded without running code; the packed release format
    convert.py            fairseq checkpoint -> transformers Wav2Vec2Model folder
    evaluate.py           contrastive accuracy vs a random-init twin; fp16 release copies
    device.py             devices and autocast precisions, resolved once for every command
    features.py           any checkpoint as a frozen extractor; the audio reading every extractor shares
    feature_store.py      features extracted once per extractor, rows and layers, read by every consumer
    feature_cover.py      several tasks' feature requests served by as few store entries as cover them

Kaldi feature export lives in downstream_asr/kaldi.py; it reads the store.
"""
