"""Cluster-grade CTC training runs, all through SpeechBrain's own machinery:

- several processes (``torchrun --nproc_per_node N``): ``distributed_run_opts`` joins the process
  group (gloo on CPU, nccl on CUDA) and Brain wraps the modules in DDP; each rank takes every
  N-th batch of the length-bucketed sampler (SpeechBrain's DistributedSamplerWrapper), so one
  step of N ranks sees the batches one rank would accumulate with ``grad_accumulation_factor`` N;
  ``main_first`` lets rank 0 write the run directory before the others read it;
- gradient accumulation (run option ``grad_accumulation_factor``) and intra-epoch checkpoint
  intervals, checked before SpeechBrain sees them (``check_run_options``).

The training loop that uses them is downstream_asr.common.CTCBrain.
"""
from __future__ import annotations

import os

import torch
from speechbrain.utils.distributed import ddp_barrier, ddp_init_group, if_main_process, is_distributed_initialized

from corpora.base.errors import UserError


def launched_by_torchrun() -> bool:
    """SpeechBrain's own test (Brain.distributed_launch): RANK and LOCAL_RANK are set."""
    return os.environ.get("RANK") is not None and os.environ.get("LOCAL_RANK") is not None


def distributed_run_opts(device: str) -> dict:
    """Under torchrun: join the process group through SpeechBrain (``ddp_init_group``; gloo on a
    CPU, nccl on CUDA with rank LOCAL_RANK on GPU LOCAL_RANK) and return the run options that
    make Brain wrap its modules in DDP. In a single process: {}."""
    if not launched_by_torchrun():
        return {}
    cuda = str(device).startswith("cuda")
    backend = "nccl" if cuda else "gloo"
    if cuda:
        device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
    if not is_distributed_initialized():
        ddp_init_group({"distributed_backend": backend})
    # find_unused_parameters: some trainable parameters get no gradient in some steps (encoder
    # frozen for the first freeze_encoder_steps, layerdrop, masked_spec_embed of real checkpoints);
    # without it DDP waits forever for their gradients.
    return {"distributed_backend": backend, "device": device, "find_unused_parameters": True}


def world_size() -> int:
    return torch.distributed.get_world_size() if is_distributed_initialized() else 1


def main_first(prepare):
    """``prepare(write=True)`` on the main process, then -- once it has written the run directory
    -- ``prepare(write=False)`` on the others; returns this process's result."""
    result = prepare(write=True) if if_main_process() else None
    ddp_barrier()
    return result if if_main_process() else prepare(write=False)


def finish_distributed() -> None:
    """Wait for every rank, then leave the process group: rank 0 decodes and scores alone, and
    SpeechBrain's checkpoint loading would otherwise wait for ranks that have already exited."""
    if is_distributed_initialized():
        ddp_barrier()
        torch.distributed.destroy_process_group()


def check_run_options(hparams: dict, run_opts: dict) -> None:
    """Gradient accumulation and checkpoint intervals, checked before SpeechBrain sees them
    (it calls sys.exit on two intervals at once)."""
    def value(key, default=0):
        found = run_opts.get(key, hparams.get(key))
        return default if found is None else found

    accum = value("grad_accumulation_factor", 1)
    if not isinstance(accum, int) or accum < 1:
        raise UserError(f"grad_accumulation_factor (--grad-accum) must be a whole number >= 1, not {accum!r}",
                        fix="e.g. --grad-accum 2")
    minutes, steps = value("ckpt_interval_minutes"), value("ckpt_interval_steps")
    if not isinstance(minutes, (int, float)) or minutes < 0 or not isinstance(steps, int) or steps < 0:
        raise UserError(f"checkpoint intervals must be >= 0 (ckpt_interval_minutes={minutes!r}, "
                        f"ckpt_interval_steps={steps!r})", fix="e.g. --ckpt-interval-minutes 15")
    if minutes > 0 and steps > 0:
        raise UserError("ckpt_interval_minutes and ckpt_interval_steps are both set: SpeechBrain takes one",
                        fix="keep --ckpt-interval-minutes, or ckpt_interval_steps=N, not both")
