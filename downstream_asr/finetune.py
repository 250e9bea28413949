"""End-to-end CTC fine-tuning of wav2vec 2.0 with SpeechBrain (the study's strategy 2).

The yaml (``hparams/finetune_ctc.yaml``) declares the objects: SpeechBrain's Hugging Face
wav2vec 2.0 wrapper on a local transformers folder (fairseq checkpoints are converted first:
ssl_pretrain.convert), the head (1024-d dense + LeakyReLU + output layer), two Adam optimizer
classes, the checkpointer. ``FinetuneBrain`` adds the behaviour: two optimizers (one for the
wav2vec 2.0 module, one for the head, each with its own learning rate), the CNN feature
encoder frozen throughout (``freeze_feature_encoder``) and the whole encoder frozen for the
first ``freeze_encoder_steps`` optimizer steps. Freezing is ``requires_grad=False`` AND
leaving the optimizer out of the step: SpeechBrain's warm-up pattern (only skipping the
optimizer) lets the frozen module's gradients pile up, because only active optimizers zero
their gradients.

    model = ModelChoice.resolve("ckpt_hf/")          # ssl_pretrain.model_choice: checkpoint, device, precision
    summary = train_finetune(model, "train.csv", "valid.csv", "runs/asr", overrides={"max_steps": 200})
    decode_finetuned("runs/asr", "test.csv")   # runs/asr/test.hyp.tsv + test.ref.tsv
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import speechbrain as sb

from corpora.base.atomic import write_json
from corpora.base.errors import UserError
from downstream_asr.cluster import check_run_options, distributed_run_opts, main_first
from downstream_asr.common import CTCBrain, fit_by_length
from downstream_asr.ctc_inference import ctc_log_probs
from downstream_asr.data import audio_dataset, length_batch_sampler, oov_report, read_csv
from downstream_asr.decode import open_for_decoding, read_run, recover_best, run_options, write_transcripts
from downstream_asr.errors import batch_option
from downstream_asr.rundir import build_hparams, locate, outside, prepare_run, relative
from downstream_asr.text import TextNorm, load_vocab
from ssl_pretrain.checkpoints import check_hf_folder
from ssl_pretrain.device import runtime_info

log = logging.getLogger(__name__)

DEFAULT_HPARAMS = Path(__file__).parent / "hparams" / "finetune_ctc.yaml"   # the only yaml evaluated (rundir.py)


class FinetuneBrain(CTCBrain):
    """wav2vec 2.0 + head, CTC; two optimizers; optional encoder freezing."""

    def forward_logprobs(self, batch, stage):
        wavs, wav_lens = batch.sig
        if stage == sb.Stage.TRAIN and self.hparams.speed_perturb:
            # one random speed per batch (SpeechBrain's SpeedPerturb; it draws from torch's global
            # generator, which RNGState checkpoints, so a resumed run draws the same speeds).
            # Relative lengths are unchanged: padding is resampled with the signal.
            wavs = self.hparams.speed_perturber(wavs)
        # the batch-invariant forward every path shares (downstream_asr.ctc_inference)
        return ctc_log_probs(self.modules, self.hparams.log_softmax, wavs, wav_lens)

    def init_optimizers(self):
        # The parameters trainable now: the CNN is already requires_grad=False when frozen.
        self.wav2vec_params = [p for p in self.modules.wav2vec2.parameters() if p.requires_grad]
        self.wav2vec_optimizer = self.hparams.wav2vec_opt_class(self.wav2vec_params)
        self.head_optimizer = self.hparams.head_opt_class(self.modules.head.parameters())
        self.optimizers_dict = {"wav2vec": self.wav2vec_optimizer, "head": self.head_optimizer}
        if self.checkpointer is not None:
            self.checkpointer.add_recoverable("wav2vec_opt", self.wav2vec_optimizer)
            self.checkpointer.add_recoverable("head_opt", self.head_optimizer)

    def encoder_frozen(self) -> bool:
        return self.optimizer_step < int(self.hparams.freeze_encoder_steps or 0)

    def freeze_optimizers(self, optimizers):
        if self.encoder_frozen():
            return {k: v for k, v in optimizers.items() if k != "wav2vec"}
        return optimizers

    def warmup_start(self, optimizer_name):
        return int(self.hparams.freeze_encoder_steps or 0) if optimizer_name == "wav2vec" else 0

    def on_fit_batch_start(self, batch, should_step):
        trainable = not self.encoder_frozen()
        if self.wav2vec_params and self.wav2vec_params[0].requires_grad != trainable:
            for p in self.wav2vec_params:
                p.requires_grad_(trainable)
                p.grad = None
            log.info("wav2vec 2.0 encoder %s at optimizer step %d", "unfrozen" if trainable else "frozen",
                     self.optimizer_step)
        super().on_fit_batch_start(batch, should_step)


def ssl_hidden_size(ssl_folder: str | os.PathLike) -> int:
    return int(check_hf_folder(Path(ssl_folder))["hidden_size"])


def run_ssl_folder(out_dir: Path, run: dict) -> Path:
    """The transformers folder the run's model is built on: inside the run directory (a converted
    .pt, ``ssl_hf/``), found relative to it wherever it was copied; or the folder it was given."""
    found = locate(out_dir, run.get("ssl_folder"), run.get("ssl_folder_abs"))
    if found is None:
        raise UserError(f"the transformers folder this run was built on is gone ({run.get('ssl_folder')!r} in the run "
                        f"directory, or {run.get('ssl_folder_abs') or run.get('ssl_folder')})",
                        path=out_dir / "run.json",
                        fix="copy the run directory whole (with its ssl_hf/), or put the folder back")
    return found


def build_brain(out_dir: Path, run: dict, vocab, run_opts: dict | None = None, trust: bool = False):
    """The Brain of a run directory (the package's template + run.json's plain overrides), not yet
    recovered; its checkpoints load safely unless ``trust``."""
    folder = str(run_ssl_folder(out_dir, run))
    fixed = {"ssl_folder": folder, "output_folder": str(out_dir), "ssl_dim": ssl_hidden_size(folder),
             "n_chars": len(vocab)}
    hparams = build_hparams(out_dir, run, fixed, trust)
    opts = {"noprogressbar": not run.get("progress", True), **(run_opts or {})}
    check_run_options(hparams, opts)
    brain = FinetuneBrain(modules=hparams["modules"], hparams=hparams, run_opts=opts,
                          checkpointer=hparams["checkpointer"])
    brain.vocab = vocab
    return brain, hparams


def load_finetuned(out_dir: str | os.PathLike, device: str = "cpu", precision: str = "fp32", trust: bool = False):
    """A fine-tuning run directory's best checkpoint, ready for inference (transcribe, export):
    (brain in eval mode, run.json, vocabulary, checkpoint name). An `asr frozen` run is refused:
    it reads features from the feature store, not audio."""
    out_dir = Path(out_dir)
    run = read_run(out_dir)
    if run["kind"] != "finetune":
        raise UserError("an `asr frozen` run reads features from the feature store, not audio", path=out_dir,
                        fix="decode it with `gendergap asr decode --model DIR --test CSV`")
    vocab = load_vocab(out_dir / "vocab.txt")
    opts = {"device": device, "precision": precision, "eval_precision": precision, "noprogressbar": True}
    brain, _ = build_brain(out_dir, run, vocab, opts, trust=trust)
    ckpt = recover_best(brain, out_dir, "gendergap asr finetune", run)
    brain.modules.eval()
    return brain, run, vocab, ckpt


def train_finetune(model, train_csv, valid_csv, out_dir, hparams_file=None, overrides: dict | None = None,
                   data_root: str | None = None, progress: bool = True, run_opts: dict | None = None,
                   grad_accum: int | None = None, ckpt_interval_minutes: float | None = None) -> dict:
    """Fine-tune (or resume fine-tuning) ``model`` (a ssl_pretrain.model_choice.ModelChoice: the
    checkpoint, its device and precision) in ``out_dir``; returns a summary dict.

    ``overrides`` are hyperparameters (nested dict), e.g. ``{"max_steps": 100, "lr_head": 1e-3}``.
    ``precision`` is SpeechBrain's: fp16/bf16 autocast with fp32 weights and optimizer state.
    Stopping by ``max_steps``/``max_minutes`` leaves a resumable checkpoint: the same call
    with a larger budget continues at the saved optimizer step.

    ``grad_accum``: batches per optimizer step. ``ckpt_interval_minutes``: also checkpoint every
    so many minutes inside an epoch (a killed or requeued job resumes from there). None: the
    yaml's ``grad_accumulation_factor`` / ``ckpt_interval_minutes`` (SpeechBrain's run options).

    Under torchrun every rank calls this: ranks join the process group (DDP), only rank 0 writes
    the run directory, and the process group is closed again before returning
    (``summary["main_process"]`` says which rank this is), so that rank 0 can decode alone.
    """
    out_dir = Path(out_dir)
    ref, precision = model.ref, model.precision
    dist_opts = distributed_run_opts(model.device)
    device = dist_opts.get("device", model.device)  # under torchrun on CUDA: this rank's GPU

    def prepare(write: bool):
        ssl_folder = ref.hf_folder(out_dir / "ssl_hf")  # a fairseq .pt is converted once, by content
        ssl_hidden_size(ssl_folder)  # a clear error before anything is written
        run, vocab, train = prepare_run(ref.describe(), train_csv, out_dir, hparams_file, overrides, data_root,
                                        kind="finetune",
                                        extra={"ssl_folder": relative(out_dir, ssl_folder),
                                               "ssl_folder_abs": outside(out_dir, ssl_folder),
                                               "runtime": runtime_info(device, precision)})
        run["progress"] = progress
        valid = read_csv(valid_csv, TextNorm.from_dict(run["text_norm"]), training=False, data_root=data_root)
        run["valid_csv"] = str(Path(valid_csv).resolve())
        if write:
            write_json(out_dir / "run.json", run)
        return run, vocab, train, valid

    run, vocab, train, valid = main_first(prepare)  # rank 0 converts and writes; the others then read
    opts = {**run_options(run, run_opts)[0], **dist_opts}
    if grad_accum is not None:
        opts["grad_accumulation_factor"] = grad_accum
    if ckpt_interval_minutes is not None:
        opts["ckpt_interval_minutes"] = ckpt_interval_minutes
    brain, hparams = build_brain(out_dir, run, vocab, opts, trust=ref.trusted)
    sr = int(brain.modules.wav2vec2.feature_extractor.sampling_rate)
    train_ds, valid_ds = audio_dataset(train, vocab, sr), audio_dataset(valid, vocab, sr)
    return fit_by_length(brain, hparams, train_ds, valid_ds, out_dir, progress, vocab_size=len(vocab),
                         oov_valid=oov_report(valid, vocab))


def decode_finetuned(out_dir, test_csv, name: str = "test", data_root: str | None = None,
                     batch_seconds: float | None = None, run_opts: dict | None = None, trust: bool = False,
                     max_batch_size: int | None = None) -> dict:
    """Greedy-decode ``test_csv`` with the best checkpoint of ``out_dir``; writes hyp/ref TSVs.
    ``trust`` (--trust-checkpoint): unpickle the run's SpeechBrain checkpoint files fully. Batches of
    similar length (``batch_seconds`` padded seconds, at most ``max_batch_size`` utterances) give the
    same hypotheses as one utterance at a time (downstream_asr.ctc_inference)."""
    out_dir = Path(out_dir)
    run, vocab, test, oov = open_for_decoding(out_dir, test_csv, data_root)
    opts, runtime = run_options(run, run_opts)
    brain, hparams = build_brain(out_dir, run, vocab, opts, trust=trust)
    ckpt = recover_best(brain, out_dir, "gendergap asr finetune", run)
    sr = int(brain.modules.wav2vec2.feature_extractor.sampling_rate)
    ds = audio_dataset(test, vocab, sr)
    sampler = length_batch_sampler(ds, batch_seconds or hparams["valid_batch_seconds"], shuffle=False, seed=0,
                                   max_batch_size=max_batch_size)
    loader = sb.dataio.dataloader.make_dataloader(ds, batch_sampler=sampler)
    t0 = time.monotonic()
    with batch_option("batch_seconds", batch_seconds or hparams["valid_batch_seconds"], "decoding"):
        hyps = brain.transcribe(loader)
    info = {"model": str(out_dir), "kind": run["kind"], "ssl": run["ssl"], "runtime": runtime,
            "test_csv": str(Path(test_csv).resolve()),
            "text_norm": run["text_norm"], "text_norm_name": run["text_norm_name"], "checkpoint": ckpt,
            "oov": oov, "decode_seconds": round(time.monotonic() - t0, 2),
            "batching": {"batch_seconds": batch_seconds or hparams["valid_batch_seconds"], "order": "by length",
                         "max_batch_size": max_batch_size,
                         "model": "batch-invariant (downstream_asr.ctc_inference)"}}
    return write_transcripts(test["ID"].tolist(), hyps, test["text"].tolist(), out_dir, name, info)
