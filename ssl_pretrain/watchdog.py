"""Watch a fairseq training log; on trouble roll back to the last good checkpoint, lower the lr.

The reference study could not reach 200K updates because of "training instability in the
fairseq library" (footnote 4). The usual signs, all visible in fairseq's log:
  * a NaN / inf loss (or "gradients are Nan/Inf"),
  * "Minimum loss scale reached" (fp16 loss scaler gave up; fairseq exits),
  * code perplexity collapse (the quantizer uses only a handful of codes),
  * a loss that stopped moving.
Everything here is a pure function over log lines plus a small `Policy`, so the decisions
can be tested on a synthetic log; `apply_rollback` is the only part that touches files.
"""
from __future__ import annotations

import json
import math
import re
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from corpora.base.atomic import atomic_open, atomic_path, first_free
from corpora.base.boundary import MAX_JSON_BYTES, parse_json
from corpora.base.textfile import read_lines

_SIMPLE_KV = re.compile(r"(\w+)=([^,\s|]+)")
_SAVED = re.compile(r"Saved checkpoint (\S+) \(epoch \d+ @ (\d+) updates")
_TAG = re.compile(r"\[(train_inner|train|valid)\]|\| (train_inner|train|valid) \|")
# fairseq messages that end a run or mean the weights are gone
_EVENTS = {
    "Minimum loss scale reached": "min_loss_scale",
    "gradients are Nan/Inf": "nan",
    "FloatingPointError": "nan",
}


@dataclass(frozen=True)
class Record:
    """One parsed log line: kind is train_inner / train / valid / event / saved."""
    kind: str
    num_updates: int | None
    values: dict
    lineno: int


def _number(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return v


def parse_line(line: str, lineno: int = 0) -> Record | None:
    """Parse one fairseq log line (json or simple format); None for lines of no interest."""
    m = _SAVED.search(line)
    if m:
        return Record("saved", int(m.group(2)), {"path": m.group(1)}, lineno)
    for needle, event in _EVENTS.items():
        if needle in line:
            return Record("event", None, {"event": event, "text": line.strip()[:300]}, lineno)
    tag = _TAG.search(line)
    brace = line.find("{")
    if brace >= 0 and line.rstrip().endswith("}"):
        try:
            raw = json.loads(line[brace:])
        except json.JSONDecodeError:
            return None
        kind = (tag.group(1) or tag.group(2)) if tag else "train_inner"
    elif "loss=" in line and "num_updates=" in line:  # --log-format simple
        raw = dict(_SIMPLE_KV.findall(line))
        kind = (tag.group(1) or tag.group(2)) if tag else "train_inner"
    else:
        return None
    # epoch summaries prefix every key with "train_" / "valid_"; strip it so checks read one name
    values = {}
    for k, v in raw.items():
        for prefix in ("train_", "valid_"):
            if k.startswith(prefix) and kind in ("train", "valid"):
                k = k[len(prefix):]
        values[k] = _number(v)
    n = values.get("num_updates")
    return Record(kind, int(n) if isinstance(n, float) and math.isfinite(n) else None, values, lineno)


def parse_lines(lines) -> list[Record]:
    out = []
    for i, line in enumerate(lines, start=1):
        r = parse_line(line, i)
        if r is not None:
            out.append(r)
    return out


@dataclass(frozen=True)
class Policy:
    """When to trip and what to do about it."""
    lr_factor: float = 0.5          # new peak lr = old x lr_factor on every trip
    max_restarts: int = 3           # then give up: the run needs a human
    code_ppl_min: float = 2.0       # code perplexity below this = the quantizer collapsed
    code_ppl_patience: int = 3      # ... for this many consecutive train_inner lines
    stuck_window: int = 0           # train_inner lines compared for "loss stuck" (0 = off)
    stuck_min_rel_drop: float = 0.005   # best loss in the window must beat the one before by this
    reseed_on_stuck: bool = True    # a plateau is often the seed's fault (measured on the tiny preset)
    journal: str = "watchdog.jsonl"

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Trip:
    reason: str                 # nan / min_loss_scale / code_collapse / stuck
    lineno: int
    num_updates: int | None     # update of the first bad line (None for events without one)
    good_until: int             # last update whose log line was healthy
    detail: str


def _finite(x) -> bool:
    return isinstance(x, float) and math.isfinite(x)


def check(records: list[Record], policy: Policy, start_updates: int = 0) -> Trip | None:
    """The first trip in a run's records, or None if the run looks healthy.

    ``start_updates``: the update the run resumed from (healthy by construction)."""
    good_until = start_updates
    low_ppl = 0
    losses: list[float] = []
    for r in records:
        if r.kind == "event":
            return Trip(r.values["event"], r.lineno, None, good_until, r.values["text"])
        if r.kind not in ("train_inner", "valid", "train"):
            continue
        loss = r.values.get("loss")
        if loss is not None and not _finite(loss):
            return Trip("nan", r.lineno, r.num_updates, good_until, f"loss={loss}")
        if r.kind == "train_inner":
            ppl = r.values.get("code_perplexity")
            low_ppl = low_ppl + 1 if _finite(ppl) and ppl < policy.code_ppl_min else 0
            if low_ppl >= policy.code_ppl_patience:
                return Trip("code_collapse", r.lineno, r.num_updates, good_until,
                            f"code_perplexity={ppl} < {policy.code_ppl_min} for {low_ppl} lines")
            losses.append(loss)
            w = policy.stuck_window
            if w and len(losses) >= 2 * w:
                before, recent = min(losses[-2 * w:-w]), min(losses[-w:])
                if recent > before * (1 - policy.stuck_min_rel_drop):
                    return Trip("stuck", r.lineno, r.num_updates, good_until,
                                f"best loss {recent:.4f} over the last {w} lines vs {before:.4f} before")
            if r.num_updates is not None:
                good_until = r.num_updates
    return None


_NUMBERED = re.compile(r"checkpoint_\d+_(\d+)\.pt$")


def candidate_checkpoints(save_dir: str | Path, records: list[Record]) -> list[tuple[int, Path]]:
    """(num_updates, path) of checkpoints one could resume from, oldest first.

    Numbered interval checkpoints (checkpoint_E_U.pt) carry their update in the name.
    checkpoint_last.pt is rewritten at every save, so it holds the state of the newest
    "Saved checkpoint ... @ U updates" line of the log.
    """
    save_dir = Path(save_dir)
    out = []
    for p in save_dir.glob("checkpoint_*_*.pt"):
        m = _NUMBERED.search(p.name)
        if m:
            out.append((int(m.group(1)), p))
    saved = [r.num_updates for r in records if r.kind == "saved"]
    if saved and (save_dir / "checkpoint_last.pt").is_file():
        out.append((saved[-1], save_dir / "checkpoint_last.pt"))
    # numbered files first at equal updates: checkpoint_last.pt is about to be replaced
    return sorted(out, key=lambda up: (up[0], up[1].name == "checkpoint_last.pt"))


@dataclass(frozen=True)
class Action:
    kind: str                    # rollback / give_up
    reason: str
    checkpoint: str | None       # the good checkpoint to restart from (None: from scratch)
    checkpoint_updates: int
    old_lr: float
    new_lr: float
    reseed: bool
    restart: int


def plan_recovery(trip: Trip, candidates: list[tuple[int, Path]], lr: float, restarts: int,
                  policy: Policy) -> Action:
    """Pick the newest checkpoint saved at or before the last healthy update; scale the lr.

    checkpoint_last.pt counts like any other: it is often the newest good state (fairseq writes
    it at every save, numbered files only every save_interval_updates, and none at epoch ends).
    At equal updates a numbered file wins, since checkpoint_last.pt is set aside by the rollback.
    """
    if restarts >= policy.max_restarts:
        return Action("give_up", trip.reason, None, 0, lr, lr, False, restarts)
    good = [(u, p) for u, p in candidates if u <= trip.good_until]
    ckpt_updates, ckpt = (max(good, key=lambda up: (up[0], up[1].name != "checkpoint_last.pt"))
                          if good else (0, None))
    return Action("rollback", trip.reason, str(ckpt) if ckpt else None, ckpt_updates, lr,
                  lr * policy.lr_factor, policy.reseed_on_stuck and trip.reason == "stuck", restarts + 1)


def apply_rollback(action: Action, save_dir: str | Path) -> list[str]:
    """Make fairseq resume from the good checkpoint. Checkpoints newer than it (the bad
    trajectory, checkpoint_last.pt included) are kept aside as ``*.bad<N>``, never deleted.
    Returns the names set aside."""
    save_dir = Path(save_dir)
    aside, moved_to = [], {}
    for p in sorted(save_dir.glob("checkpoint_*.pt")):
        m = _NUMBERED.search(p.name)
        if p.name == "checkpoint_last.pt" or (m and int(m.group(1)) > action.checkpoint_updates):
            moved_to[p.name] = first_free(p, f".bad{action.restart}")   # a file already there stays
            p.replace(moved_to[p.name])
            aside.append(p.name)
    if action.checkpoint is not None:
        src = Path(action.checkpoint)
        if src.name == "checkpoint_last.pt":
            src = moved_to.get(src.name, src.with_name(f"checkpoint_last.pt.bad{action.restart}"))
        with atomic_path(save_dir / "checkpoint_last.pt") as tmp:   # a unique name: never through a planted link
            shutil.copyfile(src, tmp)
    return aside


def journal(path: str | Path, event: str, **fields) -> None:
    """Append one JSON line (what the watchdog saw or did) to the journal."""
    path = Path(path)
    line = json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "event": event, **fields},
                      default=str, ensure_ascii=False)
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    with atomic_open(path) as f:  # small file; rewrite whole so a crash never leaves half a line
        f.write(old + line + "\n")


def read_journal(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    return [parse_json(x, "watchdog journal", path=path, line=n, shape=dict)
            for n, x in enumerate(read_lines(path, "watchdog journal", max_bytes=MAX_JSON_BYTES), 1) if x.strip()]
