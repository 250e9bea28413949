"""Small audio + manifests for the ssl_pretrain tests (written under pytest's tmp_path)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import soundfile as sf


def write_wavs(root: Path, n: int = 12, seed: int = 0, sample_rate: int = 16000) -> list[tuple[str, int]]:
    """n short voiced-like signals (a pitch contour + noise), 0.8-1.6 s; returns (relpath, samples)."""
    rng = np.random.default_rng(seed)
    (root / "wav").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        samples = int(sample_rate * rng.uniform(0.8, 1.6))
        t = np.arange(samples) / sample_rate
        f0 = rng.uniform(90, 250) * (1 + 0.1 * np.sin(2 * np.pi * 3 * t))
        x = 0.3 * np.sin(2 * np.pi * np.cumsum(f0) / sample_rate) + 0.05 * rng.standard_normal(samples)
        rel = f"wav/u{i:02d}.wav"
        sf.write(root / rel, x.astype(np.float32), sample_rate, subtype="PCM_16")
        rows.append((rel, samples))
    return rows


def write_manifest(root: Path, rows, out: Path, n_valid: int = 2) -> Path:
    """fairseq wav2vec manifest dir: train.tsv / valid.tsv (root line, then relpath<TAB>samples)."""
    out.mkdir(parents=True, exist_ok=True)
    for split, part in (("train", rows[:-n_valid]), ("valid", rows[-n_valid:])):
        (out / f"{split}.tsv").write_text(f"{root}\n" + "".join(f"{r}\t{n}\n" for r, n in part))
    return out


def utterance_frame(root: Path, rows, sample_rate: int = 16000) -> tuple[pd.DataFrame, list[str]]:
    """The columns the feature exporter reads, plus resolved audio paths."""
    df = pd.DataFrame({"id": [Path(r).stem for r, _ in rows], "offset": 0.0,
                       "duration": [n / sample_rate for _, n in rows]})
    return df, [str(root / r) for r, _ in rows]


def shipped_fp32_and_bf16_views(tmp_path: Path, n: int, checkpoint: str = "tiny-female"):
    """(rows, fp32 view, bf16 view): every layer of a shipped checkpoint's features of ``n`` short
    signals, extracted on the CPU in both precisions (float32 storage) into one feature store."""
    from ssl_pretrain.checkpoints import CheckpointRef
    from ssl_pretrain.feature_store import FeatureStore, SSLExtractor
    rows = write_wavs(tmp_path / "audio", n=n)
    df, paths = utterance_frame(tmp_path / "audio", rows)
    df = df.assign(audio=paths)
    ref = CheckpointRef.resolve(Path(__file__).resolve().parent.parent / "ssl_pretrain" / "shipped"
                                / f"{checkpoint}.safetensors")
    store = FeatureStore(tmp_path / "store")
    views = [store.view(SSLExtractor(ref, "cpu", p), df, "all", dtype="float32", progress=False)
             for p in ("fp32", "bf16")]
    return df, *views
