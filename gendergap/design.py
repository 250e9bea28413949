"""What each task's comparison of the pretraining conditions can detect, read from the plan before
anything runs (`sweep --dry-run`): one line per task with its primary test's minimum detectable
difference (analysis.power.design_power) for the config's design.

The design comes from the plan: per task (and language pair) its conditions step names the
checkpoints and their result files (one per seed); a checkpoint's female share is Table 3's F and M
percentages when the config (or a registry entry it names) gives them, else the share its
pretraining manifest was built to (a measured selection report where one is there already, else
the `pretraining.sets` gender filter), and checkpoints of one share are replicates of one condition
(analysis.conditions.group_conditions, as the study groups them). The test speakers per gender are
the task's test split in the utterance table, or, for the built-in corpus not generated yet, its
size's test voices. The variance components are the documented defaults, or those an earlier
study stored (``--variance-from``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from analysis.conditions import ALPHA, female_share, group_conditions, unknown_share_note
from analysis.power import (
    DEFAULT_COMPONENTS,
    DEFAULTS_SOURCE,
    POWER,
    RUN_AS_SEED,
    SLOPE_UNIT,
    components_from_db,
    design_power,
)
from corpora.base.boundary import printable
from corpora.base.errors import UserError
from corpora.synth import SIZES
from gendergap.cost import plan_context
from manifests.build import make_up
from manifests.select import parse_gender_spec

# the built-in corpus's two corpora (corpora/synth/build.py) and the Size field giving their voices
SYNTH_CORPORA = {"synth-fr": "fr", "synth-gender": "gender"}
STUDY_DB = "results.db"   # a study folder's results DB (gendergap.steps.base.Graph.db)
DESIGN_DOC = "docs/design-power.md"


@dataclass
class TaskDesign:
    """One task's (and language pair's) planned comparison."""
    label: str                     # task, or "task pair"
    task_type: str
    names: list                    # condition names, one per share (in ``shares`` order)
    shares: list                   # distinct female shares of the pretrained conditions
    checkpoints: list              # pretraining runs per share
    seeds: list                    # seeds per checkpoint, per share (the fewest of the share's checkpoints)
    speakers: dict | None          # {"F": n, "M": n} test speakers, None when not known yet
    why_unknown: str = ""          # why the speakers are not known
    reference: bool = False        # a condition without pretraining (FBANK) is compared too


def variance_source(arg: str | None) -> tuple[dict | None, str]:
    """(components per task type, where they come from): an earlier study's (``arg``: its folder,
    or its results DB file), or None and the documented defaults."""
    if arg is None:
        return None, DEFAULTS_SOURCE
    path = Path(arg)
    db = path / STUDY_DB if path.is_dir() else path
    if path.is_dir() and not db.is_file():
        raise UserError(f"no {STUDY_DB} in this folder", path=path,
                        fix="--variance-from takes a study's folder (the --out of `gendergap study` or `sweep`) "
                            "or its results DB file")
    return components_from_db(db), printable(str(path))


def _planned_share(cfg, ck: str, entry: dict | None, ctx) -> float | None:
    """Checkpoint ``ck``'s female share as the study will know it (module docstring); None: unknown."""
    c = cfg.checkpoints[ck]
    share = female_share({"female_pct": c.get("female_pct"), "male_pct": c.get("male_pct")})
    if share is not None:
        return share
    report = (entry or {}).get("make_up")
    if report and ctx.pending.readable(report):
        try:
            return female_share(make_up(report))
        except UserError:
            pass   # a damaged report: the run refuses it; the manifest's target below stands in
    used = c.get("pretrain") or c.get("pretrained_on")
    spec = (cfg.data.get("pretraining") or {}).get("sets", {}).get(used) if used else None
    return parse_gender_spec(spec).female_share if spec else None


def _test_source(cond, jobs: list, by_name: dict) -> tuple[str, str, str] | None:
    """(table, corpus, test split) the task's rows are scored on: a step of the task with its own
    splits (ST), or the data step an ASR step reads its test CSV from."""
    def own(j):
        splits = getattr(j, "splits", None)
        if isinstance(splits, dict) and "test" in splits and getattr(j, "table", None) and getattr(j, "corpus", None):
            return j.table, getattr(j, "eval_corpus", None) or j.corpus, splits["test"]
        return None
    for j in jobs:
        if j.task != cond.task or (j.pair or "") != (cond.pair or "") or j.kind in ("conditions", "seeds"):
            continue
        for cand in [j] + [by_name[d] for d in j.deps if d in by_name]:
            if own(cand):
                return own(cand)
    return None


def _speakers(source, jobs: list, ctx) -> tuple[dict | None, str]:
    """Test speakers per gender of ``source`` (table, corpus, split), or None and why not."""
    if source is None:
        return None, "the task's test rows are not known from its steps"
    table, corpus, split = source
    if not ctx.known(table):
        corpus_step = next((j for j in jobs if j.kind == "corpus" and table in j.outputs), None)
        size = SIZES.get(getattr(corpus_step, "size", None))
        voices = getattr(size, SYNTH_CORPORA.get(corpus, ""), {}).get(split) if size else None
        if voices:
            return {"F": voices[0], "M": voices[1]}, ""
        return None, f"the table {printable(table)} is written by a step of the study"
    try:
        rows = ctx.table(table).select(corpus=corpus, split=split).rows
    except UserError:
        sources = ctx.merges.get(os.path.abspath(table), ([table], None))[0]
        return None, (f"the corpus table {printable('+'.join(map(str, sources)))} does not read: the input checks "
                      "below say why")
    spk = rows[["speaker", "gender"]].drop_duplicates()
    return {g: int((spk["gender"] == g).sum()) for g in ("F", "M")}, ""


def task_designs(cfg, jobs: list, states: dict) -> list[TaskDesign]:
    """The planned design of every conditions step of ``jobs``."""
    ctx = plan_context(jobs, states)
    by_name = {j.name: j for j in jobs}
    entries = {e["name"]: e for j in jobs if j.kind == "checkpoints" for e in j.entries}
    out = []
    order = list(cfg.tasks)
    for cond in sorted((j for j in jobs if j.kind == "conditions"), key=lambda j: order.index(j.task)):
        info = {ck: {"reference": ck in cond.references, "set": cond.sets.get(ck),
                     "share": None if ck in cond.references else _planned_share(cfg, ck, entries.get(ck), ctx)}
                for ck in cond.results}
        named, _ = group_conditions(info)
        groups: dict[tuple, list[str]] = {}
        for ck, (name, share) in named.items():
            if share is not None:
                groups.setdefault((share, name), []).append(ck)
        ordered = sorted(groups.items(), key=lambda kv: -kv[0][0])
        speakers, why = _speakers(_test_source(cond, jobs, by_name), jobs, ctx)
        out.append(TaskDesign(
            label=cond.task + (f" {cond.pair}" if cond.pair else ""), task_type=cond.task_type,
            names=[name for (_, name), _ in ordered], shares=[share for (share, _), _ in ordered],
            checkpoints=[len(cks) for _, cks in ordered],
            seeds=[min(len(cond.results[ck]) for ck in cks) for _, cks in ordered], speakers=speakers, why_unknown=why,
            reference=bool(cond.references)))
    return out


def _count(values: list, what: str) -> str:
    """``3 seeds``, ``1 seed``, ``1-2 pretraining runs``."""
    lo, hi = min(values), max(values)
    return f"{lo} {what}" if lo == hi == 1 else f"{lo} {what}s" if lo == hi else f"{lo}-{hi} {what}s"


def _components(d: TaskDesign, measured: dict | None, source: str) -> tuple[dict | None, str, bool]:
    """The task type's components, where they come from (said with any gap in an earlier study's),
    and whether var_run is a guess (taken as var_seed)."""
    default = DEFAULT_COMPONENTS.get(d.task_type)
    if measured is None:
        return default, source, False   # fitted on two pretraining runs per share: var_run measured there
    got = measured.get(d.task_type)
    if got is None:
        return default, (f"{DEFAULTS_SOURCE} ({source} has none for {d.task_type})" if default else source), True
    if got["seed"] is None and got["run"] is None:   # one run per condition there: speakers only
        if default is None:
            return None, source, False
        return ({**got, "run": default["run"], "seed": default["seed"]},
                f"{source} (speakers; var_run and var_seed from the {DEFAULTS_SOURCE}: one run per condition there)",
                True)
    where = source
    if got["seed"] is None:   # one seed per checkpoint there: its var_run holds the seeds' variance
        where += " (one seed per checkpoint there: its var_run holds the seeds')"
    return got, where, got["run"] is None


def design_line(d: TaskDesign, measured: dict | None, source: str) -> str:
    """The dry run's line for one task (DESIGN_DOC explains it)."""
    head = f"  {d.label}: minimum detectable difference ({POWER * 100:.0f} % power, α {ALPHA:g}): "
    if len(d.shares) < 2:
        return head + (f"nothing to compare: {len(d.shares)} pretraining share(s) known (a checkpoint's share comes "
                       "from its female_pct / male_pct or the pretraining set it was made from)")
    layout = (f"{len(d.shares)} shares x {_count(d.checkpoints, 'pretraining run')} x {_count(d.seeds, 'seed')}, "
              + (f"{d.speakers['F']}/{d.speakers['M']} test speakers" if d.speakers else "test speakers unknown"))
    comp, where, run_guessed = _components(d, measured, source)
    if comp is None:
        return head + (f"no variance components for task type {d.task_type!r} ({layout}); pass --variance-from a "
                       "study that ran it")
    if d.speakers is None:
        return head + f"not known before the test speakers are ({d.why_unknown}; {layout.rsplit(', ', 1)[0]})"
    p = design_power(comp, d.speakers["F"], d.speakers["M"], d.shares, d.checkpoints, d.seeds, alpha=ALPHA,
                     reference=d.reference)
    test = ("the slope over female share" if p.primary == "slope"
            else f"{d.names[0]} vs {d.names[-1]}" if p.primary == "pair" else "no test")
    if p.mde is None:
        more = (design_power(comp, d.speakers["F"], d.speakers["M"], d.shares, d.checkpoints, 2, alpha=ALPHA)
                if p.primary and max(d.checkpoints) == 1 else None)
        return (head + f"{test}: {p.reason} ({layout})"
                + (f"; with 2 seeds per checkpoint: {more.mde:.1f} Δrel points"
                   + (f" per {SLOPE_UNIT:g} points of share" if more.primary == "slope" else "")
                   if more and more.mde is not None else ""))
    per = f" per {SLOPE_UNIT:g} points of share" if p.primary == "slope" else ""
    if p.primary == "slope":   # the same test read as a difference between the lowest and highest share
        span = 100 * (max(d.shares) - min(d.shares))
        per += (f" ({p.mde * span / SLOPE_UNIT:.1f} from {100 * min(d.shares):.0f} "
                f"to {100 * max(d.shares):.0f} % female)")
    note = ("one pretraining run per share: a checkpoint against a checkpoint, the share's effect not told from the "
            "run's" if p.unit == "seed" else RUN_AS_SEED if run_guessed else "")
    return (head + f"{test} {p.mde:.1f} Δrel points{per} with {layout}; variance components from {where}"
            + (f"; {note}" if note else "")
            + (f"; each of the {p.n_secondary} secondary comparisons (Holm, behind the primary test): "
               f"{p.secondary_mde:.1f}"
               if p.secondary_mde is not None else ""))


def design_lines(cfg, jobs: list, states: dict, variance_from: str | None = None,
                 components: tuple[dict | None, str] | None = None) -> list[str]:
    """The dry run's section: a heading and one line per compared task (none: no lines)."""
    designs = task_designs(cfg, jobs, states)
    if not designs:
        return []
    measured, source = components or variance_source(variance_from)
    return ([f"what the design can detect ({DESIGN_DOC}):"] + [design_line(d, measured, source) for d in designs]
            + unknown_lines(cfg, jobs))


def unknown_lines(cfg, jobs: list) -> list[str]:
    """The checkpoints whose pretraining speech is partly of unknown gender: their female share (the
    trend's x) is of the speech of known gender, said with the range it stands for (never silently)."""
    entries = {e["name"]: e for j in jobs if j.kind == "checkpoints" for e in j.entries}
    notes = [unknown_share_note(ck, {**entries.get(ck, {}), **{k: v for k, v in c.items() if v is not None}})
             for ck, c in cfg.checkpoints.items()]
    notes = [n for n in notes if n]
    return (["female shares with speech of unknown gender (the trend reads the share of known gender):"]
            + [f"  {n}" for n in notes]) if notes else []
