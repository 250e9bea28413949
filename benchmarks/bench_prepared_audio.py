"""Preparing 48 kHz mp3 clips as 16 kHz FLAC: `corpora.prepared_audio.AudioCache.prepare` with a
thread pool vs one thread, and the re-run that finds everything prepared (the no-op).

    python benchmarks/bench_prepared_audio.py [--clips 200] [--jobs N] [--format mp3|flac] [--repeats 3]

Writes N Common Voice-like clips (3-6 s, 48 kHz mono, a few at 32 kHz) in a temp dir, prepares
them into a fresh cache per round (1 thread, then the pool, taking turns), checks both give the
same frames, then times the re-run over the full cache. Prints the best-of-repeats times and
the ratios. Decoding mp3 dominates; soxr's resampling is a small share (it and libsndfile run
with the GIL released, which is why threads are enough).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from corpora.prepared_audio import AudioCache, Source, Target  # noqa: E402


def make_clips(d: Path, n: int, fmt: str, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        rate = 32000 if i % 10 == 9 else 48000   # Common Voice mixes in some 32 kHz clips
        t = np.arange(int(rate * rng.uniform(3.0, 6.0))) / rate
        x = 0.2 * np.sin(2 * np.pi * rng.uniform(100, 3000) * t) + 0.02 * rng.standard_normal(len(t))
        p = d / f"common_voice_fr_{i:05d}.{fmt}"
        sf.write(p, x.astype("float32"), rate, format=fmt.upper())
        paths.append(str(p))
    return paths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clips", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=None, help="threads of the pool (default: cores, at most 8)")
    ap.add_argument("--format", choices=["mp3", "flac"], default="mp3", help="the clips' format")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.format == "mp3" and "MP3" not in sf.available_formats():
        print("this libsndfile cannot write mp3 (needs >= 1.1): run with --format flac")
        return 2
    jobs = args.jobs or min(8, os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sources = [Source(p) for p in make_clips(tmp / "clips", args.clips, args.format)]
        best = {"serial": float("inf"), "pool": float("inf")}
        frames = {}
        for r in range(args.repeats):
            for name, j in (("serial", 1), ("pool", jobs)):
                cache = AudioCache(tmp / f"cache-{name}-{r}", Target(16000, "flac"))
                t = time.perf_counter()
                done = cache.prepare(sources, jobs=j)
                best[name] = min(best[name], time.perf_counter() - t)
                frames[name] = sorted((s.path, p.frames) for s, p in done.items())
                if r < args.repeats - 1 or name == "serial":
                    shutil.rmtree(cache.root)
        assert frames["serial"] == frames["pool"]
        noop = float("inf")
        for _ in range(args.repeats):
            t = time.perf_counter()
            again = cache.prepare(sources, jobs=jobs)
            noop = min(noop, time.perf_counter() - t)
        assert sorted((s.path, p.frames) for s, p in again.items()) == frames["pool"]
    n = len(sources)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{n} {args.format} clips (3-6 s, 48/32 kHz) -> 16 kHz FLAC, {os.cpu_count()} cores "
          f"(load average {load:.1f}: threads gain only with idle cores), jobs={jobs}, best of {args.repeats}")
    print(f"  prepare, 1 thread         : {best['serial']:7.3f} s  ({1e3 * best['serial'] / n:6.2f} ms/clip)")
    print(f"  prepare, thread pool      : {best['pool']:7.3f} s  ({1e3 * best['pool'] / n:6.2f} ms/clip)")
    print(f"  re-run, all prepared      : {noop:7.3f} s  ({1e3 * noop / n:6.2f} ms/clip)")
    print(f"ratio 1 thread / pool       : {best['serial'] / best['pool']:.2f}x")
    print(f"ratio prepare (pool) / re-run: {best['pool'] / noop:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
