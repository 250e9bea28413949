"""Where a model runs and in what precision, for every command that runs one.

    device = resolve_device("auto")              # "cuda:0" when CUDA is there, else "cpu"
    check_precision("bf16", device)              # refuses what the device cannot do
    with autocast(device, "bf16"):               # forward passes in bf16, weights stay fp32
        states = model(x)
    row["runtime"] = runtime_info(device, "bf16")  # device name, precision, torch / CUDA versions

A reduced precision is used only after it proved itself on the device: the first autocast of a
(device, precision) pair in a process runs ssl_pretrain.precision_canary's canary, which takes the
plain path, a fallback with the device's kernel library off, or refuses (bf16 grouped convolutions
are wrong on AMX CPUs' oneDNN). runtime_info records the path taken.

Mixed precision only: weights (and, in training, the optimizer's master copy) stay fp32 and
autocast picks the dtype per op, as SpeechBrain's ``precision`` option and fairseq's
``--fp16``/``--bf16`` flags do. fp16 is CUDA-only (SpeechBrain refuses it on a CPU, and CPU
kernels for half are slow); bf16 autocast runs on any recent CPU, so the CPU tests exercise it.
"""
from __future__ import annotations

import contextlib
import functools
import platform

import torch

from corpora.base.errors import UserError
from ssl_pretrain.device_options import DEVICES, PRECISIONS
from ssl_pretrain.precision_canary import TOLERANCE, Shapes, checked_path

# Subnormal floats (magnitudes below 1.2e-38) take a slow microcode path on x86 CPUs. fairseq's
# speech-to-text training on FBANK features spent ~60 % of its time on them (an epoch 30 s against
# 12 s flushed, the same losses; docs/measurements.md), while SpeechBrain's fine-tuning, the frozen
# heads and the probes run no faster flushed. So the fairseq processes flush them to zero (FTZ/DAZ,
# as TensorFlow's CPU thread pools do by default): results move in the last bits only, and the steps
# whose results come from a fairseq process name this in their keys, so results made before are redone.
FAIRSEQ_SUBNORMALS = "flushed to zero"


def flush_subnormals() -> None:
    """Flush subnormal floats to zero in this process's CPU arithmetic (a no-op on CUDA kernels)."""
    torch.set_flush_denormal(True)


def _no_cuda_reason() -> str:
    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is a CPU-only build"
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU"


def resolve_device(spec: str | None = "auto") -> str:
    """``auto|cpu|cuda|cuda:N`` -> a concrete torch device string (``cpu`` or ``cuda:N``)."""
    spec = str(spec or "auto").strip().lower()
    if spec == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if spec == "cpu":
        return "cpu"
    if spec == "cuda" or spec.startswith("cuda:"):
        index = spec.partition(":")[2] or "0"
        if not index.isdigit():
            raise UserError(f"--device {spec!r}: the GPU index must be a number", fix="use cuda, cuda:0, cuda:1, ...")
        if not torch.cuda.is_available():
            raise UserError(f"--device {spec}: no CUDA device here ({_no_cuda_reason()})",
                            fix="use --device cpu, or --device auto to take a GPU only when there is one")
        count = torch.cuda.device_count()
        if int(index) >= count:
            raise UserError(f"--device {spec}: this machine has {count} GPU(s), cuda:0..cuda:{count - 1}",
                            fix=f"pick an index below {count}")
        return f"cuda:{int(index)}"
    raise UserError(f"unknown --device {spec!r}", fix=f"use one of {DEVICES}")


def check_precision(precision: str | None, device: str) -> str:
    """The precision name, refused with one clear line when ``device`` cannot run it."""
    precision = str(precision or "fp32").strip().lower()
    if precision not in PRECISIONS:
        raise UserError(f"unknown --precision {precision!r}", fix=f"use one of {', '.join(PRECISIONS)}")
    if precision == "fp16" and not device.startswith("cuda"):
        raise UserError("--precision fp16 needs a CUDA device (half-precision autocast is GPU-only here)",
                        fix="use --precision bf16 on a CPU, or --device cuda")
    if precision == "bf16" and device.startswith("cuda") and not torch.cuda.is_bf16_supported():
        raise UserError(f"--precision bf16: {torch.cuda.get_device_name(device)} has no bf16 support",
                        fix="use --precision fp16 on this GPU (V100 and older)")
    return precision


def job_device(device: str, gpus: int) -> str:
    """A study job's device as planned: ``auto`` is the GPU only when the job asked its scheduler
    for one (``resources.gpus``), else the CPU, so a job never takes a GPU SLURM did not give it;
    anything else as given. The job resolves it when it runs (device_and_precision)."""
    return "cpu" if device == "auto" and gpus < 1 else device


def device_and_precision(device: str | None, precision: str | None) -> tuple[str, str]:
    """Both options resolved and checked together: what every command calls first."""
    dev = resolve_device(device)
    return dev, check_precision(precision, dev)


def autocast(device: str, precision: str, shapes=None):
    """A context for forward passes: autocast to the precision's dtype on the path its canary chose
    (``shapes``: a precision_canary.Shapes of the model run, checked besides the released models'),
    or nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return precision_path(device, precision, shapes).context()


def precision_guard(device: str, precision: str):
    """For an engine that opens its own autocast (SpeechBrain's ``precision``): the checked path's
    kernel-library switch alone (nothing for fp32 or a plain path)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return precision_path(device, precision).guard()


def precision_path(device: str, precision: str, shapes: Shapes | None = None):
    """The path the canary chose for ``precision`` on ``device`` (precision_canary.PrecisionPath);
    one UserError line when its kernels are wrong there on every path."""
    path = checked_path(device, precision, shapes)
    if not path.usable:
        op, err = path.worst()
        raise UserError(f"--precision {precision} on {device} ({device_name(device)}): its kernels are wrong here "
                        f"({op} off from fp32 by {err:.0%}, tolerance {TOLERANCE:.0%}, also with the kernel "
                        f"library off)", fix="use --precision fp32 on this device")
    return path


@functools.lru_cache(maxsize=None)
def device_name(device: str) -> str:
    """A human name for the hardware: the GPU's model, or the CPU's."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def runtime_info(device: str, precision: str) -> dict:
    """What every result row records about the hardware and numerics that produced it, the path
    the precision's canary chose included (runs the canary on the pair's first use)."""
    return {"device": device, "device_name": device_name(device), "precision": precision,
            "precision_path": precision_path(device, precision).record(),
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if device.startswith("cuda") else None}
