"""The report's answer to the study's question, from the conditions rows of the results DB
(subset ``conditions``, written by analysis.conditions.compare_and_store):

- ``answer_lines``: one sentence per task (and language pair), generated from the numbers and never
  more than the design supports: a called primary test with its CI and which gender's score moved,
  else "no difference detected" with the smallest difference the design detects; "no change" only
  from an equivalence test against the config's margin; with one checkpoint per share, the
  checkpoints named and the share's effect said to be inseparable from the pretraining run's;
- ``condition_sections``: per task, the conditions (female share, checkpoints, runs, scores), the
  comparison tables by family (primary, secondary, reference) as ``conditions_<task>.{md,tex,csv}``,
  and a plot of Δrel against female share (``trend_<task>.png``; the fitted slope with 4+ shares).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.conditions import (
    COMPONENTS_ROW,
    CURVATURE,
    FEW_SPEAKERS,
    MIN_SPEAKERS,
    ONE_RUN,
    SLOPE,
    TREND_MIN_SHARES,
    design_unit,
    stat_row_key,
)
from analysis.contrasts import FAMILIES, family_levels
from analysis.metrics import get_metric
from analysis.plots import save_png
from analysis.power import ALPHA, POWER, SLOPE_UNIT
from analysis.tables import ASR_TASK_TITLES, fmt, fmt_ci, latex_table, markdown_table, task_title
from corpora.base.atomic import write_text

SUBSET = "conditions"
KEYS = ("delta_rel", "all", "F", "M", "gap", "ratio")
FAMILY_TITLES = {"primary": "Primary test", "secondary": "Secondary comparisons (one Holm family)",
                 "reference": "Against the reference without pretraining (one Holm family)"}
CAPTION = ("Pretraining conditions compared. A condition's estimate is the mean over its checkpoints (pretraining "
           "runs) of each checkpoint's mean over its downstream seeds; its Δrel, F − M and F/M are those of its own "
           "mean F and M. A test's difference is first minus second (slope: per 10 points of female share; lack of "
           "fit: the ends' mean minus the middle's). 95% CIs: percentile, from speaker resamples shared by every run "
           "(paired) plus one draw per resample of the pretraining-run term (unit below: the checkpoints' spread "
           "within conditions, or with one checkpoint per condition the seeds' spread within checkpoints; a t with "
           "that spread's degrees of freedom) and, against the reference, the reference's own seeds' term. p: Holm-"
           f"adjusted within the family the header names, per column; called when p is under the family's level "
           f"and the "
           f"CI excludes 0. Levels: the primary test at {ALPHA:g}; the secondary and reference families share "
           f"{ALPHA:g} "
           "(half each when both are there) and are tested only once the primary test is called, so that the whole "
           f"table's chance of a false call stays at {ALPHA:g}. "
           f"MDE: the smallest difference the design detects with {POWER:.0%} power at the family's level.")

TASK_ORDER = (*ASR_TASK_TITLES, "st", "gender-st")   # the tables' order: ASR (Table 4), then ST (Table 5)
GENDER_WORDS = {"F": "women's", "M": "men's"}


def _blocks(rows: pd.DataFrame) -> list[tuple[str, str, str, pd.DataFrame]]:
    """(task, lang_pair, metric, its rows) per comparison run: ASR tasks, then ST, then the others,
    each by language pair (not in the order parallel jobs happened to store them)."""
    out = []
    for (task, pair), part in rows.groupby(["task", "lang_pair"], sort=False):
        metric = part["metric"].iloc[0].split(":")[0]
        out.append((str(task), str(pair), metric, part))
    rank = lambda t: TASK_ORDER.index(t) if t in TASK_ORDER else len(TASK_ORDER)  # noqa: E731
    return sorted(out, key=lambda b: (rank(b[0]), b[0], b[1]))


def _get(part: pd.DataFrame, name: str, m: str, field: str, key: str = "all"):
    gender, metric = stat_row_key(m, field, key)
    r = part[(part["checkpoint"] == name) & (part["metric"] == metric) & (part["gender"] == gender)]
    return None if r.empty else r.iloc[0]


def _value(part, name, m, field, key="all"):
    r = _get(part, name, m, field, key)
    return None if r is None else float(r["value"])


def _ci(r) -> tuple[float, float] | None:
    return None if r is None or pd.isna(r["ci_low"]) else (float(r["ci_low"]), float(r["ci_high"]))


def _title(task: str, pair: str, metric: str) -> str:
    return f"{task}" + (f" {pair}" if pair else "") + f" ({metric.upper()})"


def _conditions(part: pd.DataFrame, m: str) -> list[str]:
    return list(dict.fromkeys(part.loc[part["metric"] == f"{m}:n_runs", "checkpoint"]))


def read_block(part: pd.DataFrame, m: str) -> dict:
    """One task's comparison as stored: its conditions (share, checkpoints, runs), its tests (name,
    row field, family and its size, status), the primary test, the unit and the count of shares."""
    conds = {}
    for n in _conditions(part, m):
        members = part[part["metric"] == f"{m}:in_condition:{n}"]
        conds[n] = {"share": _value(part, n, m, "female_share"), "unknown": _value(part, n, m, "unknown_share"),
                    "n_runs": int(_value(part, n, m, "n_runs")),
                    "n_checkpoints": int(_value(part, n, m, "n_checkpoints") or 1),
                    "checkpoints": list(members["checkpoint"]), "seeds": [int(v) for v in members["value"]]}
    tests = []
    fam = part[part["metric"].str.startswith(f"{m}:family:")]
    for _, r in fam.iterrows():
        name = r["checkpoint"]
        what = "slope" if name == SLOPE else "curvature" if name == CURVATURE else "diff"
        pair = next(((a, b) for a in conds for b in conds if f"{a} vs {b}" == name), (None, None))
        compared = [_value(part, name, m, f"{what}_compared", k) for k in KEYS]
        compared = [v for v in compared if v is not None]
        few = any(_value(part, name, m, f"{what}_few_speakers", k) for k in KEYS)
        status = (None if not compared else "compared" if max(compared) else FEW_SPEAKERS if few else ONE_RUN)
        tests.append({"name": name, "what": what, "family": r["metric"].split(":")[-1], "size": int(r["value"]),
                      "a": pair[0], "b": pair[1], "status": status})
    pre = [c for c in conds.values() if c["share"] is not None]
    legacy = not tests and (part["metric"] == f"{m}:diff").any()   # rows of a gendergap before test families
    primary = next((t for t in tests if t["family"] == "primary"), None)
    levels = family_levels(tests)
    for t in tests:   # the gate and the level each test was held to (analysis.contrasts.adjust_families)
        t["primary"], t["level"] = primary, levels.get(t["family"], ALPHA)
    return {"conditions": conds, "tests": tests, "legacy": legacy, "primary": primary,
            "unit": design_unit([(c["n_checkpoints"], c["n_runs"]) for c in pre]),
            "n_shares": len({c["share"] for c in pre})}


def _design(b: dict, part: pd.DataFrame, speakers: bool = True) -> str:
    """``3 shares x 1 checkpoint x 3 seeds + FBANK x 3 seeds; 6 F, 6 M test speakers``."""
    pre = [c for c in b["conditions"].values() if c["share"] is not None]
    ks = sorted({c["n_checkpoints"] for c in pre})
    seeds = sorted({s for c in pre for s in (c["seeds"] or [c["n_runs"] // max(1, c["n_checkpoints"])])})
    k_text = (f"{ks[0]} checkpoint{'s' if ks[0] != 1 else ''}" if len(ks) == 1 else
              f"{ks[0]}-{ks[-1]} checkpoints") if ks else "no checkpoint"
    s_text = (f"{seeds[0]} seed{'s' if seeds[0] != 1 else ''}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]} seeds")
    out = f"{b['n_shares']} share{'s' if b['n_shares'] != 1 else ''} x {k_text} x {s_text}"
    for n, c in b["conditions"].items():
        if c["share"] is None:
            out += f" + {n} x {c['n_runs']} seed{'s' if c['n_runs'] != 1 else ''}"
    return out + (f"; {_speaker_counts(part)} test speakers" if speakers else "")


def _speaker_counts(part) -> str:
    """``3 F, 1 M``: the test speakers of each gender, from the rows' n_speakers."""
    counts = {g: part.loc[part["gender"] == g, "n_speakers"].dropna() for g in ("F", "M")}
    return ", ".join(f"{int(c.iloc[0]) if len(c) else 0} {g}" for g, c in counts.items())


def _num(x: float, per: str = "") -> str:
    return f"{x:+.1f}{per}"


def _ci_text(ci, word: str = "95 % CI") -> str:
    return f"{word} {ci[0]:+.1f} to {ci[1]:+.1f}" if ci else "no CI"


def _p_text(part, t, m, k="delta_rel") -> str:
    p = _value(part, t["name"], m, f"{t['what']}_p_adj", k)
    if p is None:
        return ""
    return f", p {p:.3f}" if t["size"] == 1 else f", Holm p {p:.3f} ({t['family']}, {t['size']} tests)"


def _movement(part, t, m, metric, lead: str) -> str:
    """Which gender's score moved: each gender's difference with its CI, the called ones first."""
    said = []
    for g in ("F", "M"):
        r = _get(part, t["name"], m, t["what"], g)
        if r is None:
            continue
        d, ci, hit = float(r["value"]), _ci(r), bool(_value(part, t["name"], m, f"{t['what']}_called", g))
        if hit:
            said.append((0, f"{GENDER_WORDS[g]} {metric} is {'higher' if d > 0 else 'lower'} by {abs(d):.1f} "
                            f"({_ci_text(ci, 'CI')})"))
        else:
            said.append((1, f"{GENDER_WORDS[g]} changed by {_num(d)} ({_ci_text(ci, 'CI')}: not detected)"))
    said.sort(key=lambda x: x[0])
    if not said:
        return ""
    if all(s[0] == 1 for s in said):
        return f"{lead}neither gender's {metric} moved detectably: " + "; ".join(s[1] for s in said)
    joint = " while " if said[-1][0] else " and "   # a called gender beside one not detected, or both called
    return lead + joint.join(s[1] for s in said)


def _favours(d: float, higher_is_better: bool) -> str:
    """Whose side a Δrel difference moves the gap to: for a score where higher is better a larger
    Δrel is women's relative gain; for an error rate a smaller one."""
    return "women's" if (d > 0) == higher_is_better else "men's"


def answer_sentence(task: str, pair: str, m: str, part: pd.DataFrame) -> str:
    """One sentence: what the design lets this task's numbers say about the female share of pretraining."""
    head = f"**{_title(task, pair, m)}**: "
    b = read_block(part, m)
    if b["legacy"]:
        return head + ("compared by an older gendergap (no primary test or families stored): run the study again "
                       "(its conditions steps) to answer.")
    design = _design(b, part) if b["conditions"] else ""
    # the primary test; with one pretrained share, its comparison with the reference (FBANK)
    t = b["primary"] or next((x for x in b["tests"] if x["family"] == "reference"), None)
    if t is None:
        return head + f"no two pretraining shares to compare ({design})."
    if t["status"] == FEW_SPEAKERS:
        return (head + f"cannot answer: fewer than {MIN_SPEAKERS} test speakers of a gender ({_speaker_counts(part)}; "
                f"{_design(b, part, speakers=False)}), so resampling the speakers cannot show how a difference moves "
                "with them: no interval "
                f"and no call; test on {MIN_SPEAKERS} or more speakers of each gender.")
    if t["status"] == ONE_RUN:
        return (head + f"cannot answer: each condition was trained once ({design}): one checkpoint and one seed "
                "per share, and nothing measures how much a score moves between pretraining runs and training "
                "seeds; pretrain 2 or more checkpoints per share, or train the task with several seeds "
                "(`seeds: [0, 1, 2]`).")
    r = _get(part, t["name"], m, t["what"], "delta_rel")
    if r is None:
        return head + f"cannot answer: Δrel is undefined for a condition (a score of 0 for both genders; {design})."
    nonfinite = int(_value(part, t["name"], m, f"{t['what']}_nonfinite", "delta_rel") or 0)
    if _ci(r) is None:
        return (head + f"cannot answer: Δrel is undefined in {nonfinite} of the speaker resamples (a score of 0 for "
                f"both genders in them; {design}).")
    return head + _answer(part, b, t, m, r, design, nonfinite)


def _answer(part, b, t, m, r, design, nonfinite) -> str:
    metric, hib = m.upper(), bool(get_metric(m).higher_is_better)
    conds = b["conditions"]
    reference = t["family"] == "reference"   # one pretrained share: no share comparison at all
    one_each = b["unit"] == "seed" and not reference
    d, ci, slope = float(r["value"]), _ci(r), t["what"] == "slope"
    ck = {n: (c["checkpoints"][0] if c["checkpoints"] else n) for n, c in conds.items()}
    if slope:
        what = "Δrel slope over the female share" + (" of the checkpoints, one per share," if one_each else "")
        numbers = f"{what} {_num(d, ' per 10 points')} ({_ci_text(ci)}{_p_text(part, t, m)})"
        lead = "; per 10 points of share, "
    else:
        a, bb = t["a"], t["b"]
        what = (f"Δrel checkpoint {ck[a]} ({a}) vs checkpoint {ck[bb]} ({bb})" if one_each else f"Δrel {a} vs {bb}")
        numbers = f"{what} {_num(d)} ({_ci_text(ci)}{_p_text(part, t, m)})"
        lead = f"; with {ck[a] if one_each else a} rather than {ck[bb] if one_each else bb}, "
    mde = _value(part, t["name"], m, f"{t['what']}_mde", "delta_rel")
    margin = _value(part, t["name"], m, f"{t['what']}_margin", "delta_rel")
    equivalent = _value(part, t["name"], m, f"{t['what']}_equivalent", "delta_rel")
    per = " Δrel points per 10 points of share" if slope else " points"
    if _value(part, t["name"], m, f"{t['what']}_called", "delta_rel"):
        side = (f"the gap moves in {_favours(d, hib)} favour as the share grows" if slope else
                f"the gap is more in {_favours(d, hib)} favour with {ck[t['a']] if one_each else t['a']}")
        claim = (("the gap differs across the checkpoints" if one_each else "the gap changes with the female share of "
                  "pretraining") if slope else
                 (f"the gap differs between checkpoint {ck[t['a']]} and checkpoint {ck[t['b']]}" if one_each else
                  f"the gap differs between {t['a']} and {t['b']} (no pretraining)" if reference else
                  f"the gap differs between {t['a']} and {t['b']} pretraining"))
        text = f"{claim}: {numbers}, {side}{_movement(part, t, m, metric, lead)}"
    elif equivalent and margin is not None:
        text = (f"no change: {numbers}; its 90 % CI lies within ±{margin:.1f}{per}, the margin the config states "
                "(equivalence test)")
    else:
        text = (f"no {'slope' if slope else 'difference'} detected (this design detects "
                f"{'slopes' if slope else 'differences'} of {mde:.1f}{per} or more"
                f"{_over_span(b, mde) if slope else ''}): "
                f"{numbers}"
                if mde is not None else f"no {'slope' if slope else 'difference'} detected: {numbers}")
        if margin is not None:
            text += f"; not shown equivalent within ±{margin:.1f}{per} either"
        moved = any(_value(part, t["name"], m, f"{t['what']}_called", g) for g in ("F", "M"))
        text += _movement(part, t, m, metric, lead) if moved else ""
    if one_each:
        text += ("; with one checkpoint per share, the share's effect and the pretraining run's cannot be told apart "
                 f"({design})")
    else:
        text += f" ({design}{_run_spread(part, m, b)})"
    if nonfinite:
        text += f"; {nonfinite} resamples with an undefined Δrel left out"
    if reference:
        return (f"one female share of pretraining, so the share's effect cannot be estimated; against the reference "
                f"without pretraining, {text}." + _others(part, b, t, m))
    text += "; " + _trend_clause(part, b, m) + "."
    return text + _others(part, b, t, m)


def _over_span(b: dict, per_unit: float) -> str:
    """A slope per 10 points read over the shares' span: `, 16.0 from 0 to 100 % female`."""
    shares = [c["share"] for c in b["conditions"].values() if c["share"] is not None]   # stored in percent
    lo, hi = min(shares), max(shares)
    return f", {per_unit * (hi - lo) / SLOPE_UNIT:.1f} from {lo:.0f} to {hi:.0f} % female"


def _run_spread(part, m, b) -> str:
    """With the pretraining run as the unit: how far Δrel moves between runs of one share beyond what
    the test speakers move it (sqrt var_run; 0 when the runs agree within the speakers' noise)."""
    if b["unit"] != "checkpoint":
        return ""
    var = _value(part, COMPONENTS_ROW, m, "var_run", "delta_rel")
    if var is None:
        return ""
    return (f"; Δrel's sd between pretraining runs of a share, beyond the speakers': "
            f"{math.sqrt(max(var, 0.0)):.1f} points")


def _trend_clause(part, b, m) -> str:
    """2-3 shares: no trend; 4+: the lack-of-fit test of the line."""
    if b["n_shares"] < TREND_MIN_SHARES:
        return (f"no trend can be estimated from {b['n_shares']} shares (a dose-response needs {TREND_MIN_SHARES} "
                "or more)")
    r = _get(part, CURVATURE, m, "curvature", "delta_rel")
    p = _value(part, CURVATURE, m, "curvature_p_adj", "delta_rel")
    if r is None or p is None:
        return f"lack of fit (curvature) not tested over {b['n_shares']} shares"
    bent = _value(part, CURVATURE, m, "curvature_called", "delta_rel")
    return (f"lack of fit (curvature) {float(r['value']):+.1f} points, Holm p {p:.3f}"
            + (": the shares' estimates bend away from a line" if bent else ": no departure from a line detected"))


def _others(part, b, primary, m) -> str:
    """The other Δrel differences called, by family; or, behind a primary test not called, that none
    was tested."""
    follow = [t for t in b["tests"] if t["family"] != "primary" and t["status"] == "compared"]
    if primary is not None and follow and not _value(part, primary["name"], m, f"{primary['what']}_called",
                                                      "delta_rel"):
        return (" The other comparisons are tested only once the primary test is called, so that the table's "
                f"chance of a false call stays at {ALPHA:g}: none is.")
    out = []
    for family in ("secondary", "reference"):
        hits = [t for t in b["tests"] if t["family"] == family and t is not primary and t["what"] != "curvature"
                and _value(part, t["name"], m, f"{t['what']}_called", "delta_rel")]
        if hits:
            size = hits[0]["size"]
            out.append(f"{'Also called' if family == 'secondary' else 'Against the reference'} (Δrel, Holm over "
                       f"{size} tests): " + "; ".join(
                           f"{t['name']} {_value(part, t['name'], m, t['what'], 'delta_rel'):+.1f} "
                           f"({_ci_text(_ci(_get(part, t['name'], m, t['what'], 'delta_rel')), 'CI')})" for t in hits))
    return "".join(f" {x}." for x in out)


def answer_lines(rows: pd.DataFrame) -> list[str]:
    """The report's opening: one generated sentence per task (and language pair)."""
    if rows.empty:
        return []
    out = ["## The answer\n", "Does the female share of the pretraining speech change the gender gap (Δrel) of "
           "the systems built on it, beyond what test speakers, training seeds and pretraining runs produce? One "
           "sentence per task, from its primary test (tables below): a difference called with its CI, or the "
           "smallest difference the design could have detected.\n"]
    out += [f"- {answer_sentence(task, pair, m, part)}" for task, pair, m, part in _blocks(rows)]
    return out + [""]


def _stem(task: str, pair: str) -> str:
    return "conditions_" + re.sub(r"[^A-Za-z0-9_-]+", "_", task + (f"_{pair}" if pair else ""))


def _verdict(part, t, m, key="delta_rel") -> str:
    if _get(part, t["name"], m, t["what"], key) is None:
        return "undefined"
    if t["status"] != "compared":
        return t["status"] or "undefined"
    if _value(part, t["name"], m, f"{t['what']}_called", key):
        return "called"
    if _gated_out(part, t, m, key):
        return "not tested: the primary test was not called"
    margin = _value(part, t["name"], m, f"{t['what']}_margin", key)
    if margin is not None and _value(part, t["name"], m, f"{t['what']}_equivalent", key):
        return f"no change (within ±{margin:.1f})"
    mde = _value(part, t["name"], m, f"{t['what']}_mde", key)
    return "not detected" + (f" (MDE {mde:.1f})" if mde is not None else "")


def _gated_out(part, t, m, key="delta_rel") -> bool:
    """Whether ``t`` is a follow-up test behind a primary test that was not called (never called then)."""
    if t["family"] == "primary" or t.get("primary") is None:
        return False
    return not _value(part, t["primary"]["name"], m, f"{t['primary']['what']}_called", key)


def _cell(part, name, m, field, key) -> str:
    r = _get(part, name, m, field, key)
    return "–" if r is None else fmt_ci(r["value"], r["ci_low"], r["ci_high"], sign=True)


def _unit_line(b: dict) -> str:
    return {"checkpoint": "Unit: the pretraining run (checkpoints' spread within conditions).",
            "seed": "Unit: the downstream seed. One checkpoint per share: a difference is between two checkpoints, and "
                    "the share's effect and the pretraining run's cannot be told apart.",
            None: "Unit: none (one run per condition): nothing is compared."}[b["unit"]]


def _p_header(family: str, size: int, level: float) -> str:
    gate = "" if family == "primary" else ", behind the primary test"
    return (f"p ({family}, at {level:g}{gate})" if size == 1 else
            f"p Holm ({family}, {size} tests, at {level:g}{gate})")


HEADER = ["Comparison", "Δrel diff (95% CI)", "p", "MDE Δrel", "F − M diff (95% CI)", "F/M diff (95% CI)",
          "All diff (95% CI)", "F diff", "M diff", "Verdict (Δrel)"]


def _test_row(part, t, m) -> list[str]:
    w = t["what"]
    return [t["name"], _cell(part, t["name"], m, w, "delta_rel"), fmt(_value(part, t["name"], m, f"{w}_p_adj",
                                                                             "delta_rel"), 3),
            fmt(_value(part, t["name"], m, f"{w}_mde", "delta_rel"), 1), _cell(part, t["name"], m, w, "gap"),
            _cell(part, t["name"], m, w, "ratio"), _cell(part, t["name"], m, w, "all"),
            _cell(part, t["name"], m, w, "F"), _cell(part, t["name"], m, w, "M"), _verdict(part, t, m)]


def condition_sections(rows: pd.DataFrame, out_dir: Path, written: dict, write_csv,
                       titles: dict[str, str] | None = None) -> list[str]:
    """Per task: the conditions, the comparison table files and the trend plot; report.md lines."""
    if rows.empty:
        return []
    md = ["## Pretraining conditions compared\n", CAPTION + "\n"]
    for task, pair, m, part in _blocks(rows):
        stem, b = _stem(task, pair), read_block(part, m)
        cond_rows = [[n, _share_cell(c),
                      ", ".join(c["checkpoints"]) or str(c["n_checkpoints"]), str(c["n_runs"])]
                     + [fmt_ci(_value(part, n, m, "condition", k), None, None, sd=_value(part, n, m, "condition_sd", k))
                        for k in ("all", "F", "M", "gap", "ratio", "delta_rel")]
                     for n, c in b["conditions"].items()]
        blocks = [(f, [t for t in b["tests"] if t["family"] == f]) for f in FAMILIES]
        blocks = [(f, ts) for f, ts in blocks if ts]
        body = "\n".join(f"{FAMILY_TITLES[f]}:\n\n" + markdown_table(
            HEADER[:2] + [_p_header(f, len(ts), ts[0]["level"])] + HEADER[3:], [_test_row(part, t, m) for t in ts])
            for f, ts in blocks)
        written[f"{stem}.md"] = _text(out_dir / f"{stem}.md", body)
        written[f"{stem}.tex"] = _text(out_dir / f"{stem}.tex", latex_table(
            HEADER[:2] + ["p (Holm within the family)"] + HEADER[3:],
            [(f"{FAMILY_TITLES[f]}, {len(ts)} test{'s' if len(ts) != 1 else ''}", [_test_row(part, t, m) for t in ts])
             for f, ts in blocks], CAPTION + " " + _unit_line(b), f"tab:{stem}"))
        written[f"{stem}.csv"] = write_csv(_wide(task, pair, m, part, b), out_dir / f"{stem}.csv")
        md += [f"### {task_title(task, titles)}" + (f", {pair}" if pair else "") + f" ({m.upper()})\n",
               _unit_line(b) + "\n",
               markdown_table(["Condition", "female share, %", "checkpoints", "runs", f"{m.upper()} All", "F", "M",
                               "F − M", "F/M", "Δrel"], cond_rows) + "\n"] + _unknown_note(b) + [body + "\n"]
        png = _trend_plot(part, m, out_dir / f"trend_{stem[len('conditions_'):]}.png", _title(task, pair, m))
        if png:
            written[png.name] = png
            md.append(f"![Δrel against female share of pretraining: {_title(task, pair, m)}]({png.name})\n")
    return md


def _share_cell(c: dict) -> str:
    """``36``, or ``36 (U 63)`` where part of the pretraining speech is of unknown gender."""
    if c["share"] is None:
        return "reference"
    return fmt(c["share"], 0) + (f" (U {fmt(c['unknown'], 0)})" if c.get("unknown") else "")


def _unknown_note(b: dict) -> list[str]:
    """The sentence under a conditions table whose shares leave speech of unknown gender out."""
    if not any(c.get("unknown") for c in b["conditions"].values()):
        return []
    return ["The female share is F/(F+M) of each condition's pretraining speech of known gender; U is the % of its "
            "speech of unknown gender (Table 3), which the share leaves out: a condition with U > 0 stands for a "
            "female share of all its speech anywhere from F to F + U, and the trend reads its known part only.\n"]


def _wide(task: str, pair: str, m: str, part: pd.DataFrame, b: dict) -> pd.DataFrame:
    """The CSV: one row per condition and per test, every number unrounded, and per cell the
    results-DB id of its score row (``<key>_score_id``), which `gendergap trace` follows."""
    out = []
    items = [("condition", n, "condition", None) for n in b["conditions"]] + [
        ("test", t["name"], t["what"], t) for t in b["tests"]]
    for kind, n, what, t in items:
        row = {"checkpoint": n, "task": task, "lang_pair": pair, "row": kind}
        if t is None:
            c = b["conditions"][n]
            row.update(female_share=c["share"], unknown_share=c["unknown"], checkpoints=" ".join(c["checkpoints"]),
                       n_checkpoints=c["n_checkpoints"], runs=c["n_runs"])
        else:
            row.update(kind=what, family=t["family"], family_size=t["size"], status=t["status"],
                       verdict=_verdict(part, t, m))
        extras = ("sd", "nonfinite") if t is None else ("p", "p_adj", "se", "df", "mde", "nonfinite", "equivalent",
                                                         "margin", "called")
        for k in KEYS:
            r = _get(part, n, m, what, k)
            row.update({k: r["value"] if r is not None else None, f"{k}_low": r["ci_low"] if r is not None else None,
                        f"{k}_high": r["ci_high"] if r is not None else None,
                        f"{k}_score_id": str(int(r["id"])) if r is not None else ""})
            for extra in extras:
                row[f"{k}_{extra}"] = _value(part, n, m, f"{what}_{extra}", k)
        row["run_ids"] = " ".join(str(int(x)) for x in dict.fromkeys(part["run_id"]))
        out.append(row)
    for comp in ("speaker", "run", "seed"):   # Δrel's variance components (what a dry run reuses)
        out.append({"checkpoint": COMPONENTS_ROW, "task": task, "lang_pair": pair, "row": f"var_{comp}",
                    "delta_rel": _value(part, COMPONENTS_ROW, m, f"var_{comp}", "delta_rel")})
    return pd.DataFrame(out)


def _trend_plot(part: pd.DataFrame, m: str, path: Path, title: str) -> Path | None:
    """Δrel of each condition against its female share, with its CI; the reference (no pretraining)
    as a horizontal band; the fitted slope when there is one (4+ shares)."""
    names = _conditions(part, m)
    pts = [(_value(part, n, m, "female_share"), _get(part, n, m, "condition", "delta_rel"), n)
           for n in names if _value(part, n, m, "female_share") is not None]
    pts = [p for p in pts if p[1] is not None]   # a condition without a Δrel (scores of 0) has no point
    if len(pts) < 2:
        return None
    fig = Figure(figsize=(5.5, 3.6))
    ax = fig.add_subplot()
    for n in names:
        r = _get(part, n, m, "condition", "delta_rel")
        if _value(part, n, m, "female_share") is None and r is not None:
            lo, hi = (r["ci_low"], r["ci_high"]) if not pd.isna(r["ci_low"]) else (r["value"], r["value"])
            ax.axhspan(lo, hi, color="grey", alpha=0.2, label=f"{n} (no pretraining) 95% CI")
            ax.axhline(r["value"], color="grey", ls=":")
    x = np.array([p[0] for p in pts])
    y = np.array([p[1]["value"] for p in pts])
    # each CI drawn from its own ends: a percentile interval need not contain the mean of the runs
    # (skewed resamples, a seed term), and errorbar refuses the negative distance such a point gives
    ci = np.array([[p[1]["ci_low"], p[1]["ci_high"]] if not pd.isna(p[1]["ci_low"]) else [p[1]["value"]] * 2
                   for p in pts], dtype=float)
    ax.errorbar(x, ci.mean(axis=1), yerr=(ci[:, 1] - ci[:, 0]) / 2, fmt="none", ecolor="tab:purple", capsize=4)
    ax.plot(x, y, "o", color="tab:purple", label="condition mean, 95% CI")
    for xi, yi, (_, _, n) in zip(x, y, pts):
        ax.annotate(n, (xi, yi), textcoords="offset points", xytext=(6, 4), fontsize=8)
    slope = _value(part, SLOPE, m, "slope", "delta_rel")
    if slope is not None and not math.isnan(slope):
        grid = np.linspace(0, 100, 11)
        ax.plot(grid, y.mean() + slope / 10 * (grid - x.mean()), color="tab:purple", alpha=0.5,
                label=f"slope {slope:+.1f} per 10 points")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xlabel("female share of pretraining speech, %")
    ax.set_ylabel(f"Δrel of {m.upper()}, %")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="best")
    return save_png(fig, path)


def _text(path: Path, text: str) -> Path:
    write_text(path, text)
    return path

