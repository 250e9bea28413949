"""What a study will cost before it runs: disk written and compute time, per stage and in total.

    estimates = estimate(jobs, profile=load_profile())    # one Estimate per step still to run
    print(cost_table(estimates, parallel=2))
    check_space(estimates)                                 # a UserError when a file system is too small

Disk comes from the data and the models: a feature-store entry holds every stored row's frames
(duration / the model's frame shift) x hidden size x layers x 2 bytes (fp16), the figure the store
itself plans its shards with; run directories and corpora from sizes measured on the built-in
study, scaled by what scales them. The study's own stages (corpus, pretraining, features) are
estimated here; a task's steps by the estimator its registration declares (gendergap.tasks: the
built-in ones next to their steps in gendergap/steps/), and a step without one (scoring, wiring)
costs a few seconds. Time comes from a **throughput profile**: achieved GFLOP/s of
extraction and of training (a model's forward FLOPs per audio second are counted by torch's
FlopCounterMode on the meta device, ssl_pretrain.families.forward_gflops), seconds per frozen-ASR
step, ST update and probe. The figures are either measured on this machine by `gendergap bench`
(written to ``~/.cache/gendergap/profile.json``) or the defaults below, measured on the 2-core CPU
of the built-in study and on an H100 (docs/measurements.md, "On a GPU"); the table says which.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from corpora import stats
from corpora.base.atomic import write_json
from corpora.base.boundary import finite, read_json
from corpora.base.errors import UserError
from corpora.base.reserved import FBANK
from corpora.base.units import bytes_label
from corpora.utterances import UtteranceTable
from gendergap.steps.base import CheckContext
from gendergap.steps.data import CorpusStep
from gendergap.steps.models import FeaturesStep, PretrainStep
from gendergap.tasks import step_kind
from ssl_pretrain.architecture import preset_config
from ssl_pretrain.checkpoints import CheckpointRef
from ssl_pretrain.families import count_parameters, forward_gflops, frame_shift_s
from ssl_pretrain.feature_cover import cover
from ssl_pretrain.hardware import load_preset
from ssl_pretrain.registry import run_checkpoint

PROFILE_PATH = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gendergap" / "profile.json"

# Defaults. cpu: fitted to the built-in study's jobs on the 2-core Intel Xeon development VM, two jobs at
# a time, one thread each, started warm (its study/sweep/jobs/*/done.json, 2026-11-28: every stage's
# estimate within 1-2 % of its summed job time but gender-st's, +19 %; train_gflops is what `gendergap
# bench` measured there). st_s_per_update was lowered from 0.32 when fairseq's processes began flushing
# subnormal floats (FBANK ST trained 2.5x slower on them): 0.32 x the ST stage's job time after / before
# (2,608 s on a machine loaded ~1.26x by other work, by asr-frozen's time there / 3,169 s idle).
# cuda: one H100 (docs/measurements.md, "On a GPU", 2026-11-25): extraction 36-90 TFLOP/s achieved
# (fp32 / fp16), base pretraining ~205 audio-s/s trained.
DEFAULTS = {
    "cpu": {"extract_gflops": 20.0, "extract_overhead_s_per_audio_s": 0.001, "train_gflops": 46.0,
            "train_overhead_s_per_step": 0.088, "frozen_s_per_step": 0.071, "st_s_per_update": 0.22,
            "probe_s_per_layer": 3.5, "job_overhead_s": 3.0},
    "cuda": {"extract_gflops": 40000.0, "extract_overhead_s_per_audio_s": 0.0004, "train_gflops": 9000.0,
             "train_overhead_s_per_step": 0.02, "frozen_s_per_step": 0.02, "st_s_per_update": 0.05,
             "probe_s_per_layer": 1.0, "job_overhead_s": 20.0},
}
# Sizes measured on the built-in study, per unit of what scales them
FP16 = 2
FIXED_STEP_S = 3.0                              # a step that reads tables and writes small files
WAV_BYTES_PER_S = 16000 * 2                     # synthetic corpus: 16 kHz 16-bit WAV
SYNTH_S_PER_UTTERANCE = 0.0078                 # espeak-ng on 2 workers (mini: 8,020 utterances in 62 s)
SYNTH_MEAN_S = 1.55                             # mean synthetic utterance (mini: 1.65 s French, 1.36 s gender set)


@dataclass
class Estimate:
    step: str
    stage: str                              # the step's kind: features, asr-e2e, st, ...
    seconds: float | None                   # compute time of the step on its device (None: unknown)
    device: str                             # cpu or cuda
    disk: dict[str, float] = field(default_factory=dict)   # location -> bytes written
    store: dict | None = None               # a features step: {path, layers, per_layer} of its store entries


def load_profile(path: str | os.PathLike | None = None) -> dict:
    """{device: {figure: value}, "source": "measured (FILE)" | "default"}: ``path`` (or the cached
    `gendergap bench` profile when one exists) read as data, else the defaults."""
    p = Path(path) if path else PROFILE_PATH
    if not p.is_file():
        if path:
            raise UserError("no such profile", path=p, fix="write one with `gendergap bench --out FILE`")
        return {**DEFAULTS, "source": "default"}
    data = read_json(p, "throughput profile", shape=dict, max_bytes=1 << 20, fix="run `gendergap bench` again")
    devices = data.get("devices") or {}
    if not isinstance(devices, dict):
        raise UserError("the throughput profile's 'devices' is not a mapping", path=p,
                        fix="run `gendergap bench` again")
    out = {dev: dict(figs) for dev, figs in DEFAULTS.items()}
    for dev, figs in devices.items():
        if dev in out and isinstance(figs, dict):
            for k, v in figs.items():
                if k in out[dev]:
                    # rates divide: above zero; times and overheads may be zero
                    out[dev][k] = finite(v, f"profile {dev}.{k}", lo=1e-9 if k.endswith("gflops") else 0.0, path=p)
    return {**out, "source": f"measured ({p})"}


def save_profile(out: str | os.PathLike, device: str, figures: dict, presets: list[str], runtime: dict) -> Path:
    """Write ``figures`` (`gendergap bench`'s, for ``device``'s kind) into the profile at ``out``:
    the other device's figures and any key this version does not write are kept, not dropped."""
    out = Path(out)
    old = read_json(out, "throughput profile", shape=dict, max_bytes=1 << 20) if out.exists() else {}
    kind = "cuda" if device.startswith("cuda") else "cpu"
    devices = old.get("devices") if isinstance(old.get("devices"), dict) else {}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, {**old, "devices": {**devices, kind: figures}, "measured": time.strftime("%Y-%m-%dT%H:%M:%S"),
                     "presets": presets, "runtime": runtime})
    return out


# --------------------------------------------------------------------------- what a step costs

class Models:
    """What each checkpoint a study names costs to run (forward GFLOP per audio second, hidden size,
    outputs, frame shift, parameters), from its architecture alone: CheckpointRef.architecture for a
    file or folder (no weights read), the preset for a checkpoint the study pretrains."""

    def __init__(self, jobs):
        self.source: dict[str, tuple[str, str]] = {}
        self.trust = False   # the sweep's --trust-checkpoint, as its checkpoints step has it
        for j in jobs:
            if j.kind == "checkpoints":
                self.trust = bool(j.trust)
                for e in j.entries:
                    if e.get("path"):
                        self.source[e["name"]] = ("path", e["path"])
            if j.kind == "pretrain":
                self.source[j.checkpoint] = ("preset", j.preset)
        self._cache: dict[str, dict | None] = {}

    def facts(self, name: str) -> dict | None:
        """{gflops, front_gflops, dim, outputs, frame_shift, params} of checkpoint ``name`` (a twin: its
        model's); front_gflops: the convolutional front-end's share of gflops."""
        name = name.removesuffix("+random-init")
        if name not in self._cache:
            self._cache[name] = self._facts(name)
        return self._cache[name]

    def _facts(self, name: str) -> dict | None:
        if name == FBANK:
            return {"gflops": 0.0, "front_gflops": 0.0, "dim": 160, "outputs": 1, "frame_shift": 0.02, "params": 0}
        kind, where = self.source.get(name, (None, None))
        if kind is None or (kind == "path" and not Path(where).exists()):
            return None
        if kind == "preset":
            config, rate = preset_config(where), 16000
        else:
            config, rate = CheckpointRef.resolve(run_checkpoint(where)[0], trust=self.trust).architecture()
        return {"gflops": forward_gflops(config), "front_gflops": forward_gflops(config, front_end_only=True),
                "dim": config.hidden_size, "outputs": config.num_hidden_layers + 1,
                "frame_shift": frame_shift_s(config, rate), "params": count_parameters(config) or 0}


@dataclass
class Context:
    models: Models
    profile: dict
    pending: CheckContext        # outputs of steps not yet done: their files are not there to read
    merges: dict = field(default_factory=dict)   # a pending merged table -> (its input tables, gender map)
    tables: dict = field(default_factory=dict)
    stores: dict = field(default_factory=dict)   # features step name -> its store entries, computed once

    def known(self, path: str) -> bool:
        """The table's rows can be read now: it is there, or it is the study's merge of tables that are."""
        return not self.pending.is_pending(path) or os.path.abspath(path) in self.merges

    def table(self, path: str):
        """An utterance table (the UtteranceTable value), read once however many jobs read it; a merged
        table not written yet is merged in memory from its inputs, as its step will write it."""
        if path not in self.tables:
            tables, gender_map = self.merges.get(os.path.abspath(path), (path, None))
            self.tables[path] = UtteranceTable.load(tables, gender_map=gender_map or None)
        return self.tables[path]

    def figures(self, device: str) -> dict:
        return self.profile["cuda" if device.startswith("cuda") else "cpu"]

    def extraction_seconds(self, audio: float, f: dict, device: str) -> float:
        fig = self.figures(device)
        return audio * (fig["extract_overhead_s_per_audio_s"] + f["gflops"] / fig["extract_gflops"])

    @staticmethod
    def device(j) -> str:
        """The device a job's time is counted on: cuda for a job that asks for a GPU, else cpu."""
        return _device(j)

    @staticmethod
    def audio_seconds(rows) -> float:
        return float(rows["duration"].astype(float).clip(lower=0).sum())

    @staticmethod
    def feature_bytes(rows, layers: int, f: dict) -> float:
        """What the store keeps of ``rows`` at ``layers`` layers: frames x hidden size x layers, fp16."""
        return Context.audio_seconds(rows) / f["frame_shift"] * layers * f["dim"] * FP16


def _device(j) -> str:
    return "cuda" if (j.resources or {}).get("gpus") else "cpu"


# An estimator: (step, Context) -> (seconds or None when unknown, {location: bytes}) (gendergap.tasks.Estimator)

def _store_entries(j, ctx: Context) -> tuple[list, dict] | None:
    """A features step's store entries, (rows, layers) each with every audio segment once, and its
    model's facts; None when the model or the table cannot be read yet."""
    if j.name in ctx.stores:
        return ctx.stores[j.name]
    f = ctx.models.facts(j.ckpt)
    if f is None or not ctx.known(j.table):
        return None
    table = ctx.table(j.table)
    # the same segment under two corpora is stored once: here known from headers (file name and
    # size, as corpus merge does), in the store from the files' content
    segments = dict(zip(table.rows["id"], stats.segment_keys(table.rows)))
    entries = cover([(req.rows(table), set(req.layers.resolve(f["outputs"]))) for req in j.requests],
                    lambda rows: rows["id"].map(segments).tolist())
    ctx.stores[j.name] = [(rows[~rows["id"].map(segments).duplicated()], layers) for rows, layers in entries], f
    return ctx.stores[j.name]


def _features(j, ctx: Context) -> tuple[float | None, dict]:
    found = _store_entries(j, ctx)
    if found is None:
        return None, {}
    entries, f = found
    dev = _device(j)
    audio = sum(ctx.audio_seconds(rows) for rows, _ in entries)
    return (ctx.extraction_seconds(audio, f, dev) + ctx.figures(dev)["job_overhead_s"],
            {j.store: sum(ctx.feature_bytes(rows, len(layers), f) for rows, layers in entries)})


def store_plan(j, ctx: Context) -> dict | None:
    """What a features step keeps, for the dry run: its store folder, the layers stored and the bytes
    one layer of them takes (over the rows stored with that layer)."""
    found = _store_entries(j, ctx)
    if found is None:
        return None
    entries, f = found
    layers = sorted({layer for _, ls in entries for layer in ls})
    widest = max((ctx.feature_bytes(rows, 1, f) for rows, _ in entries), default=0.0)
    return {"path": j.store, "layers": len(layers), "per_layer": widest,
            "bytes": sum(ctx.feature_bytes(rows, len(ls), f) for rows, ls in entries)}


def _pretrain(j, ctx: Context) -> tuple[float | None, dict]:
    dev = _device(j)
    fig = ctx.figures(dev)
    f = ctx.models.facts(j.checkpoint)
    cfg = load_preset(j.preset)
    tokens = float(cfg.get("dataset", {}).get("max_tokens") or 1.4e6)
    freq = (cfg.get("optimization", {}).get("update_freq") or [1])[0]
    world = int(cfg.get("distributed_training", {}).get("distributed_world_size") or 1)
    updates = j.updates + j.continue_updates
    per_update = tokens * freq * world / 16000   # the recipe's whole batch (hardware.py keeps it on fewer GPUs)
    audio = updates * per_update                 # samples per update, at most: a bound on the work
    seconds = audio * 3 * f["gflops"] / fig["train_gflops"] + updates * fig["train_overhead_s_per_step"]
    # fairseq keeps best, last and one per epoch: ~3 checkpoints of fp32 weights + Adam's two moments
    return seconds + fig["job_overhead_s"], {j.out: f["params"] * 4 * 3 * 3}


def _corpus(j, ctx: Context) -> tuple[float | None, dict]:
    from corpora.synth import SIZES
    size = SIZES.get(j.size)
    if size is None:
        return _fixed(j, ctx)
    utterances = sum((f + m) * n for roles in (size.fr, size.gender) for f, m, n in roles.values())
    return utterances * SYNTH_S_PER_UTTERANCE + 5, {j.out: utterances * SYNTH_MEAN_S * WAV_BYTES_PER_S}


def _fixed(j, ctx: Context) -> tuple[float | None, dict]:
    """Steps without a model of their own (tables, manifests, registering, scoring, the report): a
    few seconds each on the built-in study (1-5 s measured)."""
    return FIXED_STEP_S, {}


# the study's own stages, not task kinds: keyed by their step classes (a task kind's estimator
# comes with its registration, gendergap.tasks)
STUDY_ESTIMATORS = {CorpusStep.KIND: _corpus, PretrainStep.KIND: _pretrain, FeaturesStep.KIND: _features}


def estimator(kind: str):
    """The estimator of step kind ``kind``: the study's own, else its task registration's, else a
    step without a model's few seconds."""
    if kind in STUDY_ESTIMATORS:
        return STUDY_ESTIMATORS[kind]
    declared = step_kind(kind)
    return (declared and declared.estimate) or _fixed


def estimate(jobs: list, states: dict[str, str] | None = None, profile: dict | None = None,
             every_job: bool = False) -> list[Estimate]:
    """One Estimate per job not done yet (by ``states``; without them every job is still to run);
    ``every_job``: done ones too, from the data they read (a finished study's estimate against what
    its jobs took)."""
    states = states or {}
    ctx = plan_context(jobs, states, profile or load_profile())
    return [_one(j, ctx) for j in (jobs if every_job else [j for j in jobs if states.get(j.name) != "done"])]


def plan_context(jobs: list, states: dict[str, str] | None = None, profile: dict | None = None) -> Context:
    """What a dry run knows of the plan's data: the outputs of the jobs not done yet (not there to
    read), and each pending merged table's inputs (merged in memory when read)."""
    todo = [j for j in jobs if (states or {}).get(j.name) != "done"]
    return Context(Models(jobs), profile or {}, CheckContext(pending=[o for j in todo for o in j.outputs]),
                   {os.path.abspath(j.out): (list(j.tables), dict(j.gender_map)) for j in jobs if j.kind == "merge"})


def _one(j, ctx: Context) -> Estimate:
    """A job's estimate; one that cannot be made is "?" in the table, never a reason not to run
    (the inputs' own checks, run before, say what is wrong with them)."""
    try:
        seconds, disk = estimator(j.kind)(j, ctx)
    except (UserError, ValueError, KeyError, TypeError, OSError, AttributeError, IndexError):
        seconds, disk = None, {}
    store = None
    if j.kind == "features" and seconds is not None:
        store = store_plan(j, ctx)
    return Estimate(j.name, j.kind, seconds, _device(j), dict(disk), store)


# --------------------------------------------------------------------------- the table

def _fmt_time(s: float | None) -> str:
    if s is None:
        return "?"
    if s == 0:
        return "-"
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min" if s >= 60 else f"{s:.0f} s"


def wall_seconds(estimates: list[Estimate], parallel: int) -> float:
    """Wall time with ``parallel`` jobs at once: the larger of the critical bound (the longest job)
    and the work spread evenly over the slots (dependencies ignored: a lower bound on a sweep)."""
    times = [e.seconds for e in estimates if e.seconds is not None]
    if not times:
        return 0.0
    return max(max(times), sum(times) / max(1, parallel))


def cost_table(estimates: list[Estimate], parallel: int, profile: dict) -> str:
    """Per stage: jobs, disk written, CPU- and GPU-hours; then the totals and the wall time."""
    if not estimates:
        return "cost estimate: nothing to run (every job is done)"
    stages: dict[str, dict] = {}
    for e in estimates:
        s = stages.setdefault(e.stage, {"jobs": 0, "disk": 0.0, "cpu": 0.0, "gpu": 0.0, "unknown": 0})
        s["jobs"] += 1
        s["disk"] += sum(e.disk.values())
        if e.seconds is None:
            s["unknown"] += 1
        else:
            s["gpu" if e.device == "cuda" else "cpu"] += e.seconds
    head = f"  {'stage':16s} {'jobs':>4s} {'disk':>9s} {'CPU time':>9s} {'GPU time':>9s}"
    lines = [f"cost estimate ({len(estimates)} job(s) to run; throughput: {profile.get('source', 'default')}):", head]
    for name, s in stages.items():
        unknown = f"  ({s['unknown']} unknown: inputs not there yet, or no step budget)" if s["unknown"] else ""
        blank = s["unknown"] == s["jobs"]   # nothing known of the stage: "?", not a zero
        lines.append(f"  {name:16s} {s['jobs']:4d} {'?' if blank and not s['disk'] else bytes_label(s['disk']):>9s} "
                     f"{'?' if blank else _fmt_time(s['cpu']):>9s} "
                     f"{'?' if blank else _fmt_time(s['gpu']):>9s}{unknown}")
    total = {k: sum(s[k] for s in stages.values()) for k in ("disk", "cpu", "gpu")}
    lines.append(f"  {'total':16s} {len(estimates):4d} {bytes_label(total['disk']):>9s} "
                 f"{_fmt_time(total['cpu']):>9s} {_fmt_time(total['gpu']):>9s}")
    lines.append(f"  wall time with {parallel} job(s) at once: about {_fmt_time(wall_seconds(estimates, parallel))}"
                 " (at least; dependencies can make it longer)")
    return "\n".join(lines)


def _existing(path: str | os.PathLike) -> Path:
    """``path``, or its nearest existing parent: the file system it will be written on."""
    p = Path(path).resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_bytes(path: str | os.PathLike) -> int:
    """Free bytes on the file system that holds ``path`` (or would: its nearest existing parent)."""
    return shutil.disk_usage(_existing(path)).free


def store_lines(estimates: list[Estimate]) -> list[str]:
    """The dry run's feature-store plan: per store folder, each features step's layers and the size
    of one layer, the total, and the free space of the folder's file system (said when too small)."""
    by_path: dict[str, list[Estimate]] = {}
    for e in estimates:
        if e.store:
            by_path.setdefault(str(Path(e.store["path"]).resolve()), []).append(e)
    lines = []
    for path, ests in sorted(by_path.items()):
        total, free = sum(e.store["bytes"] for e in ests), free_bytes(path)
        lines.append(f"feature store {path}:")
        for e in ests:
            lines.append(f"  {e.step:36s} {e.store['layers']:3d} layer(s), "
                         f"{bytes_label(e.store['per_layer'])} per layer"
                         f" -> {bytes_label(e.store['bytes'])}")
        verdict = (f"more than the {bytes_label(free)} free on its file system: store fewer layers (`layer:` "
                   "instead of `all`), select fewer hours (`selections:`), or move --out to a larger disk"
                   if total > free else f"{bytes_label(free)} free on its file system")
        lines.append(f"  {'total':36s} {bytes_label(total)}; {verdict}")
    return lines


def check_space(estimates: list[Estimate], force: bool = False) -> list[str]:
    """Compare each file system's share of the estimate with its free space; one line per file
    system that cannot hold it. Raises a UserError (exit 2) unless ``force`` (then returns the lines)."""
    need: dict[int, dict] = {}
    for e in estimates:
        for where, n in e.disk.items():
            probe = _existing(where)
            slot = need.setdefault(os.stat(probe).st_dev, {"bytes": 0.0, "paths": set(), "probe": probe})
            slot["bytes"] += n
            slot["paths"].add(str(Path(where).resolve()))
    lines = []
    for slot in need.values():
        free = free_bytes(slot["probe"])
        if slot["bytes"] > free:
            where = ", ".join(sorted(slot["paths"]))[:300]
            lines.append(f"needs {bytes_label(slot['bytes'])} on the file system of {slot['probe']}, which has "
                         f"{bytes_label(free)} free (writing {where})")
    if lines and not force:
        for line in lines[:-1]:
            print(f"gendergap: error: {line}", file=sys.stderr)
        raise UserError(lines[-1], fix="store fewer layers (a `layer:` instead of `all`), point --out or the feature "
                        "store at a larger file system, or pass --force to run anyway")
    return lines
