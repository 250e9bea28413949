"""Data steps: the built-in corpus or the merge of the user's tables, the pretraining manifests, a task's
SpeechBrain CSVs."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from corpora.base.errors import UserError
from corpora.base.provenance import config_hash, file_sha256
from gendergap.config_schema import SPLITS
from gendergap.steps.base import CheckContext, Graph, Problem, Step, problems


@dataclass(kw_only=True)
class CorpusStep(Step):
    """Generate the built-in synthetic corpus (corpora.synth) into ``out``."""
    KIND = "corpus"
    COST_MIN = 0.4
    out: str
    size: str
    seed: int

    def key_extra(self) -> dict:
        """The generator's version: a corpus generated anew by a changed generator (other voices,
        other sentence lists) makes every step reading it run again."""
        from corpora.synth.build import GENERATOR_VERSION
        return {"generator": GENERATOR_VERSION}

    def run(self) -> None:
        from corpora.synth import synthesize  # lazy: pulls in the espeak-ng engine

        print(synthesize(self.out, size=self.size, seed=self.seed), flush=True)


@dataclass(kw_only=True)
class MergeStep(Step):
    """The study's table from the config's list of tables (corpus.table) and its corpus.gender_map:
    corpora.merge's rules (`gendergap corpus merge`), written to ``out`` with ``out``.merge.json.
    ``contents`` (a hash of each input's bytes when planned) is in the key, so a re-indexed table
    makes the merge, and every step reading it, run again; a copied one does not."""
    KIND = "merge"
    tables: list[str]
    contents: list[str]
    gender_map: dict
    out: str

    def run(self) -> None:
        from corpora.merge import merge_files

        report = merge_files(tables=self.tables, out=self.out, gender_map=self.gender_map)
        print(f"{self.out}: {report['summary']}", flush=True)

    def check(self, ctx: CheckContext) -> list[Problem]:
        """Every input table is valid, and together they merge (the merge's own refusals). The
        merged table is then known: the steps reading it are checked against it now (their
        check sees it in memory), not left unchecked until the merge has run."""
        from corpora.checks import load_table, provide_table
        from corpora.utterances import UtteranceTable

        found = [f for t in self.tables for f in load_table(t)[1]]
        if found:
            return problems(found)
        try:   # merged in memory by the merge step's own rules (corpora.merge)
            merged = UtteranceTable.load(list(self.tables), gender_map=self.gender_map)
        except UserError as e:
            return [Problem(f"merging the tables: {e}", e.fix or "fix the tables", "corpus.table")]
        if ctx.is_pending(self.out):
            provide_table(self.out, merged)
            ctx.pending[:] = [o for o in ctx.pending if Path(o).resolve() != Path(self.out).resolve()]
        return []


def content_hash(path: str) -> str:
    """The first 16 hex digits of the file's sha256 ("missing" if there is none yet)."""
    try:
        return file_sha256(path)[:16]
    except OSError:
        return "missing"


@dataclass(kw_only=True)
class ManifestStep(Step):
    """A gender-filtered pretraining manifest (fairseq format) of one split of the table."""
    KIND = "manifest"
    table: str
    out: str
    gender: str
    split: str
    corpus: str | None
    hours: float | None
    seed: int

    def run(self) -> None:
        from manifests.build import build_manifest

        if (Path(self.out) / "selection_report.json").is_file():
            return
        # fairseq reads 16 kHz mono: other audio gets copies in the study's prepared-audio cache
        # (16 kHz mono files are listed where they are, so the built-in corpus copies nothing)
        cache = Path(self.out).parent.parent / "prepared-audio"
        build_manifest(table=self.table, out=self.out, gender=self.gender, fmt="fairseq", splits=(self.split,),
                       seed=self.seed, hours=self.hours,
                       export_options={"resample": 16000, "audio_cache": str(cache)},
                       selection_options={"corpora": [self.corpus]} if self.corpus else None)

    def check(self, ctx: CheckContext) -> list[Problem]:
        """The pretraining split has rows of the genders asked for, and their audio reads (any
        rate: run() prepares 16 kHz copies for fairseq)."""
        from corpora.checks import manifest_findings

        if ctx.is_pending(self.table):
            return []
        return problems(manifest_findings(self.table, self.corpus, self.split, self.gender, rate=None), "pretraining")


@dataclass(kw_only=True)
class AsrDataStep(Step):
    """SpeechBrain CSVs (train/valid/test) of one corpus, split by the table's split labels."""
    KIND = "asr-data"
    table: str
    corpus: str
    splits: dict
    out: str

    def run(self) -> None:
        from manifests.export_speechbrain import export_table_splits

        export_table_splits(self.table, self.corpus, self.splits, self.out)

    def check(self, ctx: CheckContext) -> list[Problem]:
        """The corpus and its splits have rows, the test speakers a gender, the audio readable."""
        from corpora.checks import rows_findings

        return [] if ctx.is_pending(self.table) else problems(rows_findings(self.table, self.corpus, self.splits))


def plan_corpus(g: Graph) -> None:
    """The utterance table (generated, or the user's) and the pretraining manifests in use."""
    d = g.d
    if d["corpus"]["synth"]:
        table = g.out / "corpus" / "utterances.tsv"
        g.add(CorpusStep(name="corpus", out=str(g.out / "corpus"), size=d["corpus"]["synth"], seed=g.seed,
                         outputs=[str(table)]))
        g.table_deps = ["corpus"]
    elif isinstance(d["corpus"]["table"], list) or d["corpus"]["gender_map"]:
        tables = [g.path(t) for t in ([d["corpus"]["table"]] if isinstance(d["corpus"]["table"], str)
                                      else d["corpus"]["table"])]
        table = g.out / "corpus" / "utterances.tsv"
        g.add(MergeStep(name="merge", tables=tables, contents=[content_hash(t) for t in tables],
                        gender_map={k.strip().lower(): v for k, v in d["corpus"]["gender_map"].items()},
                        out=str(table), outputs=[str(table)]))
        g.table_deps = ["merge"]
    else:
        table = Path(g.path(d["corpus"]["table"]))
    g.table = str(table)
    pre = d["pretraining"]
    used_sets = {c["pretrain"] or c["pretrained_on"] for c in g.cfg.checkpoints.values()} - {None}
    for name in [s for s in pre["sets"] if s in used_sets]:
        mdir = str(g.out / "manifests" / name)
        g.add(ManifestStep(name=f"manifest:{name}", table=g.table, out=mdir, gender=str(pre["sets"][name]),
                           split=pre["split"], corpus=pre["corpus"], hours=pre["hours"], seed=g.seed,
                           deps=list(g.table_deps), outputs=[mdir]))


def asr_data(g: Graph, t: dict) -> AsrDataStep:
    """The SpeechBrain CSVs of a task's rows; tasks on the same rows share one export."""
    tag = t["corpus"] + ("" if t["splits"] == SPLITS else "." + config_hash(t["splits"])[:8])
    name = f"asr-data:{tag}"
    for s in g.steps:
        if s.name == name:
            return s
    out = str(g.out / "data" / tag)
    return g.add(AsrDataStep(name=name, table=g.table, corpus=t["corpus"], splits=dict(t["splits"]), out=out,
                             deps=list(g.table_deps), outputs=[out]))
