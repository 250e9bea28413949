"""Any speech recogniser in a local model folder, as a ``Transcriber`` (downstream_asr.transcribe
runs one over an utterance table, batch by batch).

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

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch

from corpora.base.boundary import HF_LOCAL, finite, read_json
from corpora.base.errors import UserError
from downstream_asr import export
from downstream_asr.runs import task_of
from ssl_pretrain.checkpoints import check_recogniser_folder, load_checked
from ssl_pretrain.device import autocast
from ssl_pretrain.invariant import encode
from ssl_pretrain.safe_load import check_model_folder

KINDS = ("run", "export", "speechbrain", "hf-ctc", "hf-seq2seq")
FOLDER_FIX = ("give a local folder: a transformers model (config.json + weights + processor), a SpeechBrain "
              "model (hyperparams.yaml), an `asr export` folder or an `asr finetune` run directory; download "
              "hub models first (e.g. `hf download ID --local-dir DIR`)")


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
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CTC_MAPPING_NAMES,
        MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES,
    )
    cfg = read_json(path / "config.json", "config.json", shape=dict, max_bytes=16 << 20,
                    fix="copy the model folder again")
    model_type, archs = cfg.get("model_type"), cfg.get("architectures") or []
    if model_type in MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES and not any("CTC" in a for a in archs):
        return "hf-seq2seq"
    if model_type in MODEL_FOR_CTC_MAPPING_NAMES:
        return "hf-ctc"
    raise UserError(f"model_type {model_type!r} is neither a CTC nor a sequence-to-sequence speech model of "
                    "transformers", path=path / "config.json",
                    fix="give a model AutoModelForCTC or AutoModelForSpeechSeq2Seq loads (wav2vec2, hubert, "
                        "whisper, speech_to_text, ...)")


def check_hf_folder_before_loading(folder: Path, trust: bool = False) -> None:
    """What a transformers recogniser's folder must pass before anything of it is built, for
    ``HFModel`` and the sweep's dry run alike: no custom code, every pickle checked, a tokenizer
    vocabulary, bounded shapes within the model-size bound (the weights are checked as they load:
    ssl_pretrain.checkpoints.load_checked)."""
    check_model_folder(folder, trust=trust)   # custom code, symlinked folders, every pickle
    if not any((folder / v).is_file() for v in ("vocab.json", "tokenizer.json")):
        # else transformers builds a tokenizer from None and fails with a TypeError deep inside
        raise UserError("no tokenizer vocabulary (vocab.json or tokenizer.json) in the model folder", path=folder,
                        fix="save the processor beside the model (processor.save_pretrained(DIR))")
    check_recogniser_folder(folder)


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
        check_hf_folder_before_loading(folder, trust=trust)
        auto = AutoModelForCTC if kind == "hf-ctc" else AutoModelForSpeechSeq2Seq
        try:
            self.processor = AutoProcessor.from_pretrained(str(folder), **HF_LOCAL)
            fe = getattr(self.processor, "feature_extractor", self.processor)
            # checked before the model loads: a rate of 0 divides by zero, an absurd one allocates GBs
            cfg = next((folder / n for n in ("preprocessor_config.json", "processor_config.json")
                        if (folder / n).is_file()), folder)
            rate = finite(getattr(fe, "sampling_rate", 16000), "sampling_rate", lo=1000, hi=384000, path=cfg)
            model = load_checked(auto, folder, trust=trust)   # finite, and fitting its config
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, ImportError) as e:
            raise UserError(f"transformers cannot load this folder ({type(e).__name__}: "
                            f"{str(e).splitlines()[0][:160]})", path=folder,
                            fix="save the model with save_pretrained and its processor beside it") from None
        self.model = model.to(device).eval()
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
