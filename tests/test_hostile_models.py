"""Hostile model folders (issue 37): a transformers folder is data. Custom code (``auto_map``) is never
run and no prompt ever reads stdin; a pickle reached through a weights index under any suffix, or
behind a symlinked directory, is checked first; a bad sampling rate or vocabulary is one line. Each case
is a real tiny Wav2Vec2ForCTC folder, tampered, run through the real CLI in-process as a fresh process would
show it (tests/cli_helpers.run_fresh), with an empty stdin and with one answering "y"; each custom-code class
also runs once in a real subprocess whose stdin answers "y", so a prompt reading fd 0 directly is caught too."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_helpers import run_fresh  # noqa: E402

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
CUSTOM = "import pathlib\npathlib.Path({marker!r}).touch()\n"   # what a folder's own .py would do


class Payload:
    """Unpickling this runs ``touch MARKER``: what a crafted weights file does."""
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A tiny Wav2Vec2ForCTC + processor (character vocabulary) and a one-utterance table."""
    import torch
    from transformers import (
        Wav2Vec2Config,
        Wav2Vec2CTCTokenizer,
        Wav2Vec2FeatureExtractor,
        Wav2Vec2ForCTC,
        Wav2Vec2Processor,
    )

    from corpora.table import new_table, write_table
    root = tmp_path_factory.mktemp("hostile")
    torch.manual_seed(0)
    vocab = {"<pad>": 0, "<unk>": 1, "|": 2, "a": 3, "b": 4}
    cfg = Wav2Vec2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         conv_dim=(16, 16), conv_kernel=(10, 3), conv_stride=(5, 4), num_conv_pos_embeddings=16,
                         num_conv_pos_embedding_groups=4, vocab_size=len(vocab), pad_token_id=0)
    Wav2Vec2ForCTC(cfg).save_pretrained(root / "model")
    (root / "vocab.json").write_text(json.dumps(vocab))
    tok = Wav2Vec2CTCTokenizer(str(root / "vocab.json"), unk_token="<unk>", pad_token="<pad>")
    Wav2Vec2Processor(feature_extractor=Wav2Vec2FeatureExtractor(sampling_rate=16000), tokenizer=tok) \
        .save_pretrained(root / "model")
    sf.write(root / "u.wav", np.zeros(8000, dtype=np.float32), 16000)
    write_table(new_table([{"id": "u", "audio": str(root / "u.wav"), "duration": 0.5, "sample_rate": 16000,
                            "speaker": "f1", "gender": "F", "corpus": "t", "lang": "fr", "split": "test",
                            "text": "a"}]), root / "table.tsv")
    return root


def _json(folder: Path, name: str, **changes) -> None:
    p = folder / name
    p.write_text(json.dumps({**json.loads(p.read_text()), **changes}))


def auto_map_config(d, marker):
    (d / "custom.py").write_text(CUSTOM.format(marker=str(marker)))
    _json(d, "config.json", auto_map={"AutoConfig": "custom.C", "AutoModelForCTC": "custom.M"})


def auto_map_processor(d, marker):
    (d / "custom.py").write_text(CUSTOM.format(marker=str(marker)))
    _json(d, "processor_config.json", auto_map={"AutoProcessor": "custom.P"})


def auto_map_feature_extractor(d, marker):
    # nested: processor_config.json holds the feature extractor's own config
    (d / "custom.py").write_text(CUSTOM.format(marker=str(marker)))
    cfg = json.loads((d / "processor_config.json").read_text())
    cfg["feature_extractor"]["auto_map"] = {"AutoFeatureExtractor": "custom.F"}
    (d / "processor_config.json").write_text(json.dumps(cfg))


def _pickle_shards(d, marker, shard_dir: Path):
    # the weights as pytorch_model.bin.index.json naming a shard that is a payload, not ".bin"
    import torch
    (d / "model.safetensors").unlink()
    shard_dir.mkdir(exist_ok=True)
    torch.save({"w": Payload(marker)}, shard_dir / "shard.data")
    rel = os.path.relpath(shard_dir / "shard.data", d)
    (d / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {"lm_head.weight": rel}}))


def index_shard_other_suffix(d, marker):
    _pickle_shards(d, marker, d)


def symlinked_dir(d, marker):
    # a payload .bin behind a symlinked folder, which a walk without followlinks never enters
    import torch
    outside = d.parent / f"{d.name}-elsewhere"
    outside.mkdir()
    torch.save({"w": Payload(marker)}, outside / "evil.bin")
    (d / "sub").symlink_to(outside, target_is_directory=True)


def fifo_vocab(d, marker):
    (d / "vocab.json").unlink()
    os.mkfifo(d / "vocab.json")


def no_vocab(d, marker):
    (d / "vocab.json").unlink()


def corrupt_safetensors(d, marker):
    # a header length larger than the file: safetensors' own loader raises a bare Rust error
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes((10 ** 9).to_bytes(8, "little") + data[8:64])


def rate(value):
    def set_rate(d, marker):
        cfg = json.loads((d / "processor_config.json").read_text())
        cfg["feature_extractor"]["sampling_rate"] = value
        (d / "processor_config.json").write_text(json.dumps(cfg))
    set_rate.__name__ = f"sampling_rate_{value}"
    return set_rate


def wavlm_weights(d, marker):
    # WavLM's weights of the same sizes under the folder's wav2vec2 config: transformers would drop them
    # and leave the encoder at random init, with a load report on stderr and exit 0
    import torch
    from safetensors.torch import save_file
    from transformers import WavLMConfig, WavLMForCTC
    cfg = json.loads((d / "config.json").read_text())
    keep = {k: v for k, v in cfg.items() if k not in ("model_type", "architectures", "transformers_version")}
    torch.manual_seed(1)
    state = {k: v.contiguous() for k, v in WavLMForCTC(WavLMConfig(**keep)).state_dict().items()}
    save_file(state, d / "model.safetensors", metadata={"format": "pt"})


def nan_weight(d, marker):
    from safetensors.torch import load_file, save_file
    state = load_file(d / "model.safetensors")
    key = next(k for k in sorted(state) if "encoder.layers.0" in k and state[k].is_floating_point())
    state[key].view(-1)[0] = float("nan")
    save_file(state, d / "model.safetensors", metadata={"format": "pt"})


def config(**changes):
    def edit(d, marker):
        _json(d, "config.json", **changes)
    edit.__name__ = "-".join(f"{k}={v!r}"[:30] for k, v in changes.items())
    return edit


TRANSCRIBE = ["asr", "transcribe", "--model", "{model}", "--table", "{table}", "--out", "{out}", "--device", "cpu",
              "--no-progress", "--db", "{out}/r.db"]
CKPT_ADD = ["ckpt", "add", "hostile", "{model}"]   # registry: $GENDERGAP_CHECKPOINTS, under --out
# (tamper, what the one line must say, commands); custom code also with a stdin that would answer "y"
CASES = [
    (auto_map_config, "config.json names custom code", [TRANSCRIBE, CKPT_ADD]),
    (auto_map_processor, "processor_config.json names custom code", [TRANSCRIBE, CKPT_ADD]),
    (auto_map_feature_extractor, "processor_config.json names custom code", [TRANSCRIBE]),
    (index_shard_other_suffix, "refusing to unpickle", [TRANSCRIBE, CKPT_ADD]),
    (symlinked_dir, "symlinked directory", [TRANSCRIBE, CKPT_ADD]),
    (fifo_vocab, "FIFO", [TRANSCRIBE, CKPT_ADD]),
    (no_vocab, "no tokenizer vocabulary", [TRANSCRIBE]),
    (corrupt_safetensors, "model.safetensors", [TRANSCRIBE, CKPT_ADD]),
    (rate(0), "sampling_rate 0 is outside", [TRANSCRIBE]),
    (rate(-16000), "sampling_rate -16000 is outside", [TRANSCRIBE]),
    (rate(1e12), "sampling_rate 1000000000000.0 is outside", [TRANSCRIBE]),
    # a released recogniser's folder meets the bounds and the strict load of an encoder's
    (wavlm_weights, "the weights do not fit config.json", [TRANSCRIBE]),
    (nan_weight, "holds NaN values", [TRANSCRIBE]),
    (config(num_hidden_layers=100000), "num_hidden_layers 100000 is outside [1, 256]", [TRANSCRIBE]),
    (config(conv_kernel=[10, 0]), "conv_kernel entry 0 is outside", [TRANSCRIBE]),
    (config(quantization_config={"quant_method": "bitsandbytes", "load_in_8bit": True}),
     "asks for quantised weights", [TRANSCRIBE]),
]
PARAMS = [pytest.param(t, says, cmd, stdin, id=f"{t.__name__}-{cmd[1]}-{'y' if stdin else 'empty'}")
          for t, says, cmds in CASES for cmd in cmds
          for stdin in (["", "y\n"] if "custom code" in says else [""])]
CUSTOM_CODE = [pytest.param(t, says, id=t.__name__) for t, says, _ in CASES if "custom code" in says]


def _listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _tampered(good: Path, tmp_path: Path, tamper) -> Path:
    """A copy of the good folder at tmp_path/model, tampered (a payload would touch tmp_path/MARKER)."""
    shutil.copytree(good / "model", tmp_path / "model")
    shutil.copy(good / "vocab.json", tmp_path / "vocab.json")
    tamper(tmp_path / "model", tmp_path / "MARKER")
    return tmp_path / "model"


def _argv(command, model: Path, good: Path, out: Path) -> list[str]:
    return [a.format(model=model, table=good / "table.tsv", out=out) for a in command]


def _assert_refused(tmp_path: Path, before: set[str], rc: int, err: list[str], says: str) -> None:
    assert rc == 2 and len(err) == 1, err[-40:]
    assert says in err[0], err[0]
    assert not (tmp_path / "MARKER").exists()                   # no payload ran
    after = {f for f in _listing(tmp_path) - before if not f.startswith("out")}
    assert not after, after                                     # nothing written outside --out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("tamper,says,command,stdin", PARAMS)
def test_a_hostile_model_folder_is_one_line(good, tmp_path, capfd, monkeypatch, tamper, says, command, stdin):
    model, out = _tampered(good, tmp_path, tamper), tmp_path / "out"
    before = _listing(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GENDERGAP_CHECKPOINTS", str(out / "ckpts.json"))
    rc, _, err = run_fresh(capfd, "-q", *_argv(command, model, good, out), stdin=stdin)
    _assert_refused(tmp_path, before, rc, err, says)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("tamper,says", CUSTOM_CODE)
def test_custom_code_is_refused_in_a_real_process_whose_stdin_says_yes(good, tmp_path, tamper, says):
    # a prompt reading fd 0 itself (not sys.stdin) would get "y" here: the refusal must come first
    model, out = _tampered(good, tmp_path, tamper), tmp_path / "out"
    before = _listing(tmp_path)
    env = {**ENV, "GENDERGAP_CHECKPOINTS": str(out / "ckpts.json")}
    p = subprocess.run([sys.executable, "-m", "gendergap.cli", "-q", *_argv(TRANSCRIBE, model, good, out)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90, input="y\n")
    _assert_refused(tmp_path, before, p.returncode, p.stderr.strip().splitlines(), says)


@pytest.mark.timeout(60)
def test_the_untampered_folder_transcribes(good, tmp_path, capfd, monkeypatch):
    # the refusals above come from the tampering, not from the folder
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_fresh(capfd, "-q", *_argv(TRANSCRIBE, good / "model", good, tmp_path / "out"))
    assert rc == 0, err[-40:]
    assert (tmp_path / "out").is_dir()


# ---- issue 47: a model folder is checked before it is built -------------------------------------------------
# Tiny self-supervised folders (tests/family_helpers.py), tampered as a hostile user did, through the real CLI:
# `ckpt add` (what resolving and the sweep's dry run check) and `ckpt features` (what loading the weights checks).

@pytest.fixture(scope="module")
def ssl_models(tmp_path_factory):
    from family_helpers import tiny_family_model
    root = tmp_path_factory.mktemp("ssl47")
    return {t: tiny_family_model(root / t, t, seed=1) for t in ("wav2vec2", "wavlm", "hubert", "data2vec-audio")}


def _ssl_copy(src: Path, tmp_path: Path) -> Path:
    shutil.copytree(src, tmp_path / "model")
    return tmp_path / "model"


def _ssl_cli(capfd, monkeypatch, tmp_path, command: str, model: Path, good: Path):
    """(rc, err lines) of `ckpt add` or `ckpt features` on ``model``, all output under tmp_path/out."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    argv = {"add": ["ckpt", "add", "m", model, "--registry", out / "ckpts.json"],
            "features": ["ckpt", "features", model, "--table", good / "table.tsv", "--device", "cpu",
                         "--feature-store", out / "store"]}[command]
    capfd.readouterr()   # what building the folder printed is not the command's
    rc, _, err = run_fresh(capfd, "-q", *argv)
    return rc, err


def _sharded(src: Path, dest: Path) -> Path:
    """``src``'s model saved again as three safetensors shards and model.safetensors.index.json."""
    from transformers import AutoModel
    AutoModel.from_pretrained(src).save_pretrained(dest, max_shard_size="40KB")
    shutil.copy(src / "preprocessor_config.json", dest)
    assert len(list(dest.glob("model-0000*-of-00003.safetensors"))) == 3
    return dest


def test_every_shard_a_sharded_folder_names_is_part_of_its_identity(ssl_models, tmp_path):
    from safetensors.torch import load_file, save_file

    from ssl_pretrain.checkpoints import CheckpointRef
    model = _sharded(ssl_models["wav2vec2"], tmp_path / "sharded")
    ref = CheckpointRef.resolve(model)
    shards = sorted(model.glob("model-*.safetensors"))
    assert set(shards) <= set(ref.files())
    assert ref.load().num_layers == 2                     # a sharded folder loads as before
    before = ref.content_hash
    tensors = load_file(shards[-1])                       # new weights in one shard, the index untouched
    key = sorted(tensors)[0]
    tensors[key] = tensors[key] + 1
    save_file(tensors, shards[-1], metadata={"format": "pt"})
    assert CheckpointRef.resolve(model).content_hash != before   # so no cache serves the old features


def shard_outside(d: Path) -> None:
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    last = sorted(set(idx["weight_map"].values()))[-1]
    (d / last).rename(d.parent / "elsewhere.safetensors")
    idx["weight_map"] = {k: "../elsewhere.safetensors" if v == last else v for k, v in idx["weight_map"].items()}
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))


def shard_missing(d: Path) -> None:
    sorted(d.glob("model-*.safetensors"))[-1].unlink()


def shard_fifo(d: Path) -> None:
    last = sorted(d.glob("model-*.safetensors"))[-1]
    last.unlink()
    os.mkfifo(last)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("tamper,says", [(shard_outside, "weights shard path '../elsewhere.safetensors' leads outside"),
                                         (shard_missing, "cannot read the weights shard (No such file"),
                                         (shard_fifo, "FIFO")], ids=lambda x: getattr(x, "__name__", ""))
def test_a_shard_outside_missing_or_a_fifo_is_one_line(ssl_models, good, tmp_path, capfd, monkeypatch, tamper, says):
    model = _sharded(ssl_models["wav2vec2"], tmp_path / "model")
    tamper(model)
    before = _listing(tmp_path)
    rc, err = _ssl_cli(capfd, monkeypatch, tmp_path, "add", model, good)
    _assert_refused(tmp_path, before, rc, err, says)


def weights_of(family: str):
    """A folder holding ``family``'s weights under the victim's config.json (set by the test)."""
    def swap(d: Path, models: dict) -> None:
        shutil.copy(models[family] / "model.safetensors", d / "model.safetensors")
    swap.__name__ = f"{family}_weights"
    return swap


def nan_weight(value):
    def poison(d: Path, models: dict) -> None:
        from safetensors.torch import load_file, save_file
        tensors = load_file(d / "model.safetensors")
        key = sorted(k for k in tensors if k.startswith("encoder.layers.1."))[0]
        tensors[key].view(-1)[0] = value
        save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
    poison.__name__ = f"weight_{value}"
    return poison


def no_tensors(d: Path, models: dict) -> None:
    from safetensors.torch import save_file
    save_file({}, d / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.timeout(60)
@pytest.mark.parametrize("victim,tamper,command,says", [
    ("wav2vec2", weights_of("wavlm"), "features", "the weights do not fit config.json (a wav2vec 2.0 model): "
                                                  "7 encoder weights unexpected"),
    ("data2vec-audio", weights_of("hubert"), "features", "the weights do not fit config.json (a data2vec model): "
                                                         "16 encoder weights missing, 3 encoder weights unexpected"),
    ("wav2vec2", no_tensors, "add", "model.safetensors: the safetensors file holds no tensors"),
    ("wav2vec2", nan_weight(float("nan")), "features", "model.safetensors: the weight 'encoder.layers.1."),
    ("wav2vec2", nan_weight(float("inf")), "features", "holds infinite values"),
], ids=lambda x: getattr(x, "__name__", x) if not isinstance(x, str) or len(x) < 20 else "")
def test_weights_that_do_not_fit_or_are_not_finite_are_one_line(ssl_models, good, tmp_path, capfd, monkeypatch,
                                                                 victim, tamper, command, says):
    model = _ssl_copy(ssl_models[victim], tmp_path)
    tamper(model, ssl_models)
    before = _listing(tmp_path)
    rc, err = _ssl_cli(capfd, monkeypatch, tmp_path, command, model, good)
    _assert_refused(tmp_path, before, rc, err, says)
    if "NaN" in says or "weight 'encoder" in says:
        assert "holds NaN values" in err[0]


@pytest.mark.timeout(60)
def test_a_pretraining_folder_and_its_quantizer_still_load(good, tmp_path, capfd, monkeypatch):
    # a released pretraining folder holds more than the encoder (quantizer, project_q, project_hid): not a misfit
    import torch
    from transformers import Wav2Vec2FeatureExtractor, Wav2Vec2ForPreTraining

    from family_helpers import tiny_config
    torch.manual_seed(0)
    Wav2Vec2ForPreTraining(tiny_config("wav2vec2")).save_pretrained(tmp_path / "model")
    Wav2Vec2FeatureExtractor(sampling_rate=16000).save_pretrained(tmp_path / "model")
    rc, err = _ssl_cli(capfd, monkeypatch, tmp_path, "features", tmp_path / "model", good)
    assert rc == 0, err[-20:]


def _config(**changes):
    def edit(d: Path) -> None:
        _json(d, "config.json", **changes)
    edit.__name__ = "-".join(f"{k}={v!r}"[:40] for k, v in changes.items())
    return edit


def _deep(name: str, levels: int = 100_000):
    def deepen(d: Path) -> None:
        (d / name).write_text("[" * levels + "]" * levels)
    deepen.__name__ = f"deep_{name}"
    return deepen


def _raw(name: str, text: str, label: str):
    def write(d: Path) -> None:
        (d / name).write_text(text)
    write.__name__ = label
    return write


def huge_config(d: Path) -> None:
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "padding": "x" * (17 << 20)}))


def rate_47(value):
    def set_rate(d: Path) -> None:
        _json(d, "preprocessor_config.json", sampling_rate=value)
    set_rate.__name__ = f"sampling_rate_{value}"
    return set_rate


CONFIG_CASES = [
    (_config(num_hidden_layers=100000), "model config's num_hidden_layers 100000 is outside [1, 256]"),
    (_config(hidden_size=20000), "model config's hidden_size 20000 is outside [1, 16384]"),
    (_config(num_hidden_layers=0), "model config's num_hidden_layers 0 is outside [1, 256]"),
    (_config(conv_stride=[5, 4, 0, 4]), "model config's conv_stride entry 0 is outside [1, 1024]"),
    (_config(conv_kernel=[10, 0, 3, 3]), "model config's conv_kernel entry 0 is outside [1, 1024]"),
    (_config(hidden_size="32"), "model config's hidden_size '32' is not an integer"),
    (_config(intermediate_size=48.0), "model config's intermediate_size 48.0 is not an integer"),
    (_config(num_attention_heads=5), "hidden_size 32 is not divisible by num_attention_heads 5"),
    (_config(conv_dim=[16, 16, 16]), "conv lists differ in length (conv_dim 3, conv_kernel 4, conv_stride 4)"),
    (_config(num_feat_extract_layers=7), "num_feat_extract_layers 7 is not the 4 conv layers"),
    (_config(hidden_act="no-such-activation"), "no model can be built from the model config"),
    (_config(quantization_config={"quant_method": "bitsandbytes", "load_in_8bit": True}),
     "asks for quantised weights (quantization_config, bitsandbytes)"),
    (_config(hidden_size=2048, num_attention_heads=16, intermediate_size=8192, num_hidden_layers=24),
     "over the 4 GB bound"),
    (_deep("config.json"), "config.json nests more than 64 levels"),
    (huge_config, "config.json is 17,"),
    (_raw("config.json", '{"model_type": "wav2vec2", "hidden_size": NaN}', "nan_in_config"), "not standard JSON"),
    (_raw("config.json", '{"model_type": "wav2vec2", "model_type": "hubert"}', "key_twice"), "is given twice"),
    (_deep("preprocessor_config.json"), "preprocessor_config.json nests more than 64 levels"),
    (rate_47(500000), "sampling_rate 500000 is outside [1000, 192000]"),
    (rate_47(16000.5), "sampling_rate 16000.5 is not a whole number of Hz"),
    (_deep("gendergap_source.json"), "gendergap_source.json nests more than 64 levels"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("tamper,says", CONFIG_CASES, ids=[t.__name__ for t, _ in CONFIG_CASES])
def test_a_config_that_describes_no_sane_model_is_one_line(ssl_models, good, tmp_path, capfd, monkeypatch, tamper,
                                                           says):
    model = _ssl_copy(ssl_models["wav2vec2"], tmp_path)
    tamper(model)
    before = _listing(tmp_path)
    rc, err = _ssl_cli(capfd, monkeypatch, tmp_path, "add", model, good)
    _assert_refused(tmp_path, before, rc, err, says)


@pytest.mark.timeout(60)
def test_the_model_size_bound_can_be_raised(ssl_models, good, tmp_path, capfd, monkeypatch):
    # 1.2 B parameters (4.8 GB in fp32): refused by default above, registered once the user raises the bound
    model = _ssl_copy(ssl_models["wav2vec2"], tmp_path)
    _json(model, "config.json", hidden_size=2048, num_attention_heads=16, intermediate_size=8192, num_hidden_layers=24)
    monkeypatch.setenv("GENDERGAP_MAX_MODEL_GB", "8")
    rc, err = _ssl_cli(capfd, monkeypatch, tmp_path, "add", model, good)
    assert rc == 0, err[-20:]


@pytest.mark.timeout(180)
def test_the_sweep_dry_run_checks_the_architecture(ssl_models, tmp_path):
    # the same check at planning: a study naming the folder fails its dry run, in one line, before any job
    model = _ssl_copy(ssl_models["wav2vec2"], tmp_path)
    _json(model, "config.json", num_hidden_layers=100000)
    cfg = tmp_path / "study.yaml"
    cfg.write_text(f"name: s\ncorpus: {{synth: tiny}}\ncheckpoints:\n  Big: {{path: {model}}}\n"
                   "tasks:\n  probes: {corpus: synth-fr, layers: all, probes: [mean], control: false}\n")
    p = subprocess.run([sys.executable, "-m", "gendergap.cli", "sweep", "--config", str(cfg), "--out",
                        str(tmp_path / "study"), "--dry-run"], capture_output=True, text=True, env=ENV, timeout=150)
    err = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(err) == 1, err
    assert "num_hidden_layers 100000 is outside [1, 256]" in err[0] and "Big" in err[0], err[0]
    assert not (tmp_path / "study" / "sweep" / "jobs").exists()


def test_the_sweep_dry_run_checks_a_released_recogniser_as_transcribe_does(good, tmp_path):
    """An asr-released model is checked at planning as `asr transcribe` checks it before loading: a
    quantised or 100,000-layer folder fails the dry run in one line; the good folder passes it."""
    def dry_run(model: Path) -> subprocess.CompletedProcess:
        cfg = tmp_path / f"{model.name}.yaml"
        cfg.write_text(f"name: s\ncorpus: {{synth: tiny}}\ncheckpoints: {{FBANK: {{baseline: fbank}}}}\n"
                       f"tasks:\n  released:\n    type: asr-released\n"
                       f"    models:\n      mine: {{path: {model}}}\n")
        return subprocess.run([sys.executable, "-m", "gendergap.cli", "sweep", "--config", str(cfg), "--out",
                               str(tmp_path / "study"), "--dry-run"], capture_output=True, text=True, env=ENV,
                              timeout=150)

    assert dry_run(good / "model").returncode == 0
    for name, change, says in [("quantised", {"quantization_config": {"quant_method": "bitsandbytes"}},
                                "asks for quantised weights"),
                               ("deep", {"num_hidden_layers": 100000}, "num_hidden_layers 100000 is outside")]:
        model = tmp_path / name
        shutil.copytree(good / "model", model)
        shutil.copy(good / "vocab.json", tmp_path / "vocab.json")
        _json(model, "config.json", **change)
        p = dry_run(model)
        err = [ln for ln in p.stderr.splitlines() if ln.strip()]
        assert p.returncode == 2 and len(err) == 1, err
        assert says in err[0] and "'mine'" in err[0] and str(model / "config.json") in err[0], err[0]
    assert not (tmp_path / "study" / "sweep" / "jobs").exists()
