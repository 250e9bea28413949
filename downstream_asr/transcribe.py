"""Any speech recogniser on an utterance table: load a model folder, transcribe batches by length.

The protocol is small: ``load_model(folder, ...)`` returns a ``Transcriber`` with ``sample_rate``,
``kind``, ``name``, ``describe()`` and ``transcribe(list of 1-D float waveforms) -> list[str]``.
Four kinds of folder are recognised, by their files (``detect``):

- ``run``: the --out directory of `asr finetune` (run.json): its model is rebuilt from the package's
  template and its checkpoints load safely (downstream_asr.finetune.build_brain), as `asr decode` does;
- ``export``: a folder `asr export` wrote (gendergap-export.json): its hyperparams.yaml is used only when
  it is byte for byte what downstream_asr.export writes for the recorded plain values, and its head
  loads through the allowlist loader, so no flag is needed;
- ``speechbrain``: any other SpeechBrain pretrained-interface folder (hyperparams.yaml). HyperPyYAML builds
  arbitrary objects while it loads, so it runs code: refused unless ``trust``;
- ``hf-ctc`` / ``hf-seq2seq``: a transformers folder (config.json) whose architecture AutoModelForCTC or
  AutoModelForSpeechSeq2Seq takes, with its processor.

Offline only: every loader reads local files (HF_HUB_OFFLINE, local_files_only); a path that is not a
local folder is one UserError, never a download. Every pickle file a folder holds (``*.bin``, ``*.pt``,
``*.ckpt``, ``*.pth``) is read with ssl_pretrain.safe_load first, so one that would run code is refused
in one line before any library unpickles it (unless ``trust``); safetensors need no check.

    model = load_model("models/whisper-tiny", device="cpu", language="fr")
    model.transcribe([wave_16k])        # ["bonjour à tous"]
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import ClassVar
from pathlib import Path

import torch

from corpora.base.boundary import HF_LOCAL, finite, parse_json, read_json, read_lines
from corpora.base.errors import UserError
from downstream_asr import export

log = logging.getLogger(__name__)

KINDS = ("run", "export", "speechbrain", "hf-ctc", "hf-seq2seq")
FOLDER_FIX = ("give a local folder: a transformers model (config.json + weights + processor), a SpeechBrain "
              "model (hyperparams.yaml), an `asr export` folder or an `asr finetune` run directory; download "
              "hub models first (e.g. `huggingface-cli download ID --local-dir DIR`)")


def detect(folder: str | os.PathLike) -> str:
    """Which kind of model folder this is (one of KINDS); anything else is a UserError."""
    path = Path(folder)
    if not path.exists():
        raise UserError("no such local model folder (gendergap never downloads a model)", path=path, fix=FOLDER_FIX)
    if not path.is_dir():
        raise UserError("the model is not a folder", path=path, fix=FOLDER_FIX)
    if (path / "run.json").is_file():
        return "run"
    if (path / export.MARKER).is_file():
        return "export"
    if (path / "hyperparams.yaml").is_file():
        return "speechbrain"
    if (path / "config.json").is_file():
        return _hf_kind(path)
    raise UserError("not a model folder gendergap knows (no run.json, hyperparams.yaml or config.json)", path=path,
                    fix=FOLDER_FIX)


def _hf_kind(path: Path) -> str:
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CTC_MAPPING_NAMES,
                                                        MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES)
    cfg = read_json(path / "config.json", "config.json", shape=dict, max_bytes=16 << 20, fix="copy the model folder again")
    model_type, archs = cfg.get("model_type"), cfg.get("architectures") or []
    if model_type in MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES and not any("CTC" in a for a in archs):
        return "hf-seq2seq"
    if model_type in MODEL_FOR_CTC_MAPPING_NAMES:
        return "hf-ctc"
    raise UserError(f"model_type {model_type!r} is neither a CTC nor a sequence-to-sequence speech model of "
                    "transformers", path=path / "config.json",
                    fix="give a model AutoModelForCTC or AutoModelForSpeechSeq2Seq loads (wav2vec2, hubert, "
                        "whisper, speech_to_text, ...)")


@dataclass
class Transcriber:
    """What every adapter offers. ``transcribe`` takes 1-D float32 waveforms at ``sample_rate``."""
    kind: str
    name: str
    sample_rate: int
    device: str
    precision: str
    info: dict = field(default_factory=dict)
    # how batches reach the model; every adapter's hypotheses are independent of the batch (a
    # property test per kind: one utterance per batch = default batching = shuffled order)
    batching: ClassVar[str] = "batched by length"

    def transcribe(self, wavs: list) -> list[str]:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> dict:
        return {"kind": self.kind, "name": self.name, "sample_rate": self.sample_rate, "device": self.device,
                "precision": self.precision, **self.info}

    def _autocast(self):
        from ssl_pretrain.device import autocast
        return autocast(self.device, self.precision)


def pad(wavs: list, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Zero-padded batch [B, T], relative lengths (SpeechBrain's convention) and absolute lengths."""
    lens = torch.tensor([len(w) for w in wavs])
    batch = torch.zeros(len(wavs), int(lens.max()))
    for i, w in enumerate(wavs):
        batch[i, : len(w)] = torch.as_tensor(w, dtype=torch.float32)
    return batch.to(device), (lens.float() / lens.max()).to(device), lens


def clean(text: str) -> str:
    """One line of text: a hypothesis file is id<TAB>text, so tabs and newlines become spaces."""
    return " ".join(str(text).split())


# --------------------------------------------------------------------------- our own run directories

class RunDir(Transcriber):
    """An `asr finetune` run directory: the Brain `asr decode` builds, its best checkpoint, greedy CTC."""

    def __init__(self, folder: Path, device: str, precision: str, trust: bool):
        from downstream_asr.finetune import load_finetuned
        from downstream_asr.runs import task_of
        self.brain, run, self.vocab, ckpt = load_finetuned(folder, device, precision, trust)
        rate = int(self.brain.modules.wav2vec2.feature_extractor.sampling_rate)
        super().__init__("run", run.get("ckpt_name") or run["ssl"]["name"], rate, device, precision,
                         {"checkpoint": ckpt, "text_norm": run["text_norm"], "text_norm_name": run["text_norm_name"],
                          "ssl": run["ssl"], "results_task": task_of(run)})

    batching = "batched by length (batch-invariant: downstream_asr.ctc_inference)"

    @torch.no_grad()
    def transcribe(self, wavs: list) -> list[str]:
        from downstream_asr.ctc_inference import ctc_log_probs, greedy_texts
        x, rel, _ = pad(wavs, self.brain.device)
        with self.brain.evaluation_ctx:
            logp, frames = ctc_log_probs(self.brain.modules, self.brain.hparams.log_softmax, x, rel)
        return greedy_texts(logp, frames, self.vocab)


# --------------------------------------------------------------------------- SpeechBrain interfaces

class ExportModel(Transcriber):
    """An `asr export` folder: its modules built from gendergap's own rendering of the yaml (with the
    batch-invariant lobe), decoded by the same forward as its run directory."""

    batching = "batched by length (batch-invariant: downstream_asr.ctc_inference)"

    def __init__(self, folder: Path, device: str, precision: str):
        asr, meta = export.load_export(folder, device)
        asr.mods.eval()
        self.modules = torch.nn.ModuleDict({"wav2vec2": asr.hparams.wav2vec2, "head": asr.hparams.head}).to(device)
        self.modules.eval()
        self.log_softmax, self.vocab = asr.hparams.log_softmax, asr.tokenizer
        rate = int(getattr(asr.hparams, "sample_rate", 16000) or 16000)
        super().__init__("export", meta.get("name") or folder.name, rate, device, precision,
                         {"interface": type(asr).__name__})

    @torch.no_grad()
    def transcribe(self, wavs: list) -> list[str]:
        from downstream_asr.ctc_inference import ctc_log_probs, greedy_texts
        x, rel, _ = pad(wavs, self.device)
        with self._autocast():
            logp, frames = ctc_log_probs(self.modules, self.log_softmax, x, rel)
        return greedy_texts(logp, frames, self.vocab)


class SpeechBrainModel(Transcriber):
    """A SpeechBrain pretrained interface (EncoderASR, or EncoderDecoderASR when the folder has a decoder).

    Run one utterance per call: what the folder's modules do with padding is unknown (SpeechBrain's own
    wav2vec 2.0 lobe normalises the padded batch, for one), and a score must not depend on the batch."""

    batching = "one utterance per call (a SpeechBrain interface's padding is not known to be neutral)"

    def __init__(self, folder: Path, device: str, precision: str, trust: bool):
        if not trust:
            raise UserError("a SpeechBrain hyperparams.yaml is HyperPyYAML: loading it builds whatever objects "
                            "it names, so it can run code", path=folder / "hyperparams.yaml",
                            fix="if you trust whoever made this folder, pass --trust-checkpoint")
        asr = _speechbrain_interface(folder, device)
        asr.mods.eval()
        self.asr = asr
        rate = int(getattr(asr.hparams, "sample_rate", 16000) or 16000)
        super().__init__("speechbrain", folder.name, rate, device, precision, {"interface": type(asr).__name__})

    def transcribe(self, wavs: list) -> list[str]:
        return [self._one(w) for w in wavs]

    @torch.no_grad()
    def _one(self, wav) -> str:
        x, rel, _ = pad([wav], self.device)
        with self._autocast():
            words, tokens = self.asr.transcribe_batch(x, rel)
        tok = getattr(self.asr, "tokenizer", None)
        from speechbrain.dataio.encoder import CTCTextEncoder
        if isinstance(tok, CTCTextEncoder):
            # EncoderASR joins every label, <unk> included; a hypothesis keeps the characters only
            skip = {getattr(tok, "unk_label", None), getattr(tok, "blank_label", None)}
            words = ["".join(tok.ind2lab[int(i)] for i in seq if tok.ind2lab[int(i)] not in skip) for seq in tokens]
        return clean(words[0])


def _speechbrain_interface(folder: Path, device: str):
    """EncoderDecoderASR when the yaml's modules include a decoder, else EncoderASR; files used in place."""
    from speechbrain.inference.ASR import EncoderASR, EncoderDecoderASR
    from speechbrain.utils.fetching import LocalStrategy

    from corpora.base.strict_yaml import read_hyperpyyaml_keys
    keys = read_hyperpyyaml_keys(folder / "hyperparams.yaml")
    cls = EncoderDecoderASR if "decoder" in keys or "test_search" in keys else EncoderASR
    return cls.from_hparams(source=str(folder), savedir=str(folder), local_strategy=LocalStrategy.NO_LINK,
                            run_opts={"device": device})


# --------------------------------------------------------------------------- transformers

class HFModel(Transcriber):
    """A transformers CTC or speech sequence-to-sequence model with its processor."""

    def __init__(self, folder: Path, kind: str, device: str, precision: str, trust: bool, language: str | None,
                 task: str, max_new_tokens: int | None):
        from transformers import AutoModelForCTC, AutoModelForSpeechSeq2Seq, AutoProcessor
        from ssl_pretrain.safe_load import check_model_folder
        check_model_folder(folder, trust=trust)   # custom code, symlinked folders, every pickle
        if not any((folder / v).is_file() for v in ("vocab.json", "tokenizer.json")):
            # else transformers builds a tokenizer from None and fails with a TypeError deep inside
            raise UserError("no tokenizer vocabulary (vocab.json or tokenizer.json) in the model folder", path=folder,
                            fix="save the processor beside the model (processor.save_pretrained(DIR))")
        auto = AutoModelForCTC if kind == "hf-ctc" else AutoModelForSpeechSeq2Seq
        try:
            self.processor = AutoProcessor.from_pretrained(str(folder), **HF_LOCAL)
            fe = getattr(self.processor, "feature_extractor", self.processor)
            # checked before the model loads: a rate of 0 divides by zero, an absurd one allocates GBs
            cfg = next((folder / n for n in ("preprocessor_config.json", "processor_config.json")
                        if (folder / n).is_file()), folder)
            rate = finite(getattr(fe, "sampling_rate", 16000), "sampling_rate", lo=1000, hi=384000, path=cfg)
            self.model = auto.from_pretrained(str(folder), **HF_LOCAL).to(device).eval()
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise UserError(f"transformers cannot load this folder ({type(e).__name__}: "
                            f"{str(e).splitlines()[0][:160]})", path=folder,
                            fix="save the model with save_pretrained and its processor beside it") from None
        self.language, self.task, self.max_new_tokens = language, task, max_new_tokens
        self.model_type = self.model.config.model_type
        super().__init__(kind, folder.name, int(rate), device, precision,
                         {"model_type": self.model_type, "language": language, "task": task})

    @property
    def one_at_a_time(self) -> bool:
        """Whether utterances go to the model one per call: for every architecture whose padding is not
        known to be neutral (not a wav2vec 2.0-layout CTC model, not Whisper)."""
        return not ((self.kind == "hf-ctc" and self._encoder() is not None) or self.model_type == "whisper")

    @property
    def batching(self) -> str:
        if self.one_at_a_time:
            return "one utterance per call (this architecture's padding is not known to be neutral)"
        if self.kind == "hf-ctc":
            return "batched by length (batch-invariant: ssl_pretrain.invariant)"
        return "batched (every input padded to 30 s by Whisper's processor: the batch changes nothing)"

    def _encoder(self):
        """The wav2vec 2.0-layout encoder of a CTC model (wav2vec2, hubert, wavlm, data2vec-audio, ...),
        which ssl_pretrain.invariant runs batch-invariantly; None for any other architecture."""
        base = getattr(self.model, self.model.base_model_prefix, None)
        needed = ("feature_extractor", "feature_projection", "encoder", "_get_feat_extract_output_lengths")
        ok = base is not None and all(hasattr(base, a) for a in needed) and hasattr(self.model, "lm_head")
        return base if ok else None

    def _features(self, wav) -> dict:
        """One utterance through the processor: its normalisation sees this utterance only."""
        fe = getattr(self.processor, "feature_extractor", self.processor)
        inputs = fe([torch.as_tensor(wav, dtype=torch.float32).numpy()], sampling_rate=self.sample_rate,
                    return_tensors="pt")
        return {k: v.to(self.device) for k, v in inputs.items()}

    def transcribe(self, wavs: list) -> list[str]:
        if self.one_at_a_time:
            return [self._generate_or_ctc([w])[0] for w in wavs]
        return self._generate_or_ctc(wavs)

    @torch.no_grad()
    def _generate_or_ctc(self, wavs: list) -> list[str]:
        tok = getattr(self.processor, "tokenizer", self.processor)
        with self._autocast():
            if self.kind == "hf-ctc":
                ids, frames = self._ctc_ids(wavs)
                # frames past an utterance's own length come from padding: not part of its hypothesis
                return [clean(tok.decode(row[: int(n)])) for row, n in zip(ids, frames)]
            gen = {}
            if self.max_new_tokens:
                gen["max_new_tokens"] = self.max_new_tokens
            if self.model_type == "whisper":
                gen.update(language=self.language, task=self.task)
                fe = getattr(self.processor, "feature_extractor", self.processor)   # pads to 30 s itself
                inputs = fe([torch.as_tensor(w, dtype=torch.float32).numpy() for w in wavs],
                            sampling_rate=self.sample_rate, return_tensors="pt", return_attention_mask=True)
                inputs = {k: v.to(self.device) for k, v in inputs.items()}
            else:
                inputs = self._features(wavs[0])   # one utterance per call (batching)
            out = self.model.generate(**inputs, **gen)
        return [clean(t) for t in tok.batch_decode(out, skip_special_tokens=True)]

    def _ctc_ids(self, wavs: list):
        """Greedy CTC label ids and each utterance's own frame count."""
        rows = [self._features(w) for w in wavs]
        base = self._encoder()
        if base is None or "input_values" not in rows[0]:   # called one utterance at a time (batching)
            logits = self.model(**rows[0]).logits
            return logits.argmax(-1), [logits.shape[1]]
        from ssl_pretrain.invariant import encode
        xs = [r["input_values"][0] for r in rows]
        lengths = torch.tensor([len(x) for x in xs], device=self.device)
        hidden, frames = encode(base, torch.nn.utils.rnn.pad_sequence(xs, batch_first=True), lengths,
                                normalize=False)   # the processor has normalised each utterance
        logits = self.model.lm_head(self.model.dropout(hidden))
        return logits.argmax(-1), frames.tolist()


def load_model(folder: str | os.PathLike, *, device: str = "cpu", precision: str = "fp32", trust: bool = False,
               language: str | None = None, task: str = "transcribe", max_new_tokens: int | None = None) -> Transcriber:
    """The Transcriber of a local model folder (see the module doc for the kinds and the trust rules)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")    # never a download, whatever a config names
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    folder = Path(folder)
    kind = detect(folder)
    if task not in ("transcribe", "translate"):
        raise UserError(f"--task {task!r}", fix="use --task transcribe or --task translate")
    if kind != "hf-seq2seq" and (language or task != "transcribe"):
        raise UserError(f"--language/--task are for sequence-to-sequence models, and this is a {kind} model",
                        path=folder, fix="leave --language and --task out")
    if kind == "run":
        return RunDir(folder, device, precision, trust)
    if kind == "export":
        return ExportModel(folder, device, precision)
    if kind == "speechbrain":
        return SpeechBrainModel(folder, device, precision, trust)
    return HFModel(folder, kind, device, precision, trust, language, task, max_new_tokens)


# --------------------------------------------------------------------------- a table, batch by batch

def select_rows(table, split: str | None, corpus: str | None):
    """The utterance table's rows to transcribe (``split``, ``corpus``), in table order, with absolute audio."""
    from corpora.utterances import UtteranceTable
    rows = UtteranceTable.load(table)
    for col, value in (("split", split), ("corpus", corpus)):
        if value:
            rows = rows.select(**{col: value}).nonempty(f"{col} {value!r}", f"check --{col} (the table's {col} column)")
    return rows.audio_rows()


def _read_partial(path: Path, header: dict) -> dict[str, str]:
    """Hypotheses of the batches a killed run finished (one JSON line per batch, fsync'ed). A last line
    cut by the kill is ignored; a file written for another model, table or option is started over."""
    done: dict[str, str] = {}
    if not os.path.lexists(path):
        return done
    try:
        lines = read_lines(path, "partial transcripts", max_bytes=1 << 30)
        if not lines or parse_json(lines[0], "partial transcripts", path=path, line=1) != header:
            log.warning("%s was written for another model or table: starting over", path)
            return done
    except UserError:
        return done
    for n, line in enumerate(lines[1:], 2):
        try:
            rec = parse_json(line, "partial transcripts", path=path, line=n, shape=dict)
        except UserError:
            break   # the batch the kill interrupted: transcribed again
        ids, texts = rec.get("ids"), rec.get("texts")
        if not (isinstance(ids, list) and isinstance(texts, list) and len(ids) == len(texts)
                and all(isinstance(x, str) for x in ids + texts)):
            break
        done.update(zip(ids, texts))
    return done


def transcribe_table(model: Transcriber, rows, out_dir: str | os.PathLike, *, name: str = "test",
                     batch_seconds: float = 60.0, max_batch_size: int = 32, progress: bool = True,
                     text_norm: dict | None = None, normalise: bool = True, source: dict | None = None,
                     references: str = "text") -> dict:
    """Transcribe ``rows`` (select_rows) in batches of similar length, resumably, then write
    ``NAME.hyp.tsv`` / ``NAME.ref.tsv`` / ``NAME.json`` (downstream_asr.decode.write_transcripts) and the
    model's own output as ``NAME.raw.tsv``. Hypotheses and references are normalised the way `asr decode`
    writes them (``text_norm``: a run's own, else downstream_asr.text's default), so WER is scored with
    norm:none; ``normalise=False`` (translation) keeps both as they are. The references are the rows'
    ``references`` column (a translation's: ``tgt_text_<lang>``). Each finished batch is appended
    to ``NAME.partial.jsonl`` and fsync'ed: a killed run, started again, transcribes only the rest."""
    import time

    from tqdm import tqdm

    from corpora.base.atomic import write_text
    from downstream_asr.decode import write_transcripts
    from downstream_asr.text import TextNorm, normalise_text
    from ssl_pretrain.features import length_buckets, read_segment

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ids = rows["id"].astype(str).tolist()
    header = {"model": source or model.describe(), "ids": len(ids), "first": ids[0], "last": ids[-1]}
    header = json.loads(json.dumps(header, default=str))
    partial = out_dir / f"{name}.partial.jsonl"
    done = _read_partial(partial, header)
    if not done:
        write_text(partial, json.dumps(header) + "\n")
    batches = length_buckets(rows["duration"].astype(float).tolist(), batch_seconds, max_batch_size)
    todo = [b for b in batches if not all(ids[i] in done for i in b)]
    if done:
        log.info("resuming: %d of %d utterances already transcribed, %d batch(es) to go", len(done), len(ids), len(todo))
    t0, ran = time.monotonic(), 0
    with open(partial, "a", encoding="utf-8") as f, \
            tqdm(total=len(ids), initial=len(ids) - sum(len(b) for b in todo), unit="utt", disable=not progress,
                 desc=f"transcribing {name}") as bar:
        for b in todo:
            wavs = [read_segment(rows["audio"][i], float(rows["offset"][i]), float(rows["duration"][i]),
                                 model.sample_rate) for i in b]
            texts = model.transcribe(wavs)
            f.write(json.dumps({"ids": [ids[i] for i in b], "texts": texts}, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())   # a kill after this line keeps the batch
            done.update((ids[i], t) for i, t in zip(b, texts))
            ran += 1
            log.info("batch %d/%d done (%d utterances)", ran, len(todo), len(b))
            bar.update(len(b))
    norm = TextNorm.from_dict(text_norm)
    fix = (lambda t: normalise_text(t, norm)) if normalise else clean
    write_text(out_dir / f"{name}.raw.tsv", "".join(f"{i}\t{clean(done[i])}\n" for i in ids))
    info = {"model": model.describe(), "kind": model.kind, "text_norm": norm.as_dict() if normalise else None,
            "text_norm_name": norm.name if normalise else "none", "batches_run": ran, "batches": len(batches),
            "batch_seconds": batch_seconds, "transcribe_seconds": round(time.monotonic() - t0, 2),
            "batching": _batching(model, batch_seconds, max_batch_size),
            "runtime": {"device": model.device, "precision": model.precision}}
    meta = write_transcripts(ids, {i: fix(done[i]) for i in ids}, [fix(t) for t in rows[references].astype(str)],
                             out_dir, name, info)
    partial.unlink()
    return meta


def _batching(model: Transcriber, batch_seconds: float, max_batch_size: int) -> dict:
    """How the utterances were batched, for the result record (the hypotheses do not depend on it)."""
    return {"batch_seconds": batch_seconds, "max_batch_size": max_batch_size, "order": "by length",
            "model": model.batching}


# --------------------------------------------------------------------------- `asr transcribe`, in steps

def check_options(*, task: str = "transcribe", tgt: str | None = None, mustshe: str | None = None,
                  batch_seconds: float = 60.0, max_batch_size: int = 32, per_corpus: bool = False) -> None:
    """The option values `asr transcribe` refuses before it reads a table or a model."""
    if batch_seconds <= 0 or max_batch_size < 1:
        raise UserError("--batch-seconds must be > 0 and --max-batch-size >= 1", fix="e.g. --batch-seconds 60")
    if per_corpus and task == "translate":
        raise UserError("--per-corpus scores WER per corpus, and --task is translate",
                        fix="translate one corpus at a time with --corpus")
    if task == "translate" and not tgt:
        raise UserError("--task translate scores BLEU against the table's translations, and no --tgt says "
                        "which", fix="add --tgt LANG: the table's tgt_text_LANG column (e.g. --tgt en)")
    if task != "translate" and (tgt or mustshe):
        raise UserError("--tgt and --mustshe score translations, and --task is transcribe",
                        fix="add --task translate (a sequence-to-sequence model), or leave them out")


def split_by_corpus(meta: dict, rows) -> dict[str, dict]:
    """The transcript files of a table holding several corpora, one pair per corpus: NAME@CORPUS.hyp.tsv
    and NAME@CORPUS.ref.tsv beside NAME's (lines in the same order). {corpus: its files' record}."""
    from corpora.base.atomic import write_text

    hyps, refs = Path(meta["hyps"]), Path(meta["refs"])
    hyp_lines = hyps.read_text(encoding="utf-8").splitlines(keepends=True)
    ref_lines = refs.read_text(encoding="utf-8").splitlines(keepends=True)
    corpus_of = dict(zip(rows["id"].astype(str), rows["corpus"].astype(str)))
    out = {}
    for corpus in dict.fromkeys(rows["corpus"].astype(str)):
        keep = [i for i, line in enumerate(hyp_lines) if corpus_of[line.split("\t", 1)[0]] == corpus]
        files = {}
        for key, path, lines, suffix in (("hyps", hyps, hyp_lines, ".hyp.tsv"), ("refs", refs, ref_lines, ".ref.tsv")):
            files[key] = str(path.with_name(path.name[: -len(suffix)] + f"@{corpus}{suffix}"))
            write_text(files[key], "".join(lines[i] for i in keep))
        out[corpus] = {**meta, **files, "n_utts": len(keep), "corpus": corpus}
    return out


def transcribe_rows(rows, *, model: str, out: str, name: str, language: str | None = None,
                    task: str = "transcribe", max_new_tokens: int | None = None, batch_seconds: float = 60.0,
                    max_batch_size: int = 32, progress: bool = True, device: str = "auto", precision: str = "fp32",
                    trust: bool = False, references: str = "text") -> tuple[dict, Transcriber]:
    """Load the model folder ``model`` and transcribe (or, ``task`` translate, translate) ``rows``
    (select_rows) into OUT/NAME.* (transcribe_table), the references from the rows' ``references``
    column. Returns the transcript files' record and the model."""
    from ssl_pretrain.device import device_and_precision

    device, precision = device_and_precision(device, precision)
    m = load_model(model, device=device, precision=precision, trust=trust, language=language, task=task,
                   max_new_tokens=max_new_tokens)
    source = {"folder": str(Path(model).resolve()), "kind": m.kind, "language": language, "task": task,
              "max_new_tokens": max_new_tokens, "precision": precision}
    meta = transcribe_table(m, rows, out, name=name, batch_seconds=batch_seconds, max_batch_size=max_batch_size,
                            progress=progress, text_norm=m.info.get("text_norm"), normalise=task == "transcribe",
                            source=source, references=references)
    return meta, m


def result_task(model: Transcriber, task: str = "transcribe") -> str:
    """The results DB's task of a transcribed table: a run directory's rows are `asr finetune`'s own
    (asr-e2e, or its variant's); any other model's are asr-released, or st-released for translations."""
    if task == "translate":
        return "st-released"
    return model.info.get("results_task", "asr-e2e") if model.kind == "run" else "asr-released"


def result_config(m: Transcriber, meta: dict, *, model: str, batch_seconds: float, table, split: str | None,
                  corpus: str | None) -> dict:
    """What a result row of a transcribed table keeps: the model, how it ran, which rows."""
    from corpora.table import table_source
    return {"recipe": f"transcribe:{m.kind}", "model": str(Path(model).resolve()), "released": m.describe(),
            "runtime": meta["runtime"], "batch_seconds": batch_seconds, "batching": meta.get("batching"),
            "table": table_source(table), "split": split,
            "corpus": corpus}


def source_language(rows, language: str | None) -> str:
    """The speech's language for a translation's language pair: --language, else the rows' one ``lang``."""
    if language:
        return language
    langs = sorted(set(rows["lang"].astype(str))) if "lang" in rows.columns else []
    if len(langs) != 1 or not langs[0]:
        raise UserError(f"the rows speak {', '.join(langs) or 'no lang'}, so the language pair is unknown",
                        fix="give --language (the speech's language) or select one language's rows (--corpus)")
    return langs[0]
