"""The feature store against the three per-consumer extractions it replaced, and (with --throughput)
extraction speed per device and precision.

1. Store vs per-consumer (the built-in study's corpus, one shipped checkpoint): the old way ran
   the model three times per checkpoint and wrote fp32 ``.npy`` files per utterance -- frozen ASR
   every layer of the synth-fr train/valid/test rows, ST layer 1 of synth-fr and synth-gender,
   the probes every layer of the probe rows. The store extracts every layer of the union once,
   into fp16 shards. Printed: wall time and disk of each, and the ratios.
2. --throughput: audio-seconds per second of the ``base`` and ``large`` presets (random weights,
   10 s utterances) in fp32, fp16 and bf16 on --device, and MFU (model FLOPs counted by torch's
   FlopCounterMode / the device's peak dense FLOP/s, for known GPUs).

    .venv/bin/python benchmarks/bench_features.py                   # part 1, ~1-2 min on 2 cores
    .venv/bin/python benchmarks/bench_features.py --throughput --device cuda
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ssl_pretrain.device import device_and_precision, device_name  # noqa: E402
from ssl_pretrain.feature_store import FeatureStore, SSLExtractor, bytes_on_disk  # noqa: E402
from ssl_pretrain.features import length_buckets, read_segment  # noqa: E402

SHIPPED = Path(__file__).resolve().parent.parent / "ssl_pretrain" / "shipped"
# peak dense tensor-core FLOP/s (fp16/bf16) and fp32 (non-tensor) of the GPUs users have
PEAK = {"H200": (989e12, 67e12), "H100": (989e12, 67e12), "A100": (312e12, 19.5e12), "V100": (125e12, 15.7e12)}


def naive_extract(ssl, rows: pd.DataFrame, out: Path, layer, batch_seconds: float = 60.0) -> None:
    """The old per-consumer export: length-bucketed batches, one fp32 .npy per utterance."""
    out.mkdir(parents=True, exist_ok=True)
    durations = rows["duration"].astype(float).tolist()
    for batch in length_buckets(durations, batch_seconds):
        waves = [read_segment(rows["audio"].iloc[i], 0.0, durations[i], ssl.sample_rate) for i in batch]
        states, mask = ssl.hidden_states(waves)
        for b, i in enumerate(batch):
            x = states[:, b, :int(mask[b].sum())] if layer == "all" else states[layer, b, :int(mask[b].sum())]
            np.save(out / f"{rows['id'].iloc[i]}.npy", x.numpy().astype(np.float32))


def store_vs_naive(args) -> None:
    from analysis.probing import probe_splits
    from corpora.synth import synthesize
    from corpora.utterances import UtteranceTable
    from ssl_pretrain.checkpoints import CheckpointRef

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        table_path = synthesize(tmp / "corpus", size=args.size, seed=0)
        table = UtteranceTable.load(table_path).audio_rows()
        print(f"corpus: built-in '{args.size}', {len(table)} utterances ({time.perf_counter() - t0:.0f} s to make)")
        splits = ["train", "valid", "test"]
        fr = table[(table["corpus"] == "synth-fr") & table["split"].isin(splits)].reset_index(drop=True)
        gender = table[(table["corpus"] == "synth-gender") & table["split"].isin(splits)].reset_index(drop=True)
        probes = pd.concat(probe_splits(fr, seed=0).values(), ignore_index=True)
        ref = CheckpointRef.resolve(SHIPPED / "tiny-female.safetensors")
        ssl = ref.load()
        consumers = {"asr-frozen (all layers)": (fr, "all"), "st + gender-st (layer 1)": (pd.concat([fr, gender]), 1),
                     "probes (all layers)": (probes, "all")}
        union = pd.concat([fr, gender], ignore_index=True)
        for path in union["audio"]:  # both ways read warm files
            Path(path).read_bytes()
        naive_t, naive_b, store_t = {}, {}, float("inf")
        for rep in range(args.repeats_store):  # alternate the two ways; keep each one's best time
            for name, (rows, layer) in consumers.items():
                out = tmp / f"naive{rep}" / name.split()[0]
                t0 = time.perf_counter()
                naive_extract(ssl, rows.reset_index(drop=True), out, layer)
                naive_t[name] = min(naive_t.get(name, float("inf")), time.perf_counter() - t0)
                naive_b[name] = bytes_on_disk(out)
            t0 = time.perf_counter()
            FeatureStore(tmp / f"store{rep}").view(SSLExtractor(ref), union, "all", progress=False)
            store_t, store_b = min(store_t, time.perf_counter() - t0), bytes_on_disk(tmp / f"store{rep}")
    hours = union["duration"].sum() / 3600
    print(f"model: {ref.name} ({ssl.num_layers} layers x {ssl.dim}); {hours * 60:.1f} min of audio; "
          f"{torch.get_num_threads()} threads on {device_name('cpu')}; best of {args.repeats_store}")
    print(f"{'per-consumer extraction':34s} {'wall':>8s} {'disk':>10s}")
    for name in consumers:
        print(f"  {name:32s} {naive_t[name]:7.1f}s {naive_b[name] / 1e6:8.1f} MB")
    total_t, total_b = sum(naive_t.values()), sum(naive_b.values())
    print(f"  {'total (three extractions, fp32)':32s} {total_t:7.1f}s {total_b / 1e6:8.1f} MB")
    print(f"  {'feature store (once, fp16 shards)':32s} {store_t:7.1f}s {store_b / 1e6:8.1f} MB")
    print(f"store vs per-consumer: {total_t / store_t:.2f}x less time, {total_b / store_b:.2f}x less disk")


def throughput(args) -> None:
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import Wav2Vec2Model

    from ssl_pretrain.architecture import preset_config
    from ssl_pretrain.features import FrozenSSL

    device, _ = device_and_precision(args.device, "fp32")
    name = device_name(device)
    peak = next((v for k, v in PEAK.items() if k in name), None)
    print(f"\nthroughput on {name} ({device}); {args.batch} x {args.seconds:g} s utterances per batch, "
          f"torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"{'preset':8s} {'precision':9s} {'audio-s/s':>10s} {'TFLOP/s':>9s} {'MFU':>7s}")
    rng = np.random.default_rng(0)
    waves = [(0.1 * rng.standard_normal(int(16000 * args.seconds))).astype(np.float32) for _ in range(args.batch)]
    for preset in args.presets.split(","):
        torch.manual_seed(0)
        model = Wav2Vec2Model(preset_config(preset))
        for precision in ("fp32", "fp16", "bf16"):
            if precision == "fp16" and device == "cpu":
                continue
            ssl = FrozenSSL(model, False, 16000, preset, device, precision)
            with FlopCounterMode(display=False) as counter:
                ssl.hidden_states(waves[:1])
            flops_per_utt = counter.get_total_flops()
            ssl.hidden_states(waves)  # warm-up
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(args.repeats):
                ssl.hidden_states(waves)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            dt = (time.perf_counter() - t0) / args.repeats
            achieved = flops_per_utt * args.batch / dt
            mfu = achieved / (peak[1] if precision == "fp32" else peak[0]) if peak else None
            print(f"{preset:8s} {precision:9s} {args.batch * args.seconds / dt:10.1f} {achieved / 1e12:9.2f} "
                  f"{f'{100 * mfu:6.1f}%' if mfu is not None else '    n/a'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="mini", help="built-in corpus size for part 1 (tiny, mini; default mini)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats-store", type=int, default=2, help="timing repeats of part 1 (best of N)")
    ap.add_argument("--skip-store", action="store_true", help="only the throughput part")
    ap.add_argument("--throughput", action="store_true", help="also measure base/large throughput and MFU")
    ap.add_argument("--device", default="auto", help="device for --throughput (auto, cpu, cuda, cuda:N)")
    ap.add_argument("--presets", default="base,large")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not args.skip_store:
        store_vs_naive(args)
    if args.throughput:
        throughput(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
