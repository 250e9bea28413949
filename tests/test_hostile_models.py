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
    from transformers import (Wav2Vec2Config, Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC,
                              Wav2Vec2Processor)
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
