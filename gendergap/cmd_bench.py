"""`gendergap bench`: measure this machine's throughput for the cost table of `sweep --dry-run`
(ssl_pretrain.throughput measures, gendergap.cost keeps the profile).

Runs random-init wav2vec 2.0 encoders of the pretraining presets (tiny, and base unless --quick)
on random audio in the study's batches (1.5 s utterances, 60 s a batch; on a CPU one thread, as
each local sweep job runs): frozen extraction (the batch-invariant forward, every layer) and a
training step (forward + backward), and reports achieved GFLOP/s (FLOPs counted by torch's
FlopCounterMode); then 100 synthetic WAVs through the feature store, whose time beyond the model's
is the extraction's I/O overhead per audio second.
The figures go to a profile JSON (default ~/.cache/gendergap/profile.json) that `sweep` and
`study` read; figures it does not measure keep the defaults of gendergap/cost.py.
"""
from __future__ import annotations

import argparse

from corpora.base.errors import UserError
from gendergap.options import amount, count, out_file
from ssl_pretrain.device_options import DEVICE_HELP, PRECISION_HELP, PRECISIONS

EPILOG = """examples:
  gendergap bench --check-precision --precision bf16   # is bf16 right on this CPU? (seconds; writes nothing)
  gendergap bench --device cuda --check-precision --precision fp16   # and bf16: on a GPU node
  gendergap bench                       # CPU figures (and CUDA ones where a GPU is present)
  gendergap bench --device cuda --precision bf16 --out profile.json
  gendergap sweep --config study.yaml --dry-run --profile profile.json
"""


def check_precision_path(device: str, precision: str) -> int:
    """Print the precision canary's verdict on this device (ssl_pretrain.precision_canary): every op's
    relative error against fp32 and the path a model of that precision takes here; 2 when refused."""
    from ssl_pretrain.device import device_name
    from ssl_pretrain.precision_canary import checked_path

    path = checked_path(device, precision)
    print(f"{device_name(device)}; torch {torch_version()}")
    print(path.report())
    if not path.usable:
        print(f"refused: --precision {precision} is wrong on this device on every path; use --precision fp32")
        return 2
    return 0


def torch_version() -> str:
    import torch
    return f"{torch.__version__} (oneDNN {torch.backends.mkldnn.is_available()}, CUDA {torch.version.cuda})"


def run(args) -> int:
    import torch

    from gendergap.cost import PROFILE_PATH, save_profile
    from ssl_pretrain.device import device_and_precision, runtime_info
    from ssl_pretrain.throughput import measure_throughput
    device, precision = device_and_precision(args.device, args.precision)
    if args.check_precision:
        if precision == "fp32":   # the canary compares a precision with fp32: fp32 against itself says nothing
            raise UserError("--check-precision checks fp16 or bf16 against fp32: give --precision fp16 or bf16",
                            fix="e.g. gendergap bench --check-precision --precision bf16")
        return check_precision_path(device, precision)
    if not device.startswith("cuda"):
        torch.set_num_threads(args.threads)   # as a sweep's local job runs (one thread each, two at once)
    figures, presets = measure_throughput(device, precision, seconds=args.seconds, quick=args.quick,
                                          say=lambda line: print(line, flush=True))
    out = save_profile(args.out or PROFILE_PATH, device, figures, presets, runtime_info(device, precision))
    kind = "cuda" if device.startswith("cuda") else "cpu"
    print(f"profile written: {out} ({kind}: {', '.join(f'{k} {v:.1f}' for k, v in figures.items())})")
    return 0


def register(subparsers, group: str, help: str) -> None:
    p = subparsers.add_parser(group, help=help, description=__doc__, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=out_file("--out"), default=None,
                   help="profile JSON to write (default ~/.cache/gendergap/profile.json, which sweep reads)")
    p.add_argument("--seconds", type=amount("--seconds", hi=3600, lo=0.01), default=3.0,
                   help="time each measurement this long (default 3)")
    p.add_argument("--threads", type=count("--threads", 1, 1024), default=1,
                   help="CPU threads, 1-1024 (default 1: what each of a local sweep's jobs uses)")
    p.add_argument("--quick", action="store_true", help="the tiny preset only (seconds; base is what a study runs)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--precision", default="fp32", choices=PRECISIONS, help=PRECISION_HELP)
    p.add_argument("--check-precision", action="store_true",
                   help="only run the canary of --precision (fp16 or bf16; with the default fp32 there is nothing "
                        "to check) on the device (the model's kinds of op at the released models' shapes, against "
                        "fp32) and print each op's error and the path models take here: plain autocast, autocast "
                        "with the kernel library off, or refused")
    p.set_defaults(func=run)
