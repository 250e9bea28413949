"""Planning a big sweep: `gendergap sweep --dry-run` of 100 checkpoints x 6 tasks.

    python benchmarks/bench_sweep_plan.py [--checkpoints 100] [--repeats 3]

Writes a study config with N imported checkpoints and six tasks (end-to-end ASR, two
frozen-feature ASR layers, ST into three languages, gender ST with MuST-SHE scoring, probes),
then times, best of the repeats: loading + validating the config, planning the jobs
(`plan_jobs`), the states a dry run reads (`sweep.summary`), and the SLURM job arrays a run
would submit (`sweep.slurm_groups`). It prints the times, the jobs per second, and the
ratio against the 10-checkpoint plan scaled up linearly (about 1 when planning is linear in
the number of jobs; quadratic planning shows up as a ratio near 10).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gendergap import sweep  # noqa: E402
from gendergap.config import load_config  # noqa: E402
from gendergap.plan import plan_jobs  # noqa: E402

TASKS = """\
tasks:
  asr-e2e: {corpus: c, resources: {gpus: 1}}
  asr-frozen: {corpus: c, layer: last, resources: {gpus: 1}}
  asr-frozen-l6: {type: asr-frozen, corpus: c, layer: 6, resources: {gpus: 1}}
  st: {corpus: c, pairs: [fr-en, fr-es, fr-pt], resources: {gpus: 1}}
  gender-st: {corpus: g, pairs: [en-fr], mustshe: mustshe.tsv, resources: {gpus: 1}}
  probes: {corpus: c, resources: {gpus: 1}}
executor: {name: slurm, array_parallelism: 8}
"""


def big_config(folder: Path, n: int) -> Path:
    lines = ["name: big", "corpus: {table: utts.tsv}", "checkpoints:"]
    lines += [f"  ck{i:03d}: {{path: ck{i:03d}.pt}}" for i in range(n)]
    path = folder / f"big{n}.yaml"
    path.write_text("\n".join(lines) + "\n" + TASKS, encoding="utf-8")
    return path


def time_once(path: Path, out: Path) -> dict:
    t0 = time.perf_counter()
    cfg = load_config(path)
    t1 = time.perf_counter()
    jobs = plan_jobs(cfg, out)
    t2 = time.perf_counter()
    rows = sweep.summary(jobs, out)
    t3 = time.perf_counter()
    groups = sweep.slurm_groups(jobs, {r["job"]: r["state"] for r in rows})
    t4 = time.perf_counter()
    return {"jobs": len(jobs), "arrays": len(groups), "load": t1 - t0, "plan": t2 - t1, "states": t3 - t2,
            "arrays_s": t4 - t3, "total": t4 - t0}


def best(path: Path, out: Path, repeats: int) -> dict:
    runs = [time_once(path, out) for _ in range(repeats)]
    return min(runs, key=lambda r: r["total"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoints", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        small = best(big_config(d, max(1, a.checkpoints // 10)), d / "out-small", a.repeats)
        big = best(big_config(d, a.checkpoints), d / "out", a.repeats)
    for label, r in (("small", small), ("big", big)):
        print(f"{label:5s} {r['jobs']:5d} jobs in {r['arrays']:3d} arrays: load {r['load']:.3f} s, "
              f"plan {r['plan']:.3f} s, "
              f"dry-run states {r['states']:.3f} s, arrays {r['arrays_s']:.3f} s; total {r['total']:.3f} s "
              f"({r['jobs'] / r['total']:.0f} jobs/s)")
    linear = small["total"] * big["jobs"] / small["jobs"]
    print(f"{a.checkpoints} checkpoints x 6 tasks: {big['total']:.2f} s; "
          f"ratio to the small plan scaled linearly: {big['total'] / linear:.2f} (1 = linear)")


if __name__ == "__main__":
    main()
