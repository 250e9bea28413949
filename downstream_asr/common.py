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

Intra-epoch checkpoints (every ``ckpt_interval_minutes`` / ``ckpt_interval_steps``) each carry a
completion marker written last, so that a job killed while saving resumes from the previous
complete checkpoint rather than from a half-written one. Several processes, gradient accumulation
and the checks of those run options: downstream_asr/cluster.py.
"""
from __future__ import annotations

import logging
import math
import random
import time
from pathlib import Path

import numpy as np
import speechbrain as sb
import torch
from speechbrain.core import INTRA_EPOCH_CKPT_FLAG
from speechbrain.utils.checkpoints import (
    METAFNAME,
    PARAMFILE_EXT,
    Checkpoint,
    mark_as_loader,
    mark_as_saver,
    register_checkpoint_hooks,
)
from speechbrain.utils.distributed import ddp_barrier, ddp_broadcast, if_main_process, is_distributed_initialized

from corpora.base.atomic import first_free, write_json
from corpora.base.errors import UserError
from corpora.base.strict_yaml import read_yaml
from downstream_asr.cluster import finish_distributed, world_size
from downstream_asr.errors import batch_option, too_long_for_ctc
from downstream_asr.text import decode
from downstream_asr.weights import record as record_weights
from ssl_pretrain.device import precision_guard
from ssl_pretrain.safe_load import load_torch_file

log = logging.getLogger(__name__)


@register_checkpoint_hooks
class RNGState:
    """Checkpoints torch / numpy / random generator states, so dropout after a resume draws the
    same numbers as an uninterrupted run would have."""

    # Tensors, ints, floats and tuples only, so the file loads with torch.load(weights_only=True)
    # (ssl_pretrain.safe_load): numpy's state array travels as a tensor.

    @mark_as_saver
    def _save(self, path):
        name, keys, pos, has_gauss, gauss = np.random.get_state()
        state = {"torch": torch.get_rng_state(), "random": random.getstate(),
                 "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                           "has_gauss": int(has_gauss), "gauss": float(gauss)}}
        if torch.cuda.is_available():  # dropout on a GPU draws from the CUDA generators
            state["cuda"] = torch.cuda.get_rng_state_all()
        torch.save(state, path)

    @mark_as_loader
    def _recover(self, path, end_of_epoch):
        del end_of_epoch
        state = load_torch_file(path, what="RNG state file")
        torch.set_rng_state(state["torch"])
        n = state["numpy"]
        np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
        random.setstate(state["random"])
        if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["cuda"])


@register_checkpoint_hooks
class SaveComplete:
    """The last recoverable of a checkpoint: its file says every other file was written.

    SpeechBrain writes CKPT.yaml first and the parameter files after it, so a job killed while
    saving leaves a checkpoint that looks valid and cannot be loaded. Checkpoints whose meta
    carries ``MARKED`` count only once this file exists (older ones, without the key, are trusted)."""

    KEY = "complete"  # its name among the recoverables
    FILE = KEY + PARAMFILE_EXT  # the file SpeechBrain saves it to
    MARKED = "completion_marker"

    @mark_as_saver
    def _save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            f.write("complete\n")

    @mark_as_loader
    def _recover(self, path, end_of_epoch):
        del path, end_of_epoch


def set_aside_incomplete_checkpoints(save_dir) -> list[str]:
    """Rename checkpoints a kill left half-written (marked, without their marker) to
    ``INCOMPLETE-<name>``, which SpeechBrain does not list; returns the names set aside."""
    moved = []
    for meta in sorted(Path(save_dir).glob("CKPT*/CKPT.yaml")):
        ckpt = meta.parent
        try:
            values, _ = read_yaml(meta, "", what="checkpoint meta file")
            plain, marked = isinstance(values, dict), bool(isinstance(values, dict) and values.get(SaveComplete.MARKED))
        except UserError:
            # cut short by a kill -- or not plain YAML (a tag SpeechBrain's own loader would fail on, in a
            # traceback): either way SpeechBrain must not pick this checkpoint
            plain, marked = False, True
        if not plain or (marked and not (ckpt / SaveComplete.FILE).exists()):
            target = first_free(ckpt.with_name("INCOMPLETE-" + ckpt.name))   # an earlier one set aside stays
            ckpt.rename(target)
            log.warning("checkpoint %s was not completely written (the job was killed while saving): set aside as %s",
                        ckpt, target.name)
            moved.append(ckpt.name)
    return moved


class SafeCheckpointer(sb.utils.checkpoints.Checkpointer):
    """SpeechBrain's Checkpointer, loading its parameter files (modules, optimizers, grad scaler)
    through the project's allowlist loader (ssl_pretrain.safe_load): SpeechBrain's own hook calls
    ``torch.load`` without ``weights_only``, so a ``save/CKPT*/*.ckpt`` replaced in a run directory
    someone hands you could run code, or give a 60-line traceback. A refused file is one line
    naming it; ``trust`` (--trust-checkpoint) unpickles fully. The recipes' templates build this
    class (hparams/*.yaml ``checkpointer``); rundir.build_hparams sets ``trust``."""

    trust = False

    @staticmethod
    def _construct_checkpoint_objects(checkpoint_dirs):
        """SpeechBrain's, with each CKPT.yaml read by the boundary's strict YAML reader (plain values,
        no tags, bounded size and depth) and its ``unixtime`` (what SpeechBrain orders checkpoints
        by) checked: a crafted or hand-edited meta file is one line naming it, not a traceback."""
        fix = "restore the run directory's own save/ folder, or train the run again in a new --out"
        out = []
        for ckpt_dir in checkpoint_dirs:
            meta_path = Path(ckpt_dir) / METAFNAME
            meta, _ = read_yaml(meta_path, fix, what="SpeechBrain checkpoint meta file")
            stamp = meta.get("unixtime") if isinstance(meta, dict) else None
            if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp):
                raise UserError("is not a SpeechBrain checkpoint meta file (a mapping with a numeric unixtime)",
                                path=meta_path, fix=fix)
            params = {f.stem: f for f in Path(ckpt_dir).iterdir() if f.suffix == PARAMFILE_EXT}
            out.append(Checkpoint(Path(ckpt_dir), meta, params))
        return out

    def load_checkpoint(self, checkpoint):
        from speechbrain.utils.checkpoints import DEFAULT_LOAD_HOOKS, get_default_hook, torch_recovery
        for name, obj in self.recoverables.items():   # also those added since (optimizers, the scaler)
            if name not in self.custom_load_hooks and get_default_hook(obj, DEFAULT_LOAD_HOOKS) is torch_recovery:
                self.custom_load_hooks[name] = self._safe_recovery
        return super().load_checkpoint(checkpoint)

    def _safe_recovery(self, obj, path, end_of_epoch):
        """speechbrain.utils.checkpoints.torch_recovery, with the safe loader."""
        from speechbrain.utils.checkpoints import hook_on_loading_state_dict_checkpoint

        del end_of_epoch
        state = hook_on_loading_state_dict_checkpoint(
            load_torch_file(path, trust=self.trust, what="SpeechBrain checkpoint file"))
        try:
            try:
                obj.load_state_dict(state, strict=True)
            except TypeError:   # optimizers take no `strict`
                obj.load_state_dict(state)
        except (RuntimeError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise UserError(f"does not fit this run's model ({type(e).__name__}: {str(e).splitlines()[0][:160]})",
                            path=path, fix="restore the run directory's own save/ folder, or train the run again "
                                           "in a new --out") from None


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
        if stage == sb.Stage.TRAIN:
            self._say_too_long_for_ctc(batch.id, tokens, tokens_lens, log_probs, lens)
        loss = self.hparams.ctc_cost(log_probs, tokens, lens, tokens_lens)
        if stage != sb.Stage.TRAIN:
            hyps = sb.decoders.ctc_greedy_decode(log_probs, lens, blank_id=0)
            texts = [decode(h, self.vocab) for h in hyps]
            self.cer_metric.append(batch.id, [list(t) for t in texts], [list(t) for t in batch.text])
            self.wer_metric.append(batch.id, [t.split() for t in texts], [t.split() for t in batch.text])
            self._keep_utterance_losses(batch.id, log_probs, lens, tokens, tokens_lens)
        return loss

    def _keep_utterance_losses(self, ids, log_probs, lens, tokens, tokens_lens) -> None:
        """The validation loss as a mean over utterances. SpeechBrain averages per-batch means, so an
        utterance weighs 1 / (its batch's size) and the loss -- a checkpoint's score with
        select_by=loss -- moved with valid_batch_seconds. CER and WER are pooled over utterances already."""
        per_utt = self.hparams.ctc_cost(log_probs, tokens, lens, tokens_lens, reduction="none")
        # divided by the transcript's length, as the "mean" reduction of torch's ctc_loss does
        n_tokens = torch.round(tokens_lens * tokens.shape[1]).clamp(min=1).to(per_utt.device)
        self.eval_losses.update(zip(ids, (per_utt.float() / n_tokens).double().cpu().tolist()))

    def _say_too_long_for_ctc(self, ids, tokens, tokens_lens, log_probs, lens) -> None:
        """Training utterances whose transcript needs more CTC frames than the model gives them:
        SpeechBrain's ctc_loss zeroes their infinite loss (zero_infinity) without a word, so they
        would silently teach nothing. Say so, once per utterance (downstream_asr/errors.py)."""
        seen = self.__dict__.setdefault("ctc_too_long", {})
        for uid, need, have in too_long_for_ctc(ids, tokens, tokens_lens, log_probs, lens):
            if uid not in seen:
                seen[uid] = (need, have)
                log.warning("utterance %s: its transcript needs %d CTC frames (labels, plus a blank between repeated "
                            "ones) and the model gives its audio %d: left out of the loss -- check its segment "
                            "(transcript and audio may not match), or drop it from the training CSV", uid, need, have)

    def on_stage_start(self, stage, epoch=None):
        if stage != sb.Stage.TRAIN:
            self.cer_metric = sb.utils.metric_stats.ErrorRateStats()
            self.wer_metric = sb.utils.metric_stats.ErrorRateStats()
            self.eval_losses = {}

    def on_fit_start(self):
        self.stopped_mid_epoch = False
        self._t0 = time.monotonic()
        max_steps = int(getattr(self.hparams, "max_steps", 0) or 0)
        self.optimizer_step_limit = max_steps if max_steps > 0 else None
        if self.checkpointer is not None:
            if if_main_process():
                set_aside_incomplete_checkpoints(self.checkpointer.checkpoints_dir)
            ddp_barrier()  # no rank looks for a checkpoint before they are set aside
        super().on_fit_start()  # DDP wrapping, init_optimizers, recover the latest checkpoint
        if self.checkpointer is not None and SaveComplete.KEY not in self.checkpointer.recoverables:
            # added after every other recoverable: its file is the last one a save writes
            self.checkpointer.add_recoverable(SaveComplete.KEY, SaveComplete(), optional_load=True)
        if self.optimizer_step:
            log.info("resumed at optimizer step %d (%d epoch(s) complete%s)", self.optimizer_step,
                     self.hparams.epoch_counter.current, f", {self.step} batch(es) into the next" if self.step else "")
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

    def _train_loader_specifics(self, dataset, loader_kwargs):
        loader_kwargs = super()._train_loader_specifics(dataset, loader_kwargs)
        wrapper = loader_kwargs.get("batch_sampler")
        if isinstance(wrapper, sb.dataio.sampler.DistributedSamplerWrapper):
            # The length-bucketed sampler already shuffles its batches per epoch, with the same seed
            # on every rank: the wrapper only deals them out (rank r takes batches r, r+N, ...).
            # Shuffling again would make a step of N ranks differ from N accumulated batches of one.
            wrapper.shuffle = False
        return loader_kwargs

    def _should_save_intra_epoch_ckpt(self, last_ckpt_time, steps_since_ckpt):
        # Only right after an optimizer step: accumulated gradients are not part of a checkpoint,
        # so a save between two accumulated batches would lose the first one on a resume. Every
        # rank has the same self.step, so they all skip (or all reach SpeechBrain's broadcast).
        if self.step % self.grad_accumulation_factor:
            return False
        return super()._should_save_intra_epoch_ckpt(last_ckpt_time, steps_since_ckpt)

    def _save_intra_epoch_ckpt(self):
        # SpeechBrain's interval checkpoint (keep the newest interval one), with our meta
        self.checkpointer.save_and_keep_only(
            end_of_epoch=False, num_to_keep=1, ckpt_predicate=lambda c: INTRA_EPOCH_CKPT_FLAG in c.meta,
            meta=self._meta({INTRA_EPOCH_CKPT_FLAG: True}), verbosity=logging.DEBUG)
        log.info("intra-epoch checkpoint at optimizer step %d", self.optimizer_step)

    def _meta(self, meta: dict) -> dict:
        return {**meta, "optimizer_step": self.optimizer_step, "world_size": world_size(),
                SaveComplete.MARKED: True}

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
        if minutes > 0:
            out_of_time = ddp_broadcast(out_of_time)  # rank 0's clock decides, or the ranks part ways
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
        meta = self._meta(meta)
        if not getattr(self, "stopped_mid_epoch", False):
            self.checkpointer.save_and_keep_only(meta=meta,
                                                 min_keys=[self.select_key] if self.select_key in meta else None)
            return
        # SpeechBrain resets step/avg_train_loss after the epoch loop, and the loop has already
        # fetched the next batch before it noticed the limit: put back the values at the stop.
        saved = {"step": self.step, "avg_train_loss": self.avg_train_loss,
                 "num_yielded": self._train_iterator_position()}
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
            # every rank saw its own batches: the mean over ranks is the loss of all of them
            # (each rank has as many batches), what one process accumulating them would report
            loss = torch.tensor(float(stage_loss), dtype=torch.float64)
            if is_distributed_initialized():
                torch.distributed.all_reduce(loss)  # a sum: gloo has no average
                loss /= world_size()
            self.train_stats = {"loss": float(loss)}
            return
        if self.eval_losses:
            # summed exactly (fsum) in id order: the same number whatever the batches and their order
            stage_loss = math.fsum(self.eval_losses[k] for k in sorted(self.eval_losses)) / len(self.eval_losses)
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
            # the run's precision (SpeechBrain's autocast context), on the path its canary chose
            with precision_guard(str(self.device), self.precision), self.evaluation_ctx:
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
            raise UserError(f"select_by={key!r}", fix="use select_by=CER, WER or loss")
        return key

    def decoding_checkpoint(self):
        """The checkpoint decoding uses: the best by validation ``select_by`` (the latest one if none
        has it yet); None when there is none."""
        return self.checkpointer.find_checkpoint(min_key=self.select_key) or self.checkpointer.find_checkpoint()

    def recover_for_decoding(self, ckpt=None) -> dict:
        """Load ``ckpt`` (default: ``decoding_checkpoint()``) for decoding; {} when there is none."""
        ckpt = ckpt or self.decoding_checkpoint()
        if ckpt is None:
            return {}
        self.checkpointer.load_checkpoint(ckpt)
        return {"checkpoint": str(ckpt.path), **{k: v for k, v in ckpt.meta.items() if k != "unixtime"}}


def fit_by_length(brain, hparams: dict, train_ds, valid_ds, out_dir, progress: bool, **extra) -> dict:
    """Both recipes' training: batches of similar length (a fresh order each epoch), then
    ``train_summary.json`` with the steps, epochs, budget stop and ``extra`` fields."""
    from downstream_asr.data import length_batch_sampler, loader_kwargs

    sampler = length_batch_sampler(train_ds, hparams["batch_seconds"], shuffle=True, seed=hparams["seed"])
    brain.train_sampler = sampler  # so that SpeechBrain calls set_epoch (a new order per epoch;
    # under DDP, SpeechBrain replaces it by its DistributedSamplerWrapper, which passes set_epoch on)
    valid_sampler = length_batch_sampler(valid_ds, hparams["valid_batch_seconds"], shuffle=False, seed=0)
    t0 = time.monotonic()
    # SpeechBrain opens its own autocast; the precision's canary may need the kernel library off
    with batch_option("batch_seconds", hparams["batch_seconds"]), precision_guard(str(brain.device), brain.precision):
        brain.fit(hparams["epoch_counter"], train_ds, valid_ds, progressbar=progress,
                  train_loader_kwargs=loader_kwargs(sampler, hparams["seed"]),
                  valid_loader_kwargs=loader_kwargs(valid_sampler, hparams["seed"]))
    too_long = getattr(brain, "ctc_too_long", {})
    if too_long:
        log.warning("%d training utterance(s) had transcripts longer than CTC can align to their frames and taught "
                    "nothing (listed in train_summary.json, ctc_too_long)", len(too_long))
    ranks, accum = world_size(), int(brain.grad_accumulation_factor)
    summary = {"out_dir": str(out_dir), "optimizer_step": brain.optimizer_step,
               "epoch": hparams["epoch_counter"].current, "stopped_by_budget": brain.stopped_by_budget,
               "train_seconds": round(time.monotonic() - t0, 2), **extra,
               "train_loss": (getattr(brain, "train_stats", None) or {}).get("loss"),
               "world_size": ranks, "grad_accum": accum,
               # padded seconds of audio per optimizer step: per-rank batch x ranks x accumulation
               "global_batch_seconds": float(hparams["batch_seconds"]) * ranks * accum,
               "ctc_too_long": {uid: {"frames_needed": n, "frames": t} for uid, (n, t) in sorted(too_long.items())},
               "valid": getattr(brain, "last_stats", None)}
    if if_main_process():
        write_json(out_dir / "train_summary.json", summary)
        # what decoding will load, by content: a result is this run's model's (downstream_asr/weights.py)
        record_weights(out_dir, brain.decoding_checkpoint())
    summary["main_process"] = if_main_process()
    finish_distributed()
    summary["brain"] = brain
    return summary
