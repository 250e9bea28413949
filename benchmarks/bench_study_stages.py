"""One job's worth of each study stage that changed for the ten-minute main job, the way it is done
now against the way it was done before, in the same run (ratios, not absolute seconds).

    .venv/bin/python benchmarks/bench_study_stages.py [--stages asr-e2e,st] [--epochs 3] [--updates 150]
        [--st-run STUDY/st/FBANK.fr-en/seed0]
        # stages: asr-e2e, st, st-fbank, start, st-warm (default: all)

- **asr-e2e** (fine-tuning with the CNN front-end frozen): SpeechBrain's wav2vec 2.0 lobe as the
  recipe builds it (downstream_asr.ctc_inference.Wav2Vec2Encoder) on the shipped B-tiny, training
  ``--epochs`` passes over 8 batches of 12 s of audio. Before: SpeechBrain froze the CNN's parameters
  but left transformers' ``_requires_grad`` on, so every backward ran through the frozen CNN to the
  waveform, and the CNN ran on every utterance every epoch. Now: no gradient below the frozen CNN,
  and its output kept per utterance (front_end_cache_mb). The two give the same trained weights
  (checked: the largest difference is printed).
- **st** (fairseq on frozen features, the tiny preset): training ``--updates`` updates on random
  128-d features (500 utterances). Before: fairseq validated at every save (every 25 updates).
  Now: validation and saves only from the first averaged checkpoint (validate_from_average). The
  averaged models are compared (largest difference printed).

- **st-fbank** (fairseq on FBANK features, subnormal floats): the first ``--updates`` updates of a
  finished study's FBANK ST run (``--st-run STUDY/st/FBANK.fr-en/seed0``: its data and preset), no
  validation. Before: fairseq's processes kept subnormal floats (the benchmark restores that with a
  ``sitecustomize`` that makes ``torch.set_flush_denormal`` a no-op). Now: flushed to zero
  (ssl_pretrain.device.flush_subnormals). Flushing moves the last bits, so the check printed is the
  training loss of the last logged updates of each.
- **start** (a local sweep's job process): a job that imports what an ASR/ST job imports, then
  trains 8 fine-tuning steps of the shipped B-tiny. Before: a fresh ``python -u -m`` per job. Now:
  forked from the sweep's warm server (gendergap/warm.py). Prints the start-up (process start and
  imports) and the training time of each, so a warm child is also shown to compute no slower.

- **st-warm** (an ST job's two fairseq processes): ``fairseq-train`` for ``--updates`` updates on
  random features, then ``fairseq-generate`` on 100 utterances. Before: each a fresh interpreter
  importing torch and fairseq. Now: forked from a warm server that imported them once, as a sweep's
  ST job starts them (ssl_pretrain.run.start_fairseq(warm=True)). The averaged models and the
  hypotheses are compared, and the CPU-seconds of the fairseq processes printed (a warm one's
  reach its job through the job's ledger).

Each stage runs old and new in turn, best of ``--repeats``; the machine should be idle.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[1] / "ssl_pretrain" / "shipped" / "tiny-balanced.safetensors"


def e2e_batches(n_batches: int = 8, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Batches of 12 s of noise-like audio: 4 utterances of 2.4-3.6 s, zero-padded, lengths relative."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        lens = (torch.randint(38400, 57600, (4,), generator=g))
        wavs = torch.zeros(4, int(lens.max()))
        for i, n in enumerate(lens.tolist()):
            wavs[i, :n] = torch.randn(n, generator=g) * 0.1
        out.append((wavs, lens.float() / wavs.shape[1]))
    return out


def train_e2e(folder: Path, save: Path, batches, epochs: int, old_way: bool) -> tuple[float, torch.nn.Module]:
    from downstream_asr.ctc_inference import Wav2Vec2Encoder
    torch.manual_seed(0)
    enc = Wav2Vec2Encoder(source=str(folder), save_path=str(save), freeze=False, freeze_feature_extractor=True,
                          front_end_cache_mb=0 if old_way else 512)
    if old_way:   # what SpeechBrain's own freezing left: the flag that makes the CNN's input need grad
        enc.model.feature_extractor._requires_grad = True
    head = torch.nn.Sequential(torch.nn.Linear(enc.model.config.hidden_size, 1024), torch.nn.LeakyReLU(),
                               torch.nn.Linear(1024, 38))
    params = [p for p in list(enc.parameters()) + list(head.parameters()) if p.requires_grad]
    opt = torch.optim.Adam(params, lr=2e-3)
    enc.train()
    started = time.perf_counter()
    for _ in range(epochs):
        for wavs, rel in batches:
            loss = head(enc(wavs, rel)).log_softmax(-1).logsumexp(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return time.perf_counter() - started, enc


def bench_e2e(args) -> None:
    from ssl_pretrain.checkpoints import CheckpointRef
    with tempfile.TemporaryDirectory() as tmp:
        folder = CheckpointRef.resolve(str(SHIPPED)).hf_folder(Path(tmp) / "hf")
        batches = e2e_batches()
        times = {"before": [], "now": []}
        models = {}
        for _ in range(args.repeats):
            for way in ("before", "now"):
                seconds, models[way] = train_e2e(folder, Path(tmp) / way, batches, args.epochs, way == "before")
                times[way].append(seconds)
        diff = max((a - b).abs().max().item() for a, b in zip(models["before"].state_dict().values(),
                                                                models["now"].state_dict().values()))
        steps = args.epochs * len(batches)
        report("asr-e2e", f"{steps} steps of 12 s batches, shipped B-tiny", times, steps, "step",
               f"largest weight difference after training: {diff:.1e}")


def st_data(root: Path, n_train: int = 500, n_valid: int = 100, dim: int = 128, seed: int = 0):
    import pandas as pd
    rng = np.random.default_rng(seed)
    words = ["the", "cat", "dog", "eats", "sleeps", "red", "blue", "house", "small", "big", "a", "very"]
    (root / "feats").mkdir(parents=True, exist_ok=True)

    def rows(split, n):
        out = []
        for i in range(n):
            k = int(rng.integers(3, 9))
            frames = 10 * k + int(rng.integers(0, 10))
            path = root / "feats" / f"{split}-{i}.npy"
            np.save(path, rng.standard_normal((frames, dim)).astype(np.float32))
            out.append({"id": f"{split}-{i}", "speaker": f"s{i % 8}", "feature_path": str(path), "n_frames": frames,
                        "tgt_text_en": " ".join(rng.choice(words, size=k))})
        return pd.DataFrame(out)
    return rows("train", n_train), rows("valid", n_valid)


def bench_st(args) -> None:
    from downstream_st.average import average_checkpoints  # noqa: F401 (fairseq's import, outside the timing)
    from downstream_st.presets import apply_overrides, load_preset
    from downstream_st.train import train_st
    with tempfile.TemporaryDirectory() as tmp:
        train, valid = st_data(Path(tmp))
        times = {"before": [], "now": []}
        for r in range(args.repeats):
            for way in ("before", "now"):
                preset = apply_overrides(load_preset("tiny"), [f"max-update={args.updates}",
                                                               f"validate_from_average={way == 'now'}"])
                out = Path(tmp) / f"{way}{r}"
                started = time.perf_counter()
                train_st(train, valid, out, preset=preset, src_lang="fr", tgt_lang="en", feature_dim=128)
                times[way].append(time.perf_counter() - started)
        a = torch.load(Path(tmp) / "before0" / "checkpoint_avg.pt", map_location="cpu", weights_only=False)["model"]
        b = torch.load(Path(tmp) / "now0" / "checkpoint_avg.pt", map_location="cpu", weights_only=False)["model"]
        diff = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
        report("st", f"fairseq-train, tiny preset, {args.updates} updates (process start included)", times,
               args.updates, "update", f"largest difference of the averaged models: {diff:.1e}")


KEEP_SUBNORMALS = ("import torch\ntorch.set_flush_denormal = lambda on: False   "
                   "# the processes before: subnormals kept\n")


def last_train_loss(log: Path) -> str:
    """The loss of the last ``train_inner`` line fairseq logged."""
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if "| train_inner |" in ln]
    return lines[-1].split(" loss=")[1].split(",")[0] if lines else "?"


def bench_st_fbank(args) -> None:
    import shutil

    from downstream_st.train import build_train_command, read_model_meta
    from ssl_pretrain.run import start_fairseq
    if not args.st_run or not (Path(args.st_run) / "st.json").is_file():
        print("st-fbank  skipped: --st-run names no finished ST run (e.g. STUDY/st/FBANK.fr-en/seed0)")
        return
    # st.json is data: the command is built again from its checked preset (names and values: FLAGS)
    flags = {**read_model_meta(args.st_run)["preset"]["train"], "max-update": args.updates,
             "validate-after-updates": 10 * args.updates}
    with tempfile.TemporaryDirectory() as tmp:
        keep = Path(tmp) / "keep"
        keep.mkdir()
        (keep / "sitecustomize.py").write_text(KEEP_SUBNORMALS)
        data = Path(tmp) / "data"
        shutil.copytree(Path(args.st_run) / "data", data)
        times, losses = {"before": [], "now": []}, {}
        for r in range(args.repeats):
            for way in ("before", "now"):
                out = Path(tmp) / f"{way}{r}"
                cmd = build_train_command(data, out / "checkpoints", flags, source=Path(args.st_run) / "st.json")
                env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
                if way == "before":
                    env["PYTHONPATH"] = os.pathsep.join([str(keep), env.get("PYTHONPATH", "")])
                started = time.perf_counter()
                if start_fairseq(cmd, out / "train.log", env=env).wait() != 0:
                    sys.exit(f"fairseq-train failed: see {out / 'train.log'}")
                times[way].append(time.perf_counter() - started)
                losses[way] = last_train_loss(out / "train.log")
    report("st-fbank", f"fairseq-train on FBANK features, tiny preset, {args.updates} updates (process start "
           "included)", times, args.updates, "update",
           f"last logged training loss: before {losses['before']}, now {losses['now']}")


def report(stage: str, what: str, times: dict, n: int, unit: str, check: str) -> None:
    before, now = min(times["before"]), min(times["now"])
    print(f"{stage:<8} {what}\n         before {before:7.1f} s ({before / n:.3f} s/{unit})   now {now:7.1f} s "
          f"({now / n:.3f} s/{unit})   ratio {before / now:.2f}x   ({check})", flush=True)


JOB = """
import os, sys, time
t0 = float(sys.argv[1])
os.environ["OMP_NUM_THREADS"] = "1"
import torch
torch.set_num_threads(1)
import downstream_asr.finetune, downstream_asr.frozen, downstream_st.train, analysis.store  # noqa: E401,F401
sys.path.insert(0, sys.argv[2])
from bench_study_stages import SHIPPED, e2e_batches, train_e2e
from ssl_pretrain.checkpoints import CheckpointRef
import tempfile
from pathlib import Path
with tempfile.TemporaryDirectory() as tmp:
    folder = CheckpointRef.resolve(str(SHIPPED)).hf_folder(Path(tmp) / "hf")
    ready = time.time()
    seconds, _ = train_e2e(folder, Path(tmp) / "w", e2e_batches(), 1, False)
print("TIMES", ready - t0, seconds, flush=True)
"""


def bench_start(args) -> None:
    import subprocess

    from gendergap.warm import Server
    here = str(Path(__file__).resolve().parent)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "bench_job.py").write_text(JOB)
        env = {**os.environ, "PYTHONPATH": tmp, "OMP_NUM_THREADS": "1"}
        with Server(Path(tmp) / "server.log") as server:
            while "ready" not in (Path(tmp) / "server.log").read_text():   # it has imported everything
                time.sleep(0.2)
            starts, trains = {"before": [], "now": []}, {"before": [], "now": []}
            for _ in range(args.repeats):
                for way in ("before", "now"):
                    head = [sys.executable] if way == "before" else [sys.executable, "-m", "gendergap.warm", "run",
                                                                     server.path, "--"]
                    out = subprocess.run([*head, "-u", "-m", "bench_job", str(time.time()), here], env=env,
                                         capture_output=True, text=True, check=True).stdout
                    start, train = map(float, out.split("TIMES")[1].split())
                    starts[way].append(start)
                    trains[way].append(train)
    report("start", "a job process until its first step (imports of an ASR/ST job, the model loaded)", starts, 1,
           "job", f"then 8 training steps: before {min(trains['before']):.2f} s, now {min(trains['now']):.2f} s, "
           f"ratio {min(trains['before']) / min(trains['now']):.2f}x")


def bench_st_warm(args) -> None:
    from downstream_st.decode import decode_st
    from downstream_st.presets import apply_overrides, load_preset
    from downstream_st.train import read_model_meta, train_st
    from gendergap.warm import LEDGER_ENV, Server, ledger_seconds
    from ssl_pretrain.run import FAST_PYTHON_ENV
    with tempfile.TemporaryDirectory() as tmp:
        train, valid = st_data(Path(tmp))
        preset = apply_overrides(load_preset("tiny"), [f"max-update={args.updates}"])
        times, cpu, hyps, models, losses = {"before": [], "now": []}, {"before": [], "now": []}, {}, {}, {}
        with Server(Path(tmp) / "server.log", preload=("fairseq",)) as server:
            while "ready" not in (Path(tmp) / "server.log").read_text():   # it has imported everything
                time.sleep(0.2)
            for r in range(args.repeats):
                for way in ("before", "now"):
                    out, ledger = Path(tmp) / f"{way}{r}", Path(tmp) / f"ledger-{way}{r}"
                    os.environ[LEDGER_ENV] = str(ledger)
                    if way == "now":   # as in a job the server started
                        os.environ[FAST_PYTHON_ENV] = server.python_command
                    started, kids = time.perf_counter(), os.times()
                    train_st(train, valid, out, preset=preset, src_lang="fr", tgt_lang="en", feature_dim=128)
                    res = decode_st(out, read_model_meta(out), valid, out / "valid.hyp", split="valid")
                    times[way].append(time.perf_counter() - started)
                    done = os.times()
                    cpu[way].append(done.children_user + done.children_system - kids.children_user
                                    - kids.children_system + ledger_seconds(ledger))
                    os.environ.pop(FAST_PYTHON_ENV, None)
                    hyps[way] = Path(res["hyps"]).read_text()
                    losses[way] = last_train_loss(out / "train.log")   # its log lines read as before
                    models[way] = torch.load(out / "checkpoint_avg.pt", map_location="cpu", weights_only=False)["model"]
        a, b = models["before"], models["now"]
        diff = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
        report("st-warm", f"an ST job's fairseq-train ({args.updates} updates) and fairseq-generate (100 "
               "utterances), each its own process", times, 2, "fairseq process",
               f"largest difference of the averaged models {diff:.1e}, last logged loss {losses['before']} and "
               f"{losses['now']}, hypotheses "
               f"{'identical' if hyps['before'] == hyps['now'] else 'DIFFERENT'}; CPU-seconds of the fairseq "
               f"processes: before {min(cpu['before']):.1f}, now {min(cpu['now']):.1f}")


STAGES = {"asr-e2e": bench_e2e, "st": bench_st, "st-fbank": bench_st_fbank, "start": bench_start,
          "st-warm": bench_st_warm}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stages", default=",".join(STAGES), help="comma-separated: " + ", ".join(STAGES))
    p.add_argument("--epochs", type=int, default=3, help="asr-e2e: passes over its 8 batches")
    p.add_argument("--updates", type=int, default=150, help="st: fairseq updates")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--st-run", help="st-fbank: a finished study's FBANK ST run folder (its data and preset)")
    args = p.parse_args()
    torch.set_num_threads(1)
    from gendergap.logs import setup_logging
    setup_logging(quiet=True)
    for stage in args.stages.split(","):
        STAGES[stage](args)


if __name__ == "__main__":
    main()
