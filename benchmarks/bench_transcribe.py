"""`asr transcribe`'s batching by length against one utterance at a time: utterances per second, same outputs.

The model is a Wav2Vec2ForCTC with a layer-normalising feature encoder and an attention mask (large-style,
as every released large wav2vec 2.0 model is), random weights, a character vocabulary; the utterances are
noise of 2-12 s at 16 kHz (lengths spread like read speech). Both runs go through
downstream_asr.transcribe.transcribe_table (reading, resampling, the partial file, the hypotheses files),
so the difference is the batching alone. The hypotheses must be identical: with a mask, padding changes
nothing. (A base-style model that group-normalises over time and takes no mask gives slightly different
features once padded, batched or not by us: that is the model, see tests/test_transcribe.py.)

    .venv/bin/python benchmarks/bench_transcribe.py                  # CPU, ~1 min on 2 cores
    .venv/bin/python benchmarks/bench_transcribe.py --device cuda --n 400 --size base
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpora.table import new_table, write_table  # noqa: E402
from downstream_asr.transcribe import load_model, select_rows, transcribe_table  # noqa: E402
from ssl_pretrain.device import device_and_precision, device_name  # noqa: E402

SIZES = {"tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                      conv_dim=(32,) * 7),
         "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)}


def build_model(folder: Path, size: str) -> Path:
    from transformers import (
        Wav2Vec2Config,
        Wav2Vec2CTCTokenizer,
        Wav2Vec2FeatureExtractor,
        Wav2Vec2ForCTC,
        Wav2Vec2Processor,
    )
    torch.manual_seed(0)
    vocab = {"<pad>": 0, "<unk>": 1, "|": 2, **{c: i + 3 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz'")}}
    cfg = Wav2Vec2Config(vocab_size=len(vocab), feat_extract_norm="layer", do_stable_layer_norm=True,
                         pad_token_id=0, **SIZES[size])
    Wav2Vec2ForCTC(cfg).save_pretrained(folder)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    Wav2Vec2Processor(Wav2Vec2FeatureExtractor(return_attention_mask=True, do_normalize=True),
                      Wav2Vec2CTCTokenizer(str(folder / "vocab.json"))).save_pretrained(folder)
    return folder


def build_table(root: Path, n: int) -> Path:
    rng = np.random.default_rng(0)
    (root / "wav").mkdir(parents=True)
    rows = []
    for i in range(n):
        dur = float(rng.uniform(2, 12))
        sf.write(root / "wav" / f"{i}.wav", (0.1 * rng.standard_normal(int(dur * 16000))).astype(np.float32), 16000)
        rows.append({"id": f"u{i:04d}", "audio": f"wav/{i}.wav", "offset": 0.0, "duration": dur, "sample_rate": 16000,
                     "speaker": f"s{i % 8}", "gender": "FM"[i % 2], "corpus": "bench", "lang": "fr", "split": "test",
                     "text": "bonjour"})
    write_table(new_table(rows), root / "table.tsv")
    return root / "table.tsv"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=60, help="utterances")
    ap.add_argument("--size", default="tiny", choices=SIZES)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--batch-seconds", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    device, precision = device_and_precision(a.device, a.precision)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = load_model(build_model(tmp / "model", a.size), device=device, precision=precision)
        table = build_table(tmp / "data", a.n)
        rows = select_rows(str(table), "test", None)
        audio = float(rows["duration"].sum())
        results = {}
        for label, seconds, size in (("one at a time", 1e9, 1), ("batched by length", a.batch_seconds, 64)):
            model.transcribe([np.zeros(16000, np.float32)])   # warm-up (allocations, kernels)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            meta = transcribe_table(model, rows, tmp / label.replace(" ", "-"), batch_seconds=seconds,
                                    max_batch_size=size, progress=False)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            hyps = Path(meta["hyps"]).read_text(encoding="utf-8")
            results[label] = (dt, meta["batches"], hyps)
            print(f"{label:>18}: {meta['batches']:4d} batches  {a.n / dt:7.2f} utt/s  {audio / dt:8.1f} audio-s/s")
    (t1, _, h1), (t2, _, h2) = results.values()
    print(f"speed-up {t1 / t2:.2f}x; same hypotheses: {h1 == h2}  ({a.n} utts, {audio:.0f} s of audio, {a.size}, "
          f"{device_name(device)}, {precision}, {a.threads} thread(s))")
    if h1 != h2:
        sys.exit(1)


if __name__ == "__main__":
    main()
