"""What both CTC recipes share: the Brain's loop policy, RNG checkpointing, greedy decoding.

``CTCBrain`` adds to ``speechbrain.Brain``:
- a step budget (``max_steps``) and a time budget (``max_minutes``): when one runs out, an
  intra-epoch checkpoint is written (model, optimizers, counters, data-loader position, RNG
  state) and training stops; running the same command again resumes from there, so a
  stopped-and-resumed run equals an uninterrupted one;
- a linear learning-rate warm-up computed from the optimizer step counter (which SpeechBrain
  saves), so the warm-up survives a resume;
- greedy CTC decoding on VALID/TEST, with the validation character error counts and WER in
  the train log, and checkpoints kept by a validation score (``select_by``, CER by default).
Subclasses define ``forward_logprobs(batch, stage) -> (log_probs [B,T,V], rel_lengths [B])``.
"""
from __future__ import annotations

import logging
import random
import time

import numpy as np
import speechbrain as sb
import torch
from speechbrain.core import INTRA_EPOCH_CKPT_FLAG
from speechbrain.utils.checkpoints import mark_as_loader, mark_as_saver, register_checkpoint_hooks

from downstream_asr.text import decode

log = logging.getLogger(__name__)


@register_checkpoint_hooks
class RNGState:
    """Checkpoints torch / numpy / random generator states, so dropout after a resume draws the
    same numbers as an uninterrupted run would have."""

    @mark_as_saver
    def _save(self, path):
        state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate()}
        if torch.cuda.is_available():  # dropout on a GPU draws from the CUDA generators
            state["cuda"] = torch.cuda.get_rng_state_all()
        torch.save(state, path)

    @mark_as_loader
    def _recover(self, path, end_of_epoch):
        del end_of_epoch
        state = torch.load(path, weights_only=False)
        torch.set_rng_state(state["torch"])
        np.random.set_state(state["numpy"])
        random.setstate(state["random"])
        if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["cuda"])


def anneal_factor(step: int, max_steps: int, final: float) -> float:
    """Linear decay from 1 at step 0 to ``final`` at ``max_steps`` (1 when there is no step budget)."""
    if max_steps <= 0 or final >= 1.0:
        return 1.0
    return 1.0 - (1.0 - final) * min(1.0, step / max_steps)


def warmup_factor(step: int, warmup_steps: int, start: int = 0) -> float:
    """Linear warm-up: 0 before ``start``, then (step - start + 1) / warmup_steps up to 1."""
    if step < start:
        return 0.0
    if warmup_steps <= 0:
        return 1.0
    return min(1.0, (step - start + 1) / warmup_steps)


class CTCBrain(sb.Brain):
    """A SpeechBrain Brain for character CTC with budgets, warm-up and greedy decoding."""

    vocab = None  # the CTCTextEncoder, set by the recipe

    def forward_logprobs(self, batch, stage):  # pragma: no cover - abstract
        raise NotImplementedError

    # --- the SpeechBrain hooks -------------------------------------------------------
    def compute_forward(self, batch, stage):
        return self.forward_logprobs(batch.to(self.device), stage)

    def compute_objectives(self, predictions, batch, stage):
        log_probs, lens = predictions
        tokens, tokens_lens = batch.tokens
        loss = self.hparams.ctc_cost(log_probs, tokens, lens, tokens_lens)
        if stage != sb.Stage.TRAIN:
            hyps = sb.decoders.ctc_greedy_decode(log_probs, lens, blank_id=0)
            texts = [decode(h, self.vocab) for h in hyps]
            self.cer_metric.append(batch.id, [list(t) for t in texts], [list(t) for t in batch.text])
            self.wer_metric.append(batch.id, [t.split() for t in texts], [t.split() for t in batch.text])
        return loss

    def on_stage_start(self, stage, epoch=None):
        if stage != sb.Stage.TRAIN:
            self.cer_metric = sb.utils.metric_stats.ErrorRateStats()
            self.wer_metric = sb.utils.metric_stats.ErrorRateStats()

    def on_fit_start(self):
        self.stopped_mid_epoch = False
        self._t0 = time.monotonic()
        max_steps = int(getattr(self.hparams, "max_steps", 0) or 0)
        self.optimizer_step_limit = max_steps if max_steps > 0 else None
        super().on_fit_start()  # init_optimizers + recover the latest checkpoint
        if self.optimizer_step:
            log.info("resumed at optimizer step %d (epoch %d)", self.optimizer_step, self.hparams.epoch_counter.current)
        # Re-running a finished budget must change nothing: no batch, no validation, no checkpoint
        # (an end-of-epoch checkpoint here would make the next resume skip the rest of the epoch).
        self.budget_spent_at_start = self._optimizer_step_limit_exceeded
        if self.budget_spent_at_start:
            log.info("the step budget (%d) is already reached: nothing to train", self.optimizer_step_limit)

    @property
    def stopped_by_budget(self) -> bool:
        return self.stopped_mid_epoch or getattr(self, "budget_spent_at_start", False)

    def _fit_train(self, train_set, epoch, enable):
        if not self.budget_spent_at_start:
            super()._fit_train(train_set, epoch, enable)

    def on_fit_batch_start(self, batch, should_step):
        warm = int(getattr(self.hparams, "warmup_steps", 0) or 0)
        # Annealing needs a step budget: with max_steps the last updates take small steps. A run
        # resumed with a larger max_steps follows the stretched schedule from where it stopped.
        decay = anneal_factor(self.optimizer_step, int(getattr(self.hparams, "max_steps", 0) or 0),
                              float(getattr(self.hparams, "lr_final_ratio", 1.0)))
        for name, opt in (self.optimizers_dict or {}).items():
            f = warmup_factor(self.optimizer_step, warm, self.warmup_start(name)) * decay
            for group in opt.param_groups:
                group["lr"] = group.setdefault("base_lr", group["lr"]) * f

    def warmup_start(self, optimizer_name: str) -> int:
        """The step at which an optimizer's warm-up starts (0; later for a frozen module)."""
        return 0

    def on_fit_batch_end(self, batch, outputs, loss, should_step):
        if not should_step:
            return
        minutes = float(getattr(self.hparams, "max_minutes", 0) or 0)
        out_of_time = minutes > 0 and (time.monotonic() - self._t0) / 60 >= minutes
        out_of_steps = self.optimizer_step_limit is not None and self.optimizer_step >= self.optimizer_step_limit
        if out_of_time or out_of_steps:
            self.optimizer_step_limit = self.optimizer_step  # SpeechBrain's loop stops before the next batch
            self.stopped_mid_epoch = True
            # SpeechBrain resets these after the epoch loop; the checkpoint needs them as they are now
            self._counters_at_stop = {"step": self.step, "avg_train_loss": self.avg_train_loss,
                                      "num_yielded": self._train_iterator_position()}
            log.info("stopping at optimizer step %d (%s budget reached); run again with a larger budget to resume",
                     self.optimizer_step, "time" if out_of_time else "step")

    def _fit_valid(self, valid_set, epoch, enable):
        if self.budget_spent_at_start:
            return
        # A run stopped by its budget is not at an epoch end: its checkpoint is an intra-epoch
        # one (end_of_epoch=False), so that the resumed run finishes the epoch.
        if getattr(self, "stopped_mid_epoch", False) and valid_set is None:
            self._save_checkpoint(meta={})
            return
        super()._fit_valid(valid_set, epoch, enable)

    def _save_checkpoint(self, meta: dict) -> None:
        meta = {**meta, "optimizer_step": self.optimizer_step}
        if not getattr(self, "stopped_mid_epoch", False):
            self.checkpointer.save_and_keep_only(meta=meta, min_keys=[self.select_key] if self.select_key in meta else None)
            return
        # SpeechBrain resets step/avg_train_loss after the epoch loop, and the loop has already
        # fetched the next batch before it noticed the limit: put back the values at the stop.
        saved = {"step": self.step, "avg_train_loss": self.avg_train_loss, "num_yielded": self._train_iterator_position()}
        self._set_counters(self._counters_at_stop)
        try:
            self.checkpointer.save_and_keep_only(meta={**meta, INTRA_EPOCH_CKPT_FLAG: True}, end_of_epoch=False,
                                                 min_keys=[self.select_key] if self.select_key in meta else None)
        finally:
            self._set_counters(saved)

    def _train_iterator_position(self):
        loader = self.checkpointer.recoverables.get("dataloader-TRAIN") if self.checkpointer else None
        it = getattr(loader, "_speechbrain_iterator", None)
        return None if it is None else it._num_yielded

    def _set_counters(self, c: dict) -> None:
        self.step, self.avg_train_loss = c["step"], c["avg_train_loss"]
        loader = self.checkpointer.recoverables.get("dataloader-TRAIN")
        it = getattr(loader, "_speechbrain_iterator", None)
        if it is not None and c["num_yielded"] is not None:
            it._num_yielded = c["num_yielded"]

    def on_stage_end(self, stage, stage_loss, epoch=None):
        if stage == sb.Stage.TRAIN:
            self.train_stats = {"loss": stage_loss}
            return
        stats = {"loss": stage_loss, "CER": self.cer_metric.summarize("error_rate"),
                 "WER": self.wer_metric.summarize("error_rate")}
        if stage == sb.Stage.VALID:
            self.hparams.train_logger.log_stats(
                stats_meta={"epoch": epoch, "optimizer_step": self.optimizer_step,
                            **{f"lr_{k}": v.param_groups[0]["lr"] for k, v in (self.optimizers_dict or {}).items()}},
                train_stats=getattr(self, "train_stats", None), valid_stats=stats)
            self._save_checkpoint(meta={"WER": stats["WER"], "CER": stats["CER"], "loss": float(stats["loss"])})
        self.last_stats = stats

    # --- decoding --------------------------------------------------------------------
    @torch.no_grad()
    def transcribe(self, loader) -> dict[str, str]:
        """Greedy CTC hypotheses {id: text} for every utterance of ``loader`` (eval mode)."""
        self.modules.eval()
        out = {}
        for batch in loader:
            with self.evaluation_ctx:  # the run's precision (SpeechBrain's autocast context)
                log_probs, lens = self.forward_logprobs(batch.to(self.device), sb.Stage.TEST)
            for uid, h in zip(batch.id, sb.decoders.ctc_greedy_decode(log_probs, lens, blank_id=0)):
                out[uid] = decode(h, self.vocab)
        return out

    @property
    def select_key(self) -> str:
        """The validation score that picks the checkpoint to decode with (hparam ``select_by``).

        CER by default: early in training WER prefers a model that outputs nothing (exactly
        100%, while any wrong word also costs insertions), CER does not."""
        key = str(getattr(self.hparams, "select_by", "CER") or "CER")
        if key not in ("CER", "WER", "loss"):
            from corpora.errors import UserError
            raise UserError(f"select_by={key!r}", fix="use select_by=CER, WER or loss")
        return key

    def recover_for_decoding(self) -> dict:
        """Load the best checkpoint by validation ``select_by`` (the latest one if none has it yet)."""
        ckpt = self.checkpointer.find_checkpoint(min_key=self.select_key) or self.checkpointer.find_checkpoint()
        if ckpt is None:
            return {}
        self.checkpointer.load_checkpoint(ckpt)
        return {"checkpoint": str(ckpt.path), **{k: v for k, v in ckpt.meta.items() if k != "unixtime"}}


def fit_by_length(brain, hparams: dict, train_ds, valid_ds, out_dir, progress: bool, **extra) -> dict:
    """Both recipes' training: batches of similar length (a fresh order each epoch), then
    ``train_summary.json`` with the steps, epochs, budget stop and ``extra`` fields."""
    from corpora.atomic import write_json
    from downstream_asr.data import length_batch_sampler, loader_kwargs

    sampler = length_batch_sampler(train_ds, hparams["batch_seconds"], shuffle=True, seed=hparams["seed"])
    brain.train_sampler = sampler  # so that SpeechBrain calls set_epoch (a new order per epoch)
    valid_sampler = length_batch_sampler(valid_ds, hparams["valid_batch_seconds"], shuffle=False, seed=0)
    t0 = time.monotonic()
    brain.fit(hparams["epoch_counter"], train_ds, valid_ds, progressbar=progress,
              train_loader_kwargs=loader_kwargs(sampler, hparams["seed"]),
              valid_loader_kwargs=loader_kwargs(valid_sampler, hparams["seed"]))
    summary = {"out_dir": str(out_dir), "optimizer_step": brain.optimizer_step,
               "epoch": hparams["epoch_counter"].current, "stopped_by_budget": brain.stopped_by_budget,
               "train_seconds": round(time.monotonic() - t0, 2), **extra,
               "valid": getattr(brain, "last_stats", None)}
    write_json(out_dir / "train_summary.json", summary)
    summary["brain"] = brain
    return summary
