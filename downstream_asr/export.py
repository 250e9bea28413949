"""An `asr finetune` run as a SpeechBrain EncoderASR folder that loads with no gendergap installed.

    export_run("runs/asr/B-tiny", "release/B-tiny-asr")
    # then, anywhere with speechbrain + transformers:
    #   EncoderASR.from_hparams(source="release/B-tiny-asr").transcribe_file("x.wav")

The folder holds:

- ``hyperparams.yaml``: EncoderASR's recipe, rendered from YAML_TEMPLATE below with plain values only
  (numbers and the folder's absolute path), naming only speechbrain and torch classes;
- ``wav2vec2/``: the fine-tuned wav2vec 2.0 as a transformers folder (config.json, model.safetensors,
  preprocessor_config.json), which SpeechBrain's Hugging Face wrapper loads as in training;
- ``head.ckpt``: the head's state dict (dense + LeakyReLU + output layer), tensors only;
- ``label_encoder.txt``: the character vocabulary (SpeechBrain's CTCTextEncoder format, <blank> = 0);
- ``gendergap-export.json``: the plain values the yaml was rendered from;
- ``README.md``: the model card.

HyperPyYAML has no reference to the file's own folder, so the yaml records the folder's absolute path as
``source_dir``: a moved folder loads with ``overrides={"source_dir": NEW_PATH}``. gendergap itself
(`asr transcribe --model DIR`) never evaluates the folder's yaml: it checks that the file is exactly what
YAML_TEMPLATE gives for the recorded values, evaluates its OWN rendering (with the folder's current
path), and reads head.ckpt through the allowlist loader, so an export needs no --trust-checkpoint.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from corpora.base.atomic import swap_in_dir, write_json, write_text
from corpora.base.boundary import MAX_DIM, dim, finite, printable, rate, read_json, whole
from corpora.base.errors import UserError
from corpora.base.textfile import read_lines
from downstream_asr.runs import task_of

FORMAT = "gendergap-encoderasr/1"
MARKER = "gendergap-export.json"

YAML_TEMPLATE = """\
# SpeechBrain EncoderASR: wav2vec 2.0 fine-tuned with CTC by `gendergap asr finetune`, exported by
# `gendergap asr export`. Load with
#   from speechbrain.inference.ASR import EncoderASR
#   asr = EncoderASR.from_hparams(source="THIS_FOLDER")
# After moving the folder: EncoderASR.from_hparams(source=NEW, overrides={{"source_dir": NEW}}).
source_dir: {source_dir}
sample_rate: {sample_rate}
ssl_dim: {ssl_dim}
dnn_neurons: {dnn_neurons}
head_dropout: {head_dropout}
n_chars: {n_chars}

wav2vec2: !new:{lobe}
    source: !ref <source_dir>/wav2vec2
    save_path: !ref <source_dir>/wav2vec2
    freeze: True

head: !new:torch.nn.Sequential
    - !new:torch.nn.Linear [!ref <ssl_dim>, !ref <dnn_neurons>]
    - !new:torch.nn.LeakyReLU
    - !new:torch.nn.Dropout [!ref <head_dropout>]
    - !new:torch.nn.Linear [!ref <dnn_neurons>, !ref <n_chars>]

log_softmax: !new:speechbrain.nnet.activations.Softmax
    apply_log: True

encoder: !new:speechbrain.nnet.containers.LengthsCapableSequential
    wav2vec2: !ref <wav2vec2>
    head: !ref <head>
    log_softmax: !ref <log_softmax>

tokenizer: !new:speechbrain.dataio.encoder.CTCTextEncoder

decoding_function: !name:speechbrain.decoders.ctc_greedy_decode
    blank_id: 0

modules:
    encoder: !ref <encoder>

pretrainer: !new:speechbrain.utils.parameter_transfer.Pretrainer
    loadables:
        head: !ref <head>
        tokenizer: !ref <tokenizer>
    paths:
        head: !ref <source_dir>/head.ckpt
        tokenizer: !ref <source_dir>/label_encoder.txt
"""
# The wav2vec 2.0 lobe the folder's yaml names: SpeechBrain's own, so that it loads without gendergap.
# gendergap evaluates its own rendering with the batch-invariant subclass (same state dict), so that
# `asr transcribe` on an export gives the run's own hypotheses whatever the batching; SpeechBrain's
# class gives them one utterance at a time (transcribe_file), its padded batches differ.
SPEECHBRAIN_LOBE = "speechbrain.integrations.huggingface.wav2vec2.Wav2Vec2"
INVARIANT_LOBE = "downstream_asr.ctc_inference.Wav2Vec2Encoder"
MAX_LABEL_ENCODER_BYTES = 1 << 20   # a character vocabulary: a few hundred short lines
VALUE_TYPES = {"source_dir": str, "sample_rate": int, "ssl_dim": int, "dnn_neurons": int, "head_dropout": float,
               "n_chars": int}


def render_yaml(values: dict, lobe: str = SPEECHBRAIN_LOBE) -> str:
    """hyperparams.yaml for ``values`` (checked plain values: a string is written as a quoted scalar),
    naming ``lobe`` as the wav2vec 2.0 class."""
    if set(values) != set(VALUE_TYPES):
        raise ValueError(f"export values {sorted(values)} != {sorted(VALUE_TYPES)}")
    out = {}
    for k, t in VALUE_TYPES.items():
        v = values[k]
        if not isinstance(v, t) or isinstance(v, bool) or (t is float and v != v):
            raise ValueError(f"{k}={v!r} is not a {t.__name__}")
        out[k] = json.dumps(v)  # JSON scalars are YAML scalars; a path is quoted, escapes included
    return YAML_TEMPLATE.format(lobe=lobe, **out)


def export_run(run_dir: str | os.PathLike, out: str | os.PathLike, *, trust: bool = False,
               registry: str | None = None, commands: list[str] | None = None) -> dict:
    """Write the EncoderASR folder of ``run_dir``'s best checkpoint to ``out`` (built beside it, then
    renamed: never half a folder). ``out`` may be an earlier export (replaced), else must not exist."""
    import torch

    from downstream_asr.finetune import load_finetuned

    run_dir, out = Path(run_dir), Path(out).absolute()
    if out.exists() and not (out / MARKER).is_file() and (not out.is_dir() or any(out.iterdir())):
        raise UserError("the output exists and is not an earlier `asr export` folder", path=out,
                        fix="give a new --out folder (an earlier export is replaced)")
    brain, run, _, checkpoint = load_finetuned(run_dir, trust=trust)   # the best checkpoint, loaded safely
    if task_of(run) != "asr-e2e":
        raise UserError("this run is a variant of the recipe (ssl_layers=all: a weighted sum of every layer), and "
                        "an EncoderASR export holds the recipe's last-layer model only", path=run_dir / "run.json",
                        fix="transcribe it as a run directory (`gendergap asr transcribe --model RUN_DIR`)")
    head = brain.modules.head
    linear0, linear1 = head[0], head[3]
    rate = int(brain.modules.wav2vec2.feature_extractor.sampling_rate)
    values = {"source_dir": str(out), "sample_rate": rate, "ssl_dim": int(linear0.in_features),
              "dnn_neurons": int(linear0.out_features), "head_dropout": float(head[2].p),
              "n_chars": int(linear1.out_features)}
    out.parent.mkdir(parents=True, exist_ok=True)
    # a unique staging folder (mkdtemp), never one at a name someone could plant a link at
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        w2v = brain.modules.wav2vec2
        w2v.model.save_pretrained(stage / "wav2vec2", safe_serialization=True)
        w2v.feature_extractor.save_pretrained(stage / "wav2vec2")
        torch.save({k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}, stage / "head.ckpt")
        shutil.copyfile(run_dir / "vocab.txt", stage / "label_encoder.txt")
        write_text(stage / "hyperparams.yaml", render_yaml(values))
        meta = {"format": FORMAT, "values": values, "name": run.get("ckpt_name") or run["ssl"]["name"],
                "checkpoint": checkpoint, "text_norm": run["text_norm"], "text_norm_name": run["text_norm_name"],
                "ssl": run["ssl"]}
        write_json(stage / MARKER, meta)
        write_text(stage / "README.md", model_card(run_dir, run, meta, registry, commands))
        swap_in_dir(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return {"out": str(out), **meta}


def _fmt(x, ci=None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def model_card(run_dir: Path, run: dict, meta: dict, registry: str | None, commands: list[str] | None) -> str:
    """README.md: what the model is, what it was pretrained and fine-tuned on, its WER per gender."""
    from ssl_pretrain.registry import Registry

    ssl = run.get("ssl") or {}
    entry = {}
    try:
        entry = Registry(registry).get(meta["name"]) if meta.get("name") else {}
    except UserError:
        entry = {}
    pct = lambda k: "unknown" if entry.get(k) is None else f"{entry[k]:g} %"   # noqa: E731
    lines = [f"# {meta['name']}: wav2vec 2.0 + CTC (SpeechBrain EncoderASR)", "",
             "Exported by `gendergap asr export` from an `asr finetune` run: the wav2vec 2.0 encoder fine-tuned "
             "end to end with a 1024-d dense + LeakyReLU head and a character CTC output, greedy decoding, no "
             "language model.", "", "```python", "from speechbrain.inference.ASR import EncoderASR",
             'asr = EncoderASR.from_hparams(source="THIS_FOLDER")   # moved? add overrides={"source_dir": ...}',
             'print(asr.transcribe_file("utterance.wav"))   # 16 kHz mono', "```", "",
             "Transcribe one utterance per call to get the hypotheses the WER below was computed from: "
             "SpeechBrain's wav2vec 2.0 lobe normalises a padded batch over its padding (and this encoder's "
             "GroupNorm front-end sees it), so padded batches shift the output. `gendergap asr transcribe "
             "--model THIS_FOLDER` batches without that effect.", "",
             "## Pretraining", "",
             f"- checkpoint: {meta['name']} ({ssl.get('kind', '?')}, sha256 {str(ssl.get('sha256') or '?')[:16]})",
             f"- hours: {'unknown' if entry.get('hours') is None else format(entry['hours'], 'g')}; "
             f"male {pct('male_pct')}, female {pct('female_pct')}, unknown {pct('unknown_pct')} "
             f"({'from the checkpoint registry' if entry else 'not in the checkpoint registry'})", "",
             "## Fine-tuning", "",
             f"- training data: {run.get('train_csv', '?')}; validation: {run.get('valid_csv', '?')}",
             f"- transcripts normalised as {run.get('text_norm_name')} ({json.dumps(run.get('text_norm'))}); "
             f"hypotheses are in that form",
             f"- hyper-parameter overrides: {json.dumps(run.get('overrides') or {})}",
             f"- checkpoint exported: {meta['checkpoint'].get('checkpoint', '?')}", ""]
    scores = sorted(run_dir.glob("*.wer.json"))
    lines += ["## WER per gender (speaker-level bootstrap 95 % CIs)", ""]
    if scores:
        lines += ["| test set | all | F | M | Δrel (F vs M, %) | utts F/M | speakers F/M |",
                  "|---|---|---|---|---|---|---|"]
        for p in scores:
            r = read_json(p, "score file", shape=dict)
            ci = r.get("ci") or {}
            lines.append(f"| {p.name[:-len('.wer.json')]} | {_fmt(r.get('all'), ci.get('all'))} | "
                         f"{_fmt(r.get('F'), ci.get('F'))} | {_fmt(r.get('M'), ci.get('M'))} | "
                         f"{_fmt(r.get('delta_rel'), ci.get('delta_rel'))} | {r['n_utts']['F']}/{r['n_utts']['M']} | "
                         f"{r['n_speakers']['F']}/{r['n_speakers']['M']} |")
        lines += ["", f"Signature: `{printable(read_json(scores[0], 'score file', shape=dict).get('signature'))}`"]
    else:
        lines.append("Not scored yet: `gendergap asr decode --model RUN --test test.csv` writes test.wer.json.")
    lines += (["", "## How it was made", "", "```"] + (commands or ["gendergap asr finetune ... (see run.json)"])
              + ["```", ""])
    return "\n".join(lines)


def load_export(folder: Path, device: str = "cpu"):
    """An `asr export` folder as an EncoderASR, evaluating only gendergap's own rendering of the yaml
    (refused if the folder's file differs from it) and reading head.ckpt with the allowlist loader."""
    from hyperpyyaml import load_hyperpyyaml
    from speechbrain.inference.ASR import EncoderASR

    from ssl_pretrain.safe_load import check_model_folder, load_torch_file

    fix = "export the run again with `gendergap asr export RUN --out DIR`"
    meta = read_json(folder / MARKER, MARKER, shape=dict, max_bytes=1 << 20, fix=fix)
    try:
        values = dict(meta["values"])
        expected = render_yaml(values)
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"{MARKER} is not an export record ({str(e)[:100]})", path=folder / MARKER, fix=fix) from None
    # the record's numbers size the head SpeechBrain builds: bounded before anything is built
    # (ssl_dim 1e9 would allocate a Linear of 1e9 x dnn_neurons floats)
    where = {"path": folder / MARKER, "fix": fix}
    rate(values["sample_rate"], "export sample_rate", **where)
    dim(values["ssl_dim"], "export ssl_dim", **where)
    dim(values["dnn_neurons"], "export dnn_neurons", **where)
    whole(values["n_chars"], "export n_chars", lo=2, hi=MAX_DIM, **where)
    finite(values["head_dropout"], "export head_dropout", lo=0.0, hi=1.0, path=folder / MARKER)
    read_lines(folder / "label_encoder.txt", "label_encoder.txt", max_bytes=MAX_LABEL_ENCODER_BYTES, fix=fix)
    yaml_path = folder / "hyperparams.yaml"
    if not yaml_path.is_file() or yaml_path.read_text(encoding="utf-8", errors="replace") != expected:
        raise UserError("hyperparams.yaml is not the one `asr export` wrote (edited since?): gendergap does not "
                        "evaluate a folder's own HyperPyYAML", path=yaml_path,
                        fix=f"{fix}, or load it as a SpeechBrain folder with --trust-checkpoint")
    check_model_folder(folder, trust=False)
    hparams = load_hyperpyyaml(render_yaml({**values, "source_dir": str(folder.resolve())}, INVARIANT_LOBE))
    hparams["head"].load_state_dict(load_torch_file(folder / "head.ckpt", what="head checkpoint"))
    hparams["tokenizer"].load(str(folder / "label_encoder.txt"))
    hparams["savedir"] = str(folder)
    return EncoderASR(modules=hparams["modules"], hparams=hparams, run_opts={"device": device}), meta
