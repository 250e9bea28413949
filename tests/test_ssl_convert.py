"""Conversion of a large-style (layer-norm extractor, pre-LN) fairseq model, and bad input."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from corpora.base.errors import UserError
from gendergap.cli import main
from ssl_helpers import write_manifest, write_wavs
from ssl_pretrain.checkpoints import CheckpointRef, register_checkpoint
from ssl_pretrain.convert import convert_checkpoint, load_fairseq_checkpoint
from ssl_pretrain.manifest_check import check_manifest_dir
from ssl_pretrain.registry import Registry

SHAPE = dict(extractor_mode="layer_norm", layer_norm_first=True, conv_bias=True, encoder_layers=3,
             encoder_embed_dim=64, encoder_ffn_embed_dim=128, encoder_attention_heads=4, final_dim=32,
             conv_feature_layers="[(32,10,5),(32,3,2),(32,3,2),(32,3,2),(32,3,2),(32,2,2),(32,2,2)]",
             conv_pos=16, conv_pos_groups=4, latent_vars=8, latent_groups=2)


def fairseq_large_style(tmp_path, seed=0):
    """A randomly initialised fairseq wav2vec2 (large-style norms), saved as fairseq does."""
    from dataclasses import asdict

    from fairseq.models.wav2vec.wav2vec2 import Wav2Vec2Config, Wav2Vec2Model
    torch.manual_seed(seed)
    cfg = Wav2Vec2Config(**SHAPE)
    model = Wav2Vec2Model(cfg).eval()
    with torch.no_grad():  # move norms off their 1/0 init so a swapped mapping cannot pass
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    path = tmp_path / "large_style.pt"
    torch.save({"cfg": {"model": {**asdict(cfg), "_name": "wav2vec2"},
                        "task": {"_name": "audio_pretraining", "normalize": True, "sample_rate": 16000}},
                "model": model.state_dict(), "optimizer_history": [{"num_updates": 0}]}, path)
    return model, path


def test_large_style_conversion_matches_fairseq_batched(tmp_path):
    fs_model, path = fairseq_large_style(tmp_path)
    out = convert_checkpoint(path, tmp_path / "hf")
    ssl = CheckpointRef.resolve(out).load()
    assert ssl.normalize and ssl.model.config.do_stable_layer_norm and ssl.model.config.feat_extract_norm == "layer"
    rng = np.random.default_rng(1)
    waves = [rng.standard_normal(n).astype(np.float32) * 0.1 for n in (16000, 11000, 7000)]
    states, mask = ssl.hidden_states(waves)
    # fairseq: the same batch, normalised per utterance as its dataset does, padded, with a padding mask
    normed = [torch.nn.functional.layer_norm(torch.from_numpy(w), (len(w),)) for w in waves]
    batch = torch.nn.utils.rnn.pad_sequence(normed, batch_first=True)
    pad = torch.ones_like(batch, dtype=torch.bool)
    for b, w in enumerate(waves):
        pad[b, :len(w)] = False
    caught = []
    hook = fs_model.encoder.layers[0].register_forward_pre_hook(lambda m, a: caught.append(a[0]))
    with torch.no_grad():
        res = fs_model.extract_features(batch, padding_mask=pad, mask=False)
    hook.remove()
    # layer 0 = encoder input; 1..L-1 = layer outputs; L = final output (after the last LayerNorm)
    ref = [caught[0]] + [lr[0] for lr in res["layer_results"][:-1]]
    ref = [r.transpose(0, 1) for r in ref] + [res["x"]]
    assert states.shape[0] == len(ref) == 4
    assert torch.equal(mask, ~res["padding_mask"])
    for layer, r in enumerate(ref):
        diff = ((states[layer] - r[:, : states.shape[2]]) * mask[..., None]).abs().max().item()
        assert diff <= 1e-4, (layer, diff)


def test_ctc_checkpoint_is_refused(tmp_path, capsys):
    _, path = fairseq_large_style(tmp_path)
    pre = load_fairseq_checkpoint(path)
    # what fairseq writes after CTC fine-tuning: model wav2vec_ctc wrapping the encoder as w2v_encoder.*
    ctc = {"cfg": {"model": {"_name": "wav2vec_ctc", "w2v_path": str(path)}, "task": {"_name": "audio_finetuning"}},
           "model": {**{f"w2v_encoder.w2v_model.{k}": v for k, v in pre["model"].items()},
                     "w2v_encoder.proj.weight": torch.zeros(30, 64)}}
    ctc_path = tmp_path / "ctc.pt"
    torch.save(ctc, ctc_path)
    with pytest.raises(UserError, match="CTC fine-tuned") as e:
        register_checkpoint(Registry(tmp_path / "r.json"), "ctc", ctc_path)
    assert str(ctc_path) in str(e.value) and "w2v_path" in str(e.value)
    assert main(["ckpt", "convert", str(ctc_path), "--out", str(tmp_path / "x")]) == 2
    assert "not a wav2vec 2.0 pretraining checkpoint" in capsys.readouterr().err
    not_ckpt = tmp_path / "notes.pt"
    not_ckpt.write_text("hello")
    with pytest.raises(UserError, match="cannot read as a torch fairseq checkpoint"):
        load_fairseq_checkpoint(not_ckpt)


def test_bad_manifests(tmp_path):
    root = tmp_path / "audio"
    rows = write_wavs(root, n=4)
    m = write_manifest(root, rows, tmp_path / "m", n_valid=1)
    assert check_manifest_dir(m)["train"]["files"] == 3
    (root / rows[1][0]).unlink()
    with pytest.raises(UserError, match="does not exist") as e:
        check_manifest_dir(m)
    assert e.value.line == 3 and e.value.path.endswith("train.tsv")

    rows8 = write_wavs(tmp_path / "a8", n=3, sample_rate=8000)
    m8 = write_manifest(tmp_path / "a8", rows8, tmp_path / "m8", n_valid=1)
    with pytest.raises(UserError, match="8000 Hz") as e:
        check_manifest_dir(m8)
    assert "resample" in e.value.fix

    (tmp_path / "m3").mkdir()
    (tmp_path / "m3" / "train.tsv").write_text(f"{root}\nwav/u00.wav 123\n")
    with pytest.raises(UserError, match="relpath<TAB>num_samples") as e:
        check_manifest_dir(tmp_path / "m3")
    assert e.value.line == 2
    with pytest.raises(UserError, match="no train.tsv"):
        check_manifest_dir(tmp_path)


def test_registry_input_errors(tmp_path):
    reg = Registry(tmp_path / "r.json")
    with pytest.raises(UserError, match="not 100%"):
        reg.add("x", tmp_path, kind="hf", male_pct=50, female_pct=30, unknown_pct=0)
    with pytest.raises(UserError, match="no config.json"):
        register_checkpoint(reg, "x", tmp_path)
    with pytest.raises(UserError, match="no checkpoint named"):
        reg.get("missing")


def test_features_cli_from_an_utterance_table(tmp_path, capsys):
    import json

    import kaldiio

    from corpora.table import new_table, write_table
    _, path = fairseq_large_style(tmp_path)
    hf_dir = convert_checkpoint(path, tmp_path / "hf")
    rows = write_wavs(tmp_path / "audio", n=5)
    table = new_table([{"id": f"utt{i}", "audio": f"audio/{rel}", "offset": 0.0, "duration": n / 16000,
                        "sample_rate": 16000, "speaker": f"s{i % 2}", "gender": "FM"[i % 2], "corpus": "t",
                        "lang": "fr", "split": "test", "text": "x"} for i, (rel, n) in enumerate(rows)])
    tsv = write_table(table, tmp_path / "t.tsv")
    store = ["--feature-store", str(tmp_path / "store")]
    assert main(["ckpt", "features", str(hf_dir), "--table", str(tsv), "--out", str(tmp_path / "npy"),
                 "--layer", "all", *store]) == 0
    allx = np.load(tmp_path / "npy" / "utt0.npy")
    n_frames = int(rows[0][1] // 320) - (1 if rows[0][1] % 320 < 80 else 0)  # conv stack: 25 ms window, 20 ms hop
    assert allx.shape[0] == 4 and allx.shape[2] == 64 and abs(allx.shape[1] - n_frames) <= 1
    assert json.loads((tmp_path / "npy" / "features.json").read_text())["layers"] == [0, 1, 2, 3]
    assert main(["ckpt", "features", str(hf_dir), "--table", str(tsv), "--out", str(tmp_path / "kaldi"),
                 "--format", "kaldi", "--layer", "2", "--repeat", "2", *store]) == 0
    feats = kaldiio.load_scp(str(tmp_path / "kaldi" / "feats.scp"))
    np.testing.assert_allclose(feats["utt0"], np.repeat(allx[2], 2, axis=0), atol=1e-5)
    assert main(["ckpt", "features", str(hf_dir), "--table", str(tsv), "--out", str(tmp_path / "k2"),
                 "--format", "kaldi", "--layer", "all", *store]) == 2
    assert main(["ckpt", "features", str(hf_dir), "--table", str(tsv), "--out", str(tmp_path / "k3"),
                 "--layer", "9", *store]) == 2
    assert "layer 9 is out of range: this model has layers 0..3" in capsys.readouterr().err
