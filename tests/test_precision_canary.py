"""A reduced precision proves itself before it produces a number (ssl_pretrain.precision_canary).

On Intel CPUs with AMX, oneDNN's bf16 grouped conv1d (every wav2vec 2.0 / HuBERT / WavLM
positional convolution) returns garbage. Where the machine at hand takes another kernel, the
fixture ``faulty_grouped_conv`` stands in for it: under bf16 autocast with oneDNN on, a grouped
conv1d returns its output reversed in time (same norm, relative error ~1.4), as wrong as the AMX
kernel was. The canary must then take the oneDNN-off path (and the shipped F-tiny's bf16
features stay within 3 % of fp32), or refuse in one line when no path is right.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from asr_helpers import one_thread, write_corpus  # noqa: F401 (fixture)
from corpora.base.errors import UserError
from gendergap.cli import main
from ssl_pretrain.checkpoints import CheckpointRef
from ssl_pretrain.device import precision_path, runtime_info
from ssl_pretrain.feature_store import FeatureStore, SSLExtractor
from ssl_pretrain.precision_canary import TOLERANCE, checked_path

pytestmark = pytest.mark.usefixtures("one_thread")
SHIPPED = Path(__file__).resolve().parent.parent / "ssl_pretrain" / "shipped"


@pytest.fixture(autouse=True)
def fresh_canary():
    """Every test sees the canary run anew (its verdict is cached per process)."""
    checked_path.cache_clear()
    yield
    checked_path.cache_clear()


def _bf16_autocast() -> bool:
    return torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def _faulty(monkeypatch, only_with_onednn: bool):
    real = F.conv1d

    def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        y = real(input, weight, bias, stride, padding, dilation, groups)
        broken = groups > 1 and _bf16_autocast() and (torch._C._get_mkldnn_enabled() or not only_with_onednn)
        return y.flip(-1) if broken else y

    monkeypatch.setattr(F, "conv1d", conv1d)


@pytest.fixture
def faulty_grouped_conv(monkeypatch):
    """The AMX fault: bf16 grouped conv1d wrong with oneDNN on, right with it off."""
    _faulty(monkeypatch, only_with_onednn=True)


@pytest.fixture
def broken_grouped_conv(monkeypatch):
    """A kernel wrong on every path: nothing to fall back to."""
    _faulty(monkeypatch, only_with_onednn=False)


def test_the_canary_passes_bf16_on_this_cpu_and_records_its_path():
    path = precision_path("cpu", "bf16")
    assert path.usable
    assert 0 < max(path.errors.values()) <= TOLERANCE   # > 0: bf16 really ran
    assert any("groups 16, k128" in op for op in path.errors) and "attention" in path.errors
    rec = runtime_info("cpu", "bf16")["precision_path"]
    assert rec["path"] in ("bf16 autocast", "bf16 autocast, oneDNN off")  # the latter on an AMX CPU
    assert rec["canary_max_rel_error"] <= TOLERANCE
    assert runtime_info("cpu", "fp32")["precision_path"] == {"path": "fp32"}


def test_a_wrong_grouped_conv_takes_the_onednn_off_path(faulty_grouped_conv, capsys):
    path = precision_path("cpu", "bf16")
    assert path.fallback and path.usable and path.name == "bf16 autocast, oneDNN off"
    grouped = [op for op in path.default_errors if op.startswith("conv1d positional")]
    assert all(path.default_errors[op] > 0.5 for op in grouped)        # the fault was seen ...
    assert max(path.errors.values()) <= TOLERANCE                       # ... and the fallback is right
    assert path.default_errors["linear"] <= TOLERANCE                   # only the grouped conv was off
    rec = path.record()
    assert (rec["plain_autocast_off"]["op"].startswith("conv1d positional")
            and rec["plain_autocast_off"]["rel_error"] > 0.5)
    assert main(["bench", "--check-precision", "--precision", "bf16", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "cpu bf16: bf16 autocast, oneDNN off" in out and "plain autocast" in out


def test_bf16_features_of_the_shipped_model_stay_right_on_a_faulty_kernel(faulty_grouped_conv, tmp_path):
    """The acceptance check of the AMX fault, here with the stand-in: every layer of F-tiny within 3 %
    of fp32, and the entry says which path ran. Without the canary the same run is ~100 % off."""
    from ssl_helpers import shipped_fp32_and_bf16_views
    df, fp32, bf16 = shipped_fp32_and_bf16_views(tmp_path, n=4)
    runtime = json.loads((bf16.dir / "entry.json").read_text())["runtime"]
    assert runtime["precision_path"]["path"] == "bf16 autocast, oneDNN off"
    for layer in fp32.layers:
        a, b = (np.concatenate(v.layer(df["id"], layer)) for v in (fp32, bf16))
        assert 0 < np.linalg.norm(b - a) / np.linalg.norm(a) < 0.03, layer
    # the stand-in is as wrong as the real fault: plain autocast with oneDNN on, no canary
    model = CheckpointRef.resolve(SHIPPED / "tiny-female.safetensors").load().model
    wave = torch.randn(1, 16000)
    with torch.no_grad():
        ok = model(wave, output_hidden_states=True).hidden_states
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bad = model(wave, output_hidden_states=True).hidden_states
    errors = [float(torch.linalg.vector_norm(b.float() - a) / torch.linalg.vector_norm(a)) for a, b in zip(ok, bad)]
    assert max(errors) > 0.15, errors   # layer 1 on: the positional conv's output is added before layer 1


def test_a_precision_wrong_on_every_path_is_refused_in_one_line(broken_grouped_conv, tmp_path, capsys):
    with pytest.raises(UserError) as e:
        precision_path("cpu", "bf16")
    text = str(e.value)
    assert "--precision bf16 on cpu" in text and "use --precision fp32" in e.value.fix
    assert main(["bench", "--check-precision", "--precision", "bf16", "--device", "cpu"]) == 2
    assert "refused" in capsys.readouterr().out
    # a command that would extract refuses before writing a feature
    table = write_corpus(tmp_path / "data")["table"]
    assert main(["ckpt", "features", str(SHIPPED / "tiny-female.safetensors"), "--table", str(table),
                 "--device", "cpu", "--precision", "bf16", "--feature-store", str(tmp_path / "store")]) == 2
    err = capsys.readouterr().err
    assert "--precision bf16 on cpu" in err and len(err.strip().splitlines()) <= 2
    assert not list((tmp_path / "store").rglob("*.npy")) and not list((tmp_path / "store").rglob("*.zip"))


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_canary_runs_on_cuda_and_gpu_features_follow_its_path(precision, tmp_path):
    """The same canary on a GPU (milliseconds there): a usable path, recorded in the entry."""
    path = precision_path("cuda:0", precision)
    assert path.usable and max(path.errors.values()) <= TOLERANCE
    from ssl_helpers import utterance_frame, write_wavs
    rows = write_wavs(tmp_path / "audio", n=3)
    df, paths = utterance_frame(tmp_path / "audio", rows)
    ref = CheckpointRef.resolve(SHIPPED / "tiny-female.safetensors")
    view = FeatureStore(tmp_path / "store").view(SSLExtractor(ref, "cuda:0", precision), df.assign(audio=paths),
                                                 "all", progress=False)
    assert json.loads((view.dir / "entry.json").read_text())["runtime"]["precision_path"]["path"] == path.name


def test_checking_fp32_against_itself_is_refused_in_one_line(capsys):
    """`bench --check-precision` without --precision would compare fp32 with fp32 and pass: refused."""
    assert main(["bench", "--check-precision", "--device", "cpu"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "give --precision fp16 or bf16" in err[0], err
