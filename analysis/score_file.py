"""One hypothesis file scored per gender (`gendergap score asr|st`), then saved.

The results DB gets its rows before the JSON is written, so a failing DB leaves no result JSON
behind; the caller logs each step between the two calls.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from analysis.metrics import metrics_for
from analysis.scoring import score_files, store_result
from corpora.base.atomic import write_json
from corpora.base.errors import UserError


def metric_options(score_kind: str, normalize: str = "none", tokenize: str = "13a", lowercase: bool = False) -> dict:
    """score_files' text options of a kind: WER normalisation (asr), BLEU tokeniser and case (st)."""
    return {"normalization": normalize} if score_kind == "asr" else {"tokenize": tokenize, "lowercase": lowercase}


def score_hypotheses(*, score_kind: str, refs: str, hyps: str, speakers: str, hyp_column: int | None = None,
                     normalize: str = "none", metric: str | None = None, tokenize: str = "13a", lowercase: bool = False,
                     bootstrap: int, seed: int, level: float, db: str | None = None,
                     checkpoint: str | None = None) -> dict:
    """Per-gender ``metric`` (one of ``score_kind``'s: asr wer (default) or cer, st bleu (default) or
    chrf) of ``hyps`` against ``refs``, the
    speakers and genders from the ``speakers`` table (analysis.scoring.score_files' result)."""
    if db and not checkpoint:
        raise UserError("--db needs --checkpoint", fix="name the model the hypotheses come from")
    opts = metric_options(score_kind, normalize, tokenize, lowercase)
    if not 0 < level < 1:
        raise UserError(f"--level {level} is not between 0 and 1", fix="e.g. --level 0.95")
    offered = metrics_for(score_kind)
    metric = metric or offered[0]
    if metric not in offered:
        raise UserError(f"--metric {metric} is not a metric of `score {score_kind}`",
                        fix="use one of: " + ", ".join(offered))
    return score_files(metric, refs, hyps, speakers, bootstrap=bootstrap, seed=seed, level=level,
                       hyp_column=hyp_column, **opts)


def store_score(result: dict, *, score_kind: str, refs: str, hyps: str, speakers: str, hyp_column: int | None = None,
                normalize: str = "none", tokenize: str = "13a", lowercase: bool = False, bootstrap: int, seed: int,
                level: float, db: str, checkpoint: str, task: str | None = None, lang_pair: str = "",
                subset: str = "test") -> int:
    """Store ``result`` in the results DB ``db`` as one run (task: ``score_kind`` unless given); its
    config names the inputs by absolute path, so `score compare --db` can re-read them. The run id."""
    config = {"refs": str(Path(refs).resolve()), "hyps": str(Path(hyps).resolve()),
              "table": str(Path(speakers).resolve()), "bootstrap": bootstrap, "seed": seed, "level": level,
              **metric_options(score_kind, normalize, tokenize, lowercase),
              **({"hyp_column": hyp_column} if hyp_column else {})}
    return store_result(db, result, checkpoint=checkpoint, task=task or score_kind, lang_pair=lang_pair,
                        subset=subset, config=config)


def write_result(path: str, result: dict) -> None:
    """Write ``result`` as JSON; an error of the disk names the file asked for, not its temp name."""
    try:
        write_json(path, result)
    except OSError as e:  # a full or read-only disk
        if isinstance(e, FileExistsError) and not Path(path).parent.is_dir():  # mkdir met a file
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path) from e
        raise OSError(e.errno, e.strerror, path) from e
