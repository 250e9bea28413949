"""`gendergap bench`: measure this machine's throughput for the cost table of `sweep --dry-run`.

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
import time

from corpora.base.atomic import write_json
from corpora.base.boundary import read_json
from gendergap.options import out_file
from ssl_pretrain.architecture import preset_config
from ssl_pretrain.device_options import DEVICE_HELP, PRECISION_HELP, PRECISIONS
from ssl_pretrain.families import forward_gflops

EPILOG = """examples:
  gendergap bench --check-precision --precision bf16   # is bf16 right on this CPU? (seconds; writes nothing)
  gendergap bench                       # CPU figures (and CUDA ones where a GPU is present)
  gendergap bench --device cuda --precision bf16 --out profile.json
  gendergap sweep --config study.yaml --dry-run --profile profile.json
"""


def _measure(preset: str, device: str, precision: str, seconds: float, train: bool) -> float:
    """Achieved GFLOP/s of one preset's encoder: extraction (train=False) or a training step."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from ssl_pretrain.device import autocast
    from ssl_pretrain.invariant import encode
    from transformers import Wav2Vec2Model

    torch.manual_seed(0)
    model = Wav2Vec2Model(preset_config(preset)).to(device)
    model.train(train)
    # a study's batches: short utterances (1.5 s, the built-in corpus's), 60 s of audio a batch
    wavs = 0.1 * torch.randn(40, int(16000 * 1.5), device=device)
    lengths = torch.full((40,), wavs.shape[1], device=device)

    def step():
        with autocast(device, precision), torch.set_grad_enabled(train):
            out, _ = encode(model, wavs, lengths, normalize=True, all_layers=not train)
            if train:
                out.float().pow(2).mean().backward()

    with FlopCounterMode(display=False) as counter:
        step()
    flops = counter.get_total_flops()
    n, start = 0, time.perf_counter()
    while n < 2 or time.perf_counter() - start < seconds:
        step()
        n += 1
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return flops * n / (time.perf_counter() - start) / 1e9


def _extraction_overhead(device: str, precision: str, gflops: float) -> float:
    """Seconds per audio second that extraction spends outside the model (reading audio, writing the
    store's shards): the tiny preset's features of 100 synthetic 1.5 s WAVs through the feature
    store, less the model's compute time at the measured ``gflops``."""
    import tempfile
    from pathlib import Path

    import numpy as np
    import pandas as pd
    import soundfile as sf
    import torch

    from ssl_pretrain.features import FrozenSSL
    from ssl_pretrain.feature_store import FeatureStore, SSLExtractor
    from transformers import Wav2Vec2Model

    config = preset_config("tiny")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for i in range(100):
            path = Path(tmp) / f"u{i:03d}.wav"
            sf.write(path, (0.1 * rng.standard_normal(24000)).astype(np.float32), 16000, subtype="PCM_16")
            rows.append({"id": f"u{i:03d}", "audio": str(path), "offset": 0.0, "duration": 1.5})
        torch.manual_seed(0)

        class Bench(SSLExtractor):   # a random-init tiny encoder in place of a checkpoint's
            key, slug = "bench-tiny", "bench-tiny"

            def describe(self):
                return {"kind": "bench", "preset": "tiny"}

            def open(self):
                if self._model is None:
                    self._model = FrozenSSL(Wav2Vec2Model(config), True, 16000, "bench", device=device,
                                            precision=precision)
                return self._model

        start = time.perf_counter()
        FeatureStore(Path(tmp) / "store").view(Bench(None, device, precision), pd.DataFrame(rows), "all",
                                               progress=False)
        seconds = time.perf_counter() - start
    audio = 150.0
    return max(0.0, (seconds - audio * forward_gflops(config) / gflops) / audio)


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
    from pathlib import Path

    from gendergap.cost import PROFILE_PATH
    from ssl_pretrain.device import device_and_precision, runtime_info

    import torch
    device, precision = device_and_precision(args.device, args.precision)
    if args.check_precision:
        return check_precision_path(device, precision)
    if not device.startswith("cuda"):
        torch.set_num_threads(args.threads)   # as a sweep's local job runs (one thread each, two at once)
    presets = ["tiny"] if args.quick else ["tiny", "base"]
    figures = {}
    for what, train in (("extract_gflops", False), ("train_gflops", True)):
        rates = {p: _measure(p, device, precision, args.seconds, train) for p in presets}
        for p, r in rates.items():
            print(f"{what.split('_')[0]:8s} {p:5s} {device} {precision}: {r:8.1f} GFLOP/s", flush=True)
        figures[what] = rates[presets[-1]]   # the larger model: what a real study runs
    tiny = _measure("tiny", device, precision, args.seconds, False) if presets[-1] != "tiny" else figures["extract_gflops"]
    overhead = _extraction_overhead(device, precision, tiny)
    figures["extract_overhead_s_per_audio_s"] = overhead
    print(f"extract  I/O   {device} {precision}: {overhead * 1000:8.2f} ms per audio second outside the model "
          "(reading audio, writing the store's shards)", flush=True)
    out = Path(args.out) if args.out else PROFILE_PATH
    # the other device's figures and any key this version does not write are kept, not dropped
    old = read_json(out, "throughput profile", shape=dict) if out.exists() else {}
    kind = "cuda" if device.startswith("cuda") else "cpu"
    devices = old.get("devices") if isinstance(old.get("devices"), dict) else {}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, {**old, "devices": {**devices, kind: figures}, "measured": time.strftime("%Y-%m-%dT%H:%M:%S"),
                     "presets": presets, "runtime": runtime_info(device, precision)})
    print(f"profile written: {out} ({kind}: {', '.join(f'{k} {v:.1f}' for k, v in figures.items())})")
    return 0


def register(subparsers, group: str, help: str) -> None:
    p = subparsers.add_parser(group, help=help, description=__doc__, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=out_file("--out"), default=None,
                   help="profile JSON to write (default ~/.cache/gendergap/profile.json, which sweep reads)")
    p.add_argument("--seconds", type=float, default=3.0, help="time each measurement this long (default 3)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (default 1: what each of a local sweep's "
                   "jobs uses)")
    p.add_argument("--quick", action="store_true", help="the tiny preset only (seconds; base is what a study runs)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--precision", default="fp32", choices=PRECISIONS, help=PRECISION_HELP)
    p.add_argument("--check-precision", action="store_true",
                   help="only run the precision's canary on the device (the model's kinds of op at the released "
                        "models' shapes, against fp32) and print each op's error and the path models take here: "
                        "plain autocast, autocast with the kernel library off, or refused")
    p.set_defaults(func=run)
