"""The study config's schema: one pydantic model per section and per downstream task type.

Every key is a typed field with its default and its description; `gendergap sweep --schema`
prints these models (``describe``, at the end), and gendergap/config.py validates a YAML file against them. The models
are strict: a YAML value keeps its type ("3" is not 3, `true` is not 1), a key the schema does
not know is refused, and `key: null` means the key's default, as if it were left out.

Checks that need one entry only (a device string, a language pair, KEY=VALUE overrides,
distinct seeds, exactly one checkpoint source) are validators here; checks across entries
(a task naming a checkpoint, `after` cycles) are in gendergap/config.py.
"""
from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.fields import FieldInfo

from analysis.bootstrap import MAX_RESAMPLES, check_resamples
from corpora.base.boundary import finite
from corpora.base.errors import UserError
from corpora.base.strict_yaml import field_lines, model_lines, refuse
from corpora.feature_request import Layers
from downstream_st.presets import override_problem

Num = int | float


class Section(BaseModel):
    """One mapping of the config: known keys only, YAML types as they are, null = the default."""
    model_config = ConfigDict(strict=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        required = {name for name, f in cls.model_fields.items() if f.is_required()}
        return {k: v for k, v in data.items() if v is not None or k in required}


class SplitMap(Section):
    """Which split label of the table each role reads. A task is tested on rows it never saw: train
    and valid may not name test's split (`{train: test}` trains on the test set, and fairseq or
    SpeechBrain picking its best checkpoint on the test rows is a leak too); a role the mapping
    leaves out keeps its default, and an unknown role (`trian:`) is refused as any unknown key."""
    train: str = Field("train", description="table split the task trains on (never test's split)")
    valid: str = Field("valid", description="table split it validates on (never test's "
                       "split; train's is allowed, for a table without a valid split)")
    test: str = Field("test", description="table split it is tested (scored) on")

    @model_validator(mode="after")
    def _test_rows_held_out(self) -> "SplitMap":
        leaks = [role for role in ("train", "valid") if getattr(self, role) == self.test]
        if leaks:
            named = " and ".join(f"splits.{role}" for role in leaks)
            raise refuse(f"{named} {'is' if len(leaks) == 1 else 'are'} the test split {self.test!r}: the model "
                         f"would be scored on rows it was {'trained' if 'train' in leaks else 'validated'} on",
                         f"map {' and '.join(leaks)} to another split of the table than test's (e.g. "
                         "`splits: {train: train, valid: valid, test: test}`)")
        return self


SPLITS = SplitMap().model_dump()   # the roles' default labels (a task's data export is shared when equal)
Splits = Annotated[SplitMap, Field(default_factory=SplitMap, description="the table split each role reads: "
                                   "train, valid, test (a role left out keeps its own name)")]


def _key_value(item: str) -> str:
    if "=" not in item:
        raise refuse(f"override {item!r} is not KEY=VALUE", "e.g. max_steps=100")
    return item


def _st_override(item: str) -> str:
    # a config is untrusted: no fairseq flag that imports code or loads a file (user-dir, restore-file),
    # no value that is not of its flag's type (a path, a flag, code)
    why = override_problem(item)
    if why:
        raise refuse(f"override {item!r}: {why}", "drop it, or give the value type its flag's entry in FLAGS "
                     "(downstream_st/fairseq_flags.py) names (a study config never passes others)")
    return item


def _distinct_seeds(seeds: list[int] | None) -> list[int] | None:
    if seeds is not None and (not seeds or len(set(seeds)) != len(seeds)):
        raise refuse(f"seeds must be a list of distinct integers, got {seeds!r}", "e.g. `seeds: [1, 2, 3]`")
    return seeds


def _layers(what: str, take=None):
    """A `layer`/`layers` key's validator: corpora.feature_request.Layers.parse, the grammar of every
    --layer/--layers option, and ``take`` (Layers.one, Layers.one_or_all) where the task reads one
    layer. The value is kept as written (a step's key hashes it)."""
    def check(value: str | int) -> str | int:
        try:
            layers = Layers.parse(value, what)
            if take is not None:
                take(layers, what)
        except UserError as e:
            raise refuse(e.message, e.fix or "") from None
        return value
    return check


def _language_pair(pair: str) -> str:
    if not (len(pair.split("-")) == 2 and all(pair.split("-"))):
        raise refuse(f"language pair {pair!r} is not SRC-TGT", "write pairs like fr-en")
    return pair


def _amount(what: str, hi: float | None = None):
    """An AfterValidator for hours and percentages: NaN compares false with every bound (`hours: .nan`
    would select the whole table) and a negative amount means nothing, so both are refused here."""
    def check(x):
        if x is not None:
            try:
                finite(x, what, lo=0, hi=hi)
            except UserError as e:
                raise refuse(e.message, e.fix or "") from None
        return x
    return AfterValidator(check)


Hours = Annotated[Num | None, _amount("hours")]
Pct = Annotated[Num | None, _amount("a percentage", hi=100)]
Seeds = Annotated[list[int] | None, AfterValidator(_distinct_seeds), Field(
    description="training seeds: train once per seed; the task's rows report mean ± sd over seeds and a CI "
                "pooled over seeds and speakers (default: one run, the study's seed)")]
ReferenceSeeds = Annotated[list[int] | None, AfterValidator(_distinct_seeds), Field(
    description="training seeds for the reference row (FBANK) only, in place of `seeds`: it has no pretraining run "
                "to replicate, so its spread between training seeds stands in for a condition's run-to-run spread "
                "when the pretrained rows are compared with it (default: `seeds`)")]
Hparams = Annotated[str | None, Field(
    description="a YAML file of plain KEY: VALUE hyper-parameter overrides (e.g. `lr: 1.0e-3`, `text_norm: "
                "{lowercase: false}`), applied over the recipe's own template (downstream_asr/hparams/); read as "
                "data, never as HyperPyYAML (default: none)")]
AsrOverrides = Annotated[list[Annotated[str, AfterValidator(_key_value)]],
                         Field(description="KEY=VALUE hyperparameter overrides")]
AsrCorpus = Annotated[str, Field(description="table corpus whose rows train/test the ASR")]
AsrSelection = Annotated[str | None, Field(
    description="train and validate on this entry of `selections` (a gender/hours subset of the corpus, e.g. "
                "the paper's balanced ASR set) instead of the corpus's train/valid rows; test: the corpus's test "
                "split (default: no selection)")]


class Resources(Section):
    """What one job asks for (SLURM; the local executor uses cpus as the torch thread count)."""
    cpus: int = Field(1, description="CPU cores (torch threads) per job")
    mem_gb: Num = Field(4, description="memory per job, GB (SLURM)")
    gpus: int = Field(0, description="GPUs per job (SLURM)")
    time_min: int = Field(60, description="time limit per job, minutes (SLURM)")


class TaskBase(Section):
    """The keys every task takes. A task type's model subclasses this and adds its own keys."""
    type: str | None = Field(None, description="task type (default: the task's name)")
    checkpoints: list[str] | None = Field(None, description="checkpoint names to run this task on (default: all)")
    after: list[str] = Field([], description="other tasks that must finish first (extra ordering)")
    device: str = Field("auto", description="where the task's models run: auto (the GPU its job asked for with "
                        "resources.gpus, else the CPU), cpu, cuda or cuda:N")
    precision: Literal["fp32", "fp16", "bf16"] = Field(
        "fp32", description="autocast precision of its forward passes and training (weights stay fp32); "
        "fp16 needs a GPU, fairseq (st) takes fp32 or fp16")
    resources: Resources = Field(default_factory=Resources, description="what each of its jobs asks for")

    @field_validator("device")
    @classmethod
    def _device_form(cls, device: str) -> str:
        d = device.lower()
        if not (d in ("auto", "cpu", "cuda") or (d.startswith("cuda:") and d[5:].isdigit())):
            raise refuse(f"device {device!r}", "use auto, cpu, cuda or cuda:N")
        return device

    @model_validator(mode="after")
    def _device_has_its_resources(self) -> "TaskBase":
        device, gpus = self.device.lower(), self.resources.gpus
        if device.startswith("cuda") and gpus < 1:
            raise refuse(f"runs on {device} but asks for no GPU (resources.gpus: {gpus})",
                         "set resources.gpus: 1, or device: cpu")
        on_cpu = device == "cpu" or (device == "auto" and gpus < 1)
        if self.precision == "fp16" and on_cpu:
            raise refuse("precision fp16 needs a GPU, and this task runs on the CPU",
                         "use precision: bf16 on a CPU, or give it resources.gpus: 1")
        return self


class AsrE2ETask(TaskBase):
    """asr-e2e: wav2vec 2.0 fine-tuned with CTC (SpeechBrain)."""
    corpus: AsrCorpus
    selection: AsrSelection = None
    splits: Splits
    hparams: Hparams = None
    overrides: AsrOverrides = []
    seeds: Seeds = None


class AsrFrozenTask(TaskBase):
    """asr-frozen: frozen SSL features -> TDNN CTC."""
    corpus: AsrCorpus
    selection: AsrSelection = None
    splits: Splits
    layer: Annotated[str | int, AfterValidator(_layers("layer", Layers.one_or_all))] = Field(
        "all", description="SSL layer feeding the ASR: a number, last, or all (weighted sum)")
    hparams: Hparams = None
    overrides: AsrOverrides = []
    seeds: Seeds = None
    reference_seeds: ReferenceSeeds = None


class StTask(TaskBase):
    """st and gender-st: frozen SSL features -> fairseq s2t."""
    corpus: str = Field(description="table corpus with source speech and tgt_text_<lang> columns")
    pairs: list[Annotated[str, AfterValidator(_language_pair)]] = Field(
        description="language pairs, e.g. [fr-en, fr-es]")
    splits: Splits
    eval_corpus: str | None = Field(
        None, description="table corpus whose valid and test splits validate and test the model (default: "
        "`corpus`, the pair's own). The paper validates and tests every mTEDx pair on fr-fr's sets (eval_corpus: "
        "mtedx-fr): those rows need tgt_text_<tgt>, which `corpus merge` (and a study's list of tables) lends each "
        "fr-fr segment from the pair's row of the same segment")
    layer: Annotated[str | int, AfterValidator(_layers("layer", Layers.one))] = Field(
        "last", description="SSL layer whose features feed the ST model")
    preset: str = Field("tiny", description="ST preset: xs (the study's), tiny, or a preset yaml")
    overrides: list[Annotated[str, AfterValidator(_key_value), AfterValidator(_st_override)]] = Field(
        [], description="fairseq-train overrides, key=value (decode.KEY=VALUE: fairseq-generate's): flags of "
        "downstream_st/fairseq_flags.py FLAGS only, each with a value of its type, never one that imports code or "
        "loads a file")
    mustshe: str | None = Field(None, description="MuST-SHE TSV to score the test hypotheses with (gender-st; "
                                "with seeds, the first seed's hypotheses)")
    seeds: Seeds = None
    reference_seeds: ReferenceSeeds = None

    @model_validator(mode="after")
    def _fairseq_precision(self) -> "StTask":
        if self.precision == "bf16":
            raise refuse("fairseq cannot train in bf16 off a TPU (its --bf16 implies --tpu)",
                         "use precision: fp16 on a GPU, or fp32")
        return self


class ProbesTask(TaskBase):
    """probes: gender probes on the hidden states of every layer."""
    corpus: str | None = Field(None, description="table corpus whose utterances are probed (default: all)")
    layers: Annotated[str, AfterValidator(_layers("layers"))] = Field(
        "all", description="layers to probe: all, or a comma list")
    probes: list[str] = Field(["attention", "mean"], description="probe types")
    control: bool = Field(True, description="also train shuffled-label control probes")
    random_init: bool = Field(True, description="probe a random-init twin of the first checkpoint too")


class Checkpoint(Section):
    """One checkpoint (a row of the tables): where its model comes from, and Table 3's facts."""
    baseline: Literal["fbank"] | None = Field(
        None, description="a reference row without pretraining: `fbank` (80-d log-mel filterbanks stacked to "
        "20 ms; the checkpoint must be named FBANK). Runs the frozen-feature tasks, not asr-e2e")
    shipped: str | None = Field(None, description="a checkpoint shipped with gendergap: tiny-female, tiny-f75, "
                                "tiny-balanced, tiny-f25, tiny-male, and the second runs tiny-female-2, tiny-f75-2, "
                                "tiny-balanced-2, tiny-male-2 (ssl_pretrain/shipped/PROVENANCE.md)")
    path: str | None = Field(None, description="a fairseq .pt, or a transformers folder of a supported family: "
                             "wav2vec2 (XLS-R, MMS), hubert, wavlm, data2vec-audio, wav2vec2-conformer, wav2vec2-bert")
    registered: str | None = Field(None, description="or: the name of an entry of the study's `registry` (`gendergap "
                                   "ckpt add`): its path, Table 3 facts and manifest come from there (facts given "
                                   "here win)")
    pretrain: str | None = Field(None, description="pretrain it in this study on this pretraining set "
                                 "(see pretraining.sets)")
    pretrained_on: str | None = Field(None, description="the pretraining set it was made from (Table 3's hours "
                                      "and gender shares)")
    manifest: str | None = Field(None, description="or: the `manifest build` dir it was pretrained on (a checkpoint "
                                 "pretrained outside the study): Table 1 describes that dir's train split, Table 3 "
                                 "takes hours and gender shares from its selection_report.json")
    preset: str = Field("tiny", description="pretraining preset when `pretrain` is set")
    updates: int = Field(1000, description="pretraining updates when `pretrain` is set")
    seed: int | None = Field(None, description="pretraining seed when `pretrain` is set (or under `study "
                             "--pretrain`): one pretraining run of its set; two checkpoints of one set with "
                             "different seeds are two runs, the replicates of a share's effect (default: the "
                             "study's seed)")
    continue_updates: int = Field(0, description="then continue the accepted checkpoint by this many updates (a warm "
                                  "start: fresh optimizer and schedule); the shipped checkpoints: 1000, then 5000")
    note: str | None = Field(None, description="free text for the registry")
    hours: Hours = Field(None, description="Table 3: pretraining hours of an imported checkpoint")
    male_pct: Pct = Field(None, description="Table 3: % male speech in its pretraining data")
    female_pct: Pct = Field(None, description="Table 3: % female speech in its pretraining data")
    unknown_pct: Pct = Field(None, description="Table 3: % speech of unknown gender in its pretraining data")

    @model_validator(mode="after")
    def _one_source(self) -> "Checkpoint":
        sources = [k for k in ("shipped", "path", "registered", "pretrain", "baseline") if getattr(self, k)]
        if len(sources) != 1:
            raise refuse(f"needs exactly one of shipped, path, registered, pretrain, baseline (has "
                         f"{', '.join(sources) or 'none'})",
                         "e.g. `{shipped: tiny-female}` or `{path: /models/w2v.pt}`")
        return self


class CorpusSource(Section):
    synth: Literal["tiny", "mini", "small"] | None = Field(
        None, description="generate the built-in synthetic corpus of this size")
    table: str | list[str] | None = Field(
        None, description="or: an utterance table from `gendergap corpus index`, or a list of them: the study's "
        "merge step joins them by `gendergap corpus merge`'s rules (see its --help) into <out>/corpus/utterances.tsv")
    gender_map: dict[str, Literal["F", "M", "U"]] = Field(
        {}, description="gender labels -> F, M or U, e.g. {Multi-Mix: U, Frau: F}: gender re-derived from each "
        "table row's gender_raw (case-insensitive) by the study's merge step (with `table`)")

    @field_validator("table")
    @classmethod
    def _tables(cls, table):
        if isinstance(table, list) and (not table or not all(t.strip() for t in table)):
            raise refuse("corpus.table is an empty list or names an empty path",
                         "name one table, or list them: `table: [a.tsv, b.tsv]`")
        return table


class Selection(Section):
    """A gender/hours subset of one corpus that tasks can train on (`manifest build`'s selection)."""
    corpus: str = Field(description="table corpus the selection draws from")
    gender: str = Field("balanced", description="F, M, balanced or p=SHARE (female share of the duration)")
    hours: Hours = Field(None, description="train hours overall, split by the share (default: all the "
                              "corpus allows at that share; balanced: the scarcer gender whole)")
    hours_per_gender: Hours = Field(None, description="or: train hours per gender (the paper: ~38)")
    valid_hours: Hours = Field(None, description="valid hours overall, split by the share: the corpus's valid "
                                    "rows first, then whole unused training speakers (the paper up-samples the "
                                    "male valid set so); default: the valid rows as they are, gender-filtered")
    splits: Splits

    @field_validator("gender")
    @classmethod
    def _gender_spec(cls, gender: str) -> str:
        from manifests.select import parse_gender_spec
        try:
            parse_gender_spec(gender)
        except UserError as e:
            raise refuse(e.message, e.fix or "use F, M, balanced or p=0.3") from None
        return gender


class Pretraining(Section):
    corpus: str | None = Field(None, description="table corpus the pretraining manifests draw from (default: all)")
    split: str = Field("pretrain", description="table split feeding the pretraining manifests")
    hours: Hours = Field(None, description="hours per manifest (default: all the table allows)")
    sets: dict[str, str] = Field({}, description="manifest name -> gender filter (F, M, balanced, p=SHARE)")


def _resamples(n: int) -> int:
    try:
        return check_resamples(n, "bootstrap")
    except UserError as e:
        raise refuse(e.message, e.fix or "") from None


def _margin(x: Num | None) -> Num | None:
    """A Δrel margin: a finite number of points above 0 (0 or NaN would make "no change" say nothing)."""
    if x is not None and (not math.isfinite(float(x)) or x <= 0):
        raise refuse(f"must be a finite number of Δrel points above 0, got {x!r}",
                     "give the largest Δrel difference you would call no change (e.g. 10), or leave it out")
    return x


class Report(Section):
    bootstrap: Annotated[int, AfterValidator(_resamples)] = Field(
        1000, description=f"speaker-level bootstrap resamples for the CIs (0: none; at most {MAX_RESAMPLES:,})")
    subset: str = Field("test", description="evaluation subset the report tabulates")
    equivalence_margin: Annotated[Num | None, AfterValidator(_margin)] = Field(
        None, description="Δrel points within which two conditions count as the same: the answer says \"no change\" "
        "only when an equivalence test (two one-sided tests, 90 % CI) puts a difference inside +-this; none: "
        "never said")


class Executor(Section):
    name: Literal["local", "slurm"] = Field("local", description="local (submitit's local executor) or slurm")
    parallel: int = Field(2, description="jobs running at once (local executor)")
    partition: str | None = Field(None, description="SLURM partition")
    account: str | None = Field(None, description="SLURM account")
    qos: str | None = Field(None, description="SLURM quality of service (sbatch --qos)")
    constraint: str | None = Field(None,
                                   description="SLURM node constraint, e.g. v100-32g or a100 (sbatch --constraint)")
    setup: list[str] = Field([], description="shell lines each job's sbatch script runs first, e.g. "
                             "[module load cuda/12.1, export HF_HOME=/shared/hf] (`pretrain launch` has none: its job "
                             "inherits the environment of the shell that submits it)")
    array_parallelism: int | None = Field(None, description="SLURM: most elements of one job array running at once "
                                          "(sbatch --array=0-N%P; default: submitit's 256)")

    @field_validator("array_parallelism")
    @classmethod
    def _at_least_one(cls, n: int | None) -> int | None:
        if n is not None and n < 1:
            raise refuse(f"must be 1 or more, got {n}",
                         "give the most array elements to run at once (1 or more), or leave it out")
        return n


class Study(Section):
    """A whole study. `tasks` holds raw mappings here: each is validated with its type's model."""
    name: str = Field("study", description="name of the study (shown in logs and the report)")
    seed: int = Field(0, description="seed for corpus generation, selections, training and bootstrap")
    corpus: CorpusSource = Field(default_factory=CorpusSource, description="the corpus: exactly one of synth, table")
    pretraining: Pretraining = Field(default_factory=Pretraining, description="the pretraining manifests")
    selections: dict[str, Selection] = Field({}, description="name -> a gender/hours subset of a corpus that a "
                                             "task trains on (`selection:`); the report's Table 2 shows each")
    registry: str | None = Field(None, description="a checkpoint registry (`gendergap ckpt add --registry FILE`) whose "
                                 "entries checkpoints name by `registered:`; relative to the config")
    checkpoints: dict[str, Checkpoint] = Field({}, description="name -> checkpoint")
    tasks: dict[str, dict[str, Any] | None] = Field({}, description="name -> task (its keys depend on its type)")
    report: Report = Field(default_factory=Report, description="the report's tables")
    executor: Executor = Field(default_factory=Executor, description="where the jobs run")


# --- the models described for people (`gendergap sweep --schema`) ---------------------------------

def describe(task_models: dict[str, type[TaskBase]]) -> str:
    """Every key of a study config, one line each: type, default, choices, description."""
    lines: list[str] = []
    for name, field in Study.model_fields.items():
        if name == "tasks":
            lines.append(f"tasks:        # name -> task; its type is its `type:`, else its name "
                         f"({'|'.join(task_models)})")
            _task_lines(task_models, lines)
        elif name == "checkpoints":
            lines.append("checkpoints:        # name -> checkpoint; exactly one of shipped, path, registered, "
                         "pretrain, baseline")
            model_lines(Checkpoint, 2, lines)
        else:
            field_lines(name, field, 0, lines)
    return "\n".join(lines)


def _task_lines(task_models: dict[str, type[TaskBase]], lines: list[str]) -> None:
    lines.append("  every task takes:")
    model_lines(TaskBase, 2, lines, {"type": tuple(task_models)})
    for type_, model in task_models.items():
        own = {n: f for n, f in model.model_fields.items() if _own_field(n, f)}
        lines.append(f"  <name> (type {type_}) also takes:" if own else f"  <name> (type {type_}): nothing more")
        for n, f in own.items():
            field_lines(n, f, 2, lines)


def _own_field(name: str, field: FieldInfo) -> bool:
    """A field a task type adds to (or changes from) the keys every task takes."""
    base = TaskBase.model_fields.get(name)
    return base is None or (field.annotation, field.get_default(call_default_factory=True), field.description) != \
        (base.annotation, base.get_default(call_default_factory=True), base.description)
