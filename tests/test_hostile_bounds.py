"""Bounds on what a handed folder or file gives (issue 60), where a case does not fit the hostile suite's
table (tests/test_hostile_inputs.py CASES): a sweep's dry run refuses a model folder whose weights the
run would refuse, and validate_kaldi_dir bounds a handed Kaldi data dir's values and its label file.
Real files, the real CLI in-process (tests/cli_helpers.run_fresh), no mocks."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_helpers import run_fresh  # noqa: E402
from corpora.base.errors import UserError  # noqa: E402


@pytest.fixture(scope="module")
def spoofed(tmp_path_factory):
    """A wav2vec2 folder holding WavLM weights of the same sizes (transformers would drop them and leave
    the encoder at random init), and the genuine folder."""
    from family_helpers import tiny_family_model
    root = tmp_path_factory.mktemp("spoofed")
    good = tiny_family_model(root / "good", "wav2vec2", seed=1)
    wavlm = tiny_family_model(root / "wavlm", "wavlm", seed=1)
    bad = root / "bad"
    shutil.copytree(good, bad)
    shutil.copy(wavlm / "model.safetensors", bad / "model.safetensors")
    return {"good": good, "bad": bad}


def _dry_run(capfd, monkeypatch, tmp_path, model: Path):
    cfg = tmp_path / "study.yaml"
    cfg.write_text(f"name: s\ncorpus: {{synth: tiny}}\ncheckpoints:\n  Spoof: {{path: {model}}}\n"
                   "tasks:\n  probes: {type: probes}\n")
    monkeypatch.chdir(tmp_path)
    capfd.readouterr()
    rc, _, err = run_fresh(capfd, "-q", "sweep", "--config", cfg, "--out", tmp_path / "study", "--dry-run")
    return rc, err


@pytest.mark.timeout(120)
def test_the_dry_run_refuses_weights_the_run_would_refuse(spoofed, tmp_path, capfd, monkeypatch):
    """The run loads a folder's weights (finite, fitting config.json) before it extracts a feature; the
    dry run checks the same, so another family's weights under the config are one line before any job."""
    rc, err = _dry_run(capfd, monkeypatch, tmp_path, spoofed["bad"])
    assert rc == 2 and len(err) == 1, err[-20:]
    assert "checkpoint 'Spoof'" in err[0] and "the weights do not fit config.json" in err[0], err[0]
    assert not (tmp_path / "study" / "sweep" / "jobs").exists()
    rc, err = _dry_run(capfd, monkeypatch, tmp_path, spoofed["good"])
    assert rc == 0, err[-20:]


def _kaldi_dir(root: Path, **files: str) -> Path:
    d = root / "train"
    d.mkdir(parents=True)
    base = {"utt2spk": "s1-u1 s1\n", "spk2utt": "s1 s1-u1\n", "text": "s1-u1 bonjour\n",
            "wav.scp": "s1-u1 /data/u1.wav\n"}
    for name, text in {**base, **files}.items():
        (d / name).write_text(text)
    return d


@pytest.mark.parametrize("name,value,says", [
    ("utt2num_frames", "inf", "need 'utt value' with value > 0 and whole, at most 1e+09"),
    ("utt2num_frames", "1e400", "need 'utt value' with value > 0 and whole, at most 1e+09"),
    ("utt2dur", "inf", "need 'utt value' with value > 0, at most 1e+06"),
])
def test_a_kaldi_dirs_values_are_bounded(tmp_path, name, value, says):
    """validate_kaldi_dir on a handed data dir: an infinite duration passed, and int(inf) frames traced back."""
    from manifests.export_kaldi import validate_kaldi_dir
    d = _kaldi_dir(tmp_path, **{name: f"s1-u1 {value}\n"})
    with pytest.raises(UserError, match=r"bad line") as e:
        validate_kaldi_dir(d)
    assert says in str(e.value) and f"{name}:1" in str(e.value), str(e.value)


def test_a_kaldi_dirs_label_file_is_bounded(tmp_path):
    """spk2gender is a label file: one over the label bound is refused by its size, before it is read (it was
    read whole, then refused for its content)."""
    from manifests.export_kaldi import validate_kaldi_dir
    d = _kaldi_dir(tmp_path, spk2gender="s1 f\n")
    with open(d / "spk2gender", "r+") as f:
        f.truncate((64 << 20) + 1)   # sparse
    with pytest.raises(UserError, match=r"spk2gender is 67,108,865 bytes \(at most 67,108,864 expected\)"):
        validate_kaldi_dir(d)

