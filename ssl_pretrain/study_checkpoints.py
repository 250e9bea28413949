"""The study's own checkpoints: pretraining a tiny model until it learns, and registering them all.

Both are what a study step runs (gendergap/steps/models.py); they are plain functions of this
package so that a script can call them too.
"""
from __future__ import annotations

from pathlib import Path

from corpora.base.boundary import read_state_json
from corpora.base.errors import UserError
from ssl_pretrain.convert import num_updates

SHIPPED = Path(__file__).resolve().parent / "shipped"
# A tiny run still at chance is redone with the next seed, up to this many tries. 8 since 2026-11-29
# (4 before): the sets mixing both genders leave the plateau within phase 1's 1,000 updates far less
# often than the single-gender ones (shipped/PROVENANCE.md lists every try), so 4 tries left the
# 25 % and 75 % female sets without a run.
PRETRAIN_SEEDS = 8


def _read_json(path: Path) -> dict:
    return read_state_json(path) or {}


def pretrain_tiny(manifest: str, out: str, seed: int, updates: int, preset: str = "tiny",
                  continue_updates: int = 0) -> None:
    """Pretrain; a run whose valid accuracy ends below 2x chance (the plateau the
    tiny preset can sit on) is redone with the next seed. With ``continue_updates``, the accepted
    checkpoint is then continued by that many updates from a warm start (fresh optimizer and
    schedule, ``pretrain run --init-from``): a longer schedule from scratch sat at chance, the
    continuation does not. The shipped checkpoints were made by these rules (shipped/PROVENANCE.md).
    Leaves ``out/checkpoint.txt`` naming the final checkpoint and ``out/updates.txt`` the updates
    it has seen in all. Each run resumes from its own checkpoints when called again."""
    from ssl_pretrain.evaluate import last_valid_accuracy
    from ssl_pretrain.run import run_pretraining

    chance = 1 / 11  # the tiny preset draws 10 negatives
    out = Path(out)
    for s in range(seed + 1, seed + 1 + PRETRAIN_SEEDS):
        run = out / f"seed{s}"
        if "final_updates" not in _read_json(run / "run.json"):
            run_pretraining(preset, manifest, run, seed=s, threads=1, overrides=[f"optimization.max_update={updates}"])
        at, accuracy = last_valid_accuracy(run / "train.log")
        if accuracy is not None and accuracy >= 2 * chance:
            best, total = _continued(run / "checkpoints" / "checkpoint_best.pt", out, preset, manifest, seed,
                                     continue_updates)
            (out / "updates.txt").write_text(f"{total}\n")
            (out / "checkpoint.txt").write_text(str(best) + "\n")
            return
        print(f"seed {s}: valid accuracy {accuracy} at update {at} is still at chance; trying the next seed",
              flush=True)
    raise UserError(f"pretraining stayed at chance with seeds {seed + 1}..{seed + PRETRAIN_SEEDS}", path=out,
                    fix="use a shipped or imported checkpoint, or another seed")


def _continued(best: Path, out: Path, preset: str, manifest: str, seed: int, more_updates: int) -> tuple[Path, int]:
    """The accepted checkpoint, continued by ``more_updates`` from a warm start when asked; and
    the updates the result has seen in all."""
    from ssl_pretrain.checkpoints import CheckpointRef
    from ssl_pretrain.run import run_pretraining, warm_start

    total = num_updates(CheckpointRef.resolve(best).fairseq_state())
    if not more_updates:
        return best, total
    more = out / "continued"
    if "final_updates" not in _read_json(more / "run.json"):
        # the first seed again (not the accepted one): what the shipped continuations used
        run_pretraining(preset, manifest, more, seed=seed + 1, threads=1,
                        overrides=[f"optimization.max_update={more_updates}",
                                   *warm_start(CheckpointRef.resolve(best).fairseq_state(), more)])
    # the last checkpoint: the continuation's learning rate has decayed to 0 by its end, so it is
    # the trained model (its valid loss differs from the lowest by noise)
    last = more / "checkpoints" / "checkpoint_last.pt"
    return last, total + num_updates(CheckpointRef.resolve(last).fairseq_state())  # counted from 0 again


def register_study_checkpoints(registry: str, entries: list[dict], trust: bool = False) -> None:
    """Register every checkpoint of a study. An entry: name, path (or ``pretrain_dir``, a
    `pretrain_tiny` output whose checkpoint.txt names it), note, ``make_up`` (a selection report
    giving Table 3's hours and shares) or ``table3`` (those facts given). An entry already
    registered with the same file and facts is left as it is."""
    from manifests.build import make_up
    from ssl_pretrain.checkpoints import register_checkpoint
    from ssl_pretrain.registry import Registry, run_checkpoint

    reg = Registry(registry)
    known = {e["name"]: e for e in reg.entries()}
    for e in entries:
        path = e["path"] or (Path(e["pretrain_dir"]) / "checkpoint.txt").read_text().strip()
        path, which = run_checkpoint(path)   # a `pretrain run` folder: its best, else its last checkpoint
        if e["path"] and Path(e["path"]) != path:
            print(f"checkpoint {e['name']}: {which}", flush=True)
        extra = make_up(e["make_up"]) if e.get("make_up") else dict(e.get("table3") or {})
        if e.get("pretrain_dir") and (Path(e["pretrain_dir"]) / "updates.txt").is_file():
            extra["updates"] = int((Path(e["pretrain_dir"]) / "updates.txt").read_text())
        old = known.get(e["name"])
        if (old and Path(old["path"]) == Path(path).resolve() and all(old.get(k) == v for k, v in extra.items())
                and old.get("family")):   # an entry from before model facts were recorded is redone
            continue
        register_checkpoint(reg, e["name"], path, replace_entry=True, note=e.get("note") or "", trust=trust, **extra)
