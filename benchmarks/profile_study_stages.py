"""Where each stage of the built-in study spends its time: one job of each kind, profiled.

Plans the study (``--config``, default configs/mini.yaml) against a finished study folder
(``--study``, e.g. the output of `gendergap study`), takes one job of each kind, points its
outputs at a scratch folder (the study is read, never written), optionally shortens its training
(``--steps``), and runs it under cProfile in a fresh process, as the sweep would (one torch thread).
Prints, per job: process start-up (python, torch, the study's plan), the engines' imports, then
the time inside the parts every engine has
(training steps, data loading, validation, test decoding, scoring and writing), and the top
functions by cumulative time. ``--dump DIR`` keeps the .prof files (snakeviz, pstats).

Run (idle machine): .venv/bin/python benchmarks/profile_study_stages.py --study study
"""
from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# One job of each kind; (name in the plan, fields to shorten its training for a profile)
JOBS = {
    "asr-e2e": ("asr-e2e:B-tiny", "overrides", "max_steps={n}"),
    "asr-frozen": ("asr-frozen:B-tiny:seed0", "overrides", "max_steps={n}"),
    "st": ("st:B-tiny:fr-en:seed0", "overrides", "max-update={n}"),
    "gender-st": ("gender-st:B-tiny:en-fr", "overrides", "max-update={n}"),
    "probes": ("probes:B-tiny", None, None),
}
# The parts each engine's time falls into: (label, keys). A key is "path:function" (its cumulative
# time), "path:" (a module's functions, counted where no caller is of the same module) or
# "path:function@caller" (only the time spent in it when called from ``caller``). Parts are not nested.
PARTS = [
    ("imports (engines)", ["<frozen importlib._bootstrap>:_find_and_load"]),
    ("training steps", ["speechbrain/core.py:fit_batch"]),
    # the loader's batches, read through a progress bar (tqdm's generator) when one is shown
    ("training data loading", ["dataloader.py:__next__@speechbrain/core.py:_fit_train",
                               "tqdm/std.py:__iter__@speechbrain/core.py:_fit_train"]),
    ("validation", ["speechbrain/core.py:_fit_valid"]),
    ("fairseq-train process", ["downstream_st/train.py:run_fairseq@downstream_st/train.py:train_st"]),
    ("test decoding", ["downstream_asr/runs.py:decode_trained", "downstream_st/runs.py:decode_model"]),
    ("probe training", ["analysis/probing/checkpoints.py:probe_models"]),   # every probe, its data and controls
    ("scoring and storing", ["analysis/score_runs.py:", "analysis/store.py:"]),
]


def child(args) -> None:
    t0 = float(os.environ["PROFILE_T0"])
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    torch.set_num_threads(1)
    from gendergap.config import load_config
    from gendergap.logs import setup_logging
    from gendergap.plan import plan_jobs
    setup_logging(quiet=True)
    steps = {s.name: s for s in plan_jobs(load_config(args.config), args.study)}
    name, field, fmt = JOBS[args.kind]
    step = steps[name]
    scratch = Path(args.scratch)
    change = {}
    for f in ("out", "db"):
        if hasattr(step, f):
            change[f] = str(scratch / Path(getattr(step, f)).name)
    if field and args.steps:
        key = fmt.split("=")[0]
        change[field] = [o for o in getattr(step, field) if not o.startswith(key + "=")] + [fmt.format(n=args.steps)]
    step = dataclasses.replace(step, **change)
    ready = time.time()
    prof = cProfile.Profile()
    prof.enable()
    step.run()
    prof.disable()
    done = time.time()
    prof.dump_stats(scratch / "job.prof")
    stats = pstats.Stats(str(scratch / "job.prof"))
    parts = {}
    for label, keys in PARTS:
        parts[label] = sum(_time(stats, func, k) for func in stats.stats for k in keys)
    top = io.StringIO()
    pstats.Stats(str(scratch / "job.prof"), stream=top).sort_stats("cumulative").print_stats(args.top)
    json.dump({"kind": args.kind, "job": name, "startup_s": ready - t0, "run_s": done - ready,
               "parts": parts, "top": top.getvalue()}, open(scratch / "profile.json", "w"))


def _time(stats, func, key: str) -> float:
    """The cumulative seconds of ``func`` that ``key`` counts (see PARTS), 0 if none."""
    name = f"{func[0]}:{func[2]}"
    callers = stats.stats[func][4]
    if "@" in key:
        key, caller = key.split("@")
        return sum(c[3] for f, c in callers.items() if f"{f[0]}:{f[2]}".endswith(caller)) if name.endswith(key) else 0.0
    if key.endswith(":") or key.endswith("/"):
        mine = key in name and not any(key in f"{c[0]}:{c[2]}" for c in callers)
        return stats.stats[func][3] if mine else 0.0
    return stats.stats[func][3] if name.endswith(key) else 0.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--study", required=True, help="a finished study folder (read only)")
    p.add_argument("--config", default="configs/mini.yaml")
    p.add_argument("--kinds", default=",".join(JOBS), help="comma-separated job kinds")
    p.add_argument("--steps", type=int, default=0, help="shorten training to N steps/updates (0: the config's)")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--dump", help="keep each job's .prof here")
    p.add_argument("--kind", help=argparse.SUPPRESS)
    p.add_argument("--scratch", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.kind:
        return child(args)
    for kind in args.kinds.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, __file__, "--study", args.study, "--config", args.config, "--kind", kind,
                   "--scratch", tmp, "--steps", str(args.steps), "--top", str(args.top)]
            t0 = time.time()
            subprocess.run(cmd, check=True, env={**os.environ, "PROFILE_T0": str(t0)})
            r = json.load(open(Path(tmp) / "profile.json"))
            if args.dump:
                Path(args.dump).mkdir(parents=True, exist_ok=True)
                os.replace(Path(tmp) / "job.prof", Path(args.dump) / f"{kind}.prof")
        total = r["startup_s"] + r["run_s"]
        print(f"== {kind} ({r['job']}{f', {args.steps} steps' if args.steps else ''}): {total:.1f} s")
        print(f"   {'process start-up':<22} {r['startup_s']:6.1f} s")
        for label, s in r["parts"].items():
            if s:
                print(f"   {label:<22} {s:6.1f} s")
        print(f"   {'other':<22} {r['run_s'] - sum(r['parts'].values()):6.1f} s")
        print(r["top"], flush=True)


if __name__ == "__main__":
    main()
