"""Kaldi export (data dir + SSL features readable by kaldiio and kaldi-io) and import."""
from __future__ import annotations

import numpy as np
import pytest

from asr_helpers import one_thread, tiny_wav2vec2, write_corpus  # noqa: F401 (fixture)
from corpora.base.errors import UserError
from corpora.utterances import UtteranceTable
from downstream_asr.kaldi import kaldi_export, kaldi_import
from manifests.export_kaldi import validate_kaldi_dir

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from ssl_pretrain.checkpoints import CheckpointRef
    from ssl_pretrain.feature_store import FeatureStore, SSLExtractor
    root = tmp_path_factory.mktemp("kaldi")
    paths = write_corpus(root / "data", {"test": 6})
    ref = CheckpointRef.resolve(tiny_wav2vec2(root / "w2v"))
    table = UtteranceTable.load(paths["table"]).audio_rows()
    audio = table["audio"].tolist()
    view = FeatureStore(root / "store").view(SSLExtractor(ref), table, 1, progress=False)
    out = {repeat: kaldi_export(view, table, audio, root / f"k{repeat}", repeat=repeat) for repeat in (1, 2)}
    return {"root": root, "ssl": ref.load(), "table": table, "paths": paths, "summary": out}


def test_export_validates_and_reads_with_kaldiio_and_kaldi_io(exported):
    import kaldi_io
    import kaldiio
    d = exported["root"] / "k1"
    assert validate_kaldi_dir(d, no_feats=False)["utterances"] == 6
    assert (d / "spk2gender").read_text() == "f3 f\nm3 m\n"
    a = dict(kaldiio.load_scp_sequential(str(d / "feats.scp")))
    b = dict(kaldi_io.read_mat_scp(str(d / "feats.scp")))
    keys = [ln.split()[0] for ln in (d / "utt2spk").read_text().splitlines()]
    assert list(a) == keys and sorted(b) == sorted(keys)
    # the features are layer 1 of the model, frame for frame
    table = exported["table"]
    first = table.iloc[0]
    from ssl_pretrain.features import read_segment
    wave = read_segment(first["audio"], 0.0, first["duration"], 16000)
    states, mask = exported["ssl"].hidden_states([wave])
    ref = states[1, 0, : int(mask[0].sum())].numpy()
    key = f"{first['id']}"
    np.testing.assert_allclose(a[key], ref, atol=2e-3 * np.abs(ref).max())  # stored as fp16
    np.testing.assert_array_equal(a[key], b[key])
    n = dict(ln.split() for ln in (d / "utt2num_frames").read_text().splitlines())
    assert int(n[key]) == ref.shape[0] and (d / "frame_shift").read_text().strip() == "0.02"
    assert exported["summary"][1]["dim"] == 32


def test_repeat_frames_gives_10ms(exported):
    import kaldiio
    one = dict(kaldiio.load_scp_sequential(str(exported["root"] / "k1" / "feats.scp")))
    two = dict(kaldiio.load_scp_sequential(str(exported["root"] / "k2" / "feats.scp")))
    for k in one:
        np.testing.assert_array_equal(two[k], np.repeat(one[k], 2, axis=0))
    assert (exported["root"] / "k2" / "frame_shift").read_text().strip() == "0.01"


def test_import_text_and_ctm(exported, tmp_path):
    d = exported["root"] / "k1"
    utts = [ln.split()[0] for ln in (d / "utt2spk").read_text().splitlines()]
    txt = tmp_path / "10.txt"
    txt.write_text(f"{utts[0]} le chat\n{utts[1]}\n")
    n = kaldi_import(text=str(txt), out=tmp_path / "hyp.tsv", data_dir=d)
    lines = (tmp_path / "hyp.tsv").read_text().splitlines()
    assert n == 6 and lines[0] == f"{utts[0]}\tle chat" and lines[1] == f"{utts[1]}\t" and lines[5].endswith("\t")
    # a recording-level CTM is split by segments (each word at its midpoint)
    seg = {ln.split()[0]: ln.split() for ln in (d / "segments").read_text().splitlines()}
    rec = seg[utts[2]][1]
    ctm = tmp_path / "x.ctm"
    ctm.write_text(f"{rec} 1 0.15 0.05 dort\n{rec} 1 0.0 0.10 chat\n{utts[3]} 1 0.0 0.2 elle\n{rec} 1 0.2 0.1 <eps>\n")
    kaldi_import(ctm=str(ctm), out=tmp_path / "c.tsv", data_dir=d)
    got = dict(ln.split("\t") for ln in (tmp_path / "c.tsv").read_text().splitlines())
    assert got[utts[2]] == "chat dort" and got[utts[3]] == "elle" and got[utts[0]] == ""
    bad = tmp_path / "bad.txt"
    bad.write_text(f"{utts[0]} a\nnobody b\n")
    with pytest.raises(UserError, match="not in the data dir") as e:
        kaldi_import(text=str(bad), out=tmp_path / "h2.tsv", data_dir=d)
    assert e.value.line == 2
    bad.write_text("u1 1 x\n")
    with pytest.raises(UserError, match="not a CTM line"):
        kaldi_import(ctm=str(bad), out=tmp_path / "h3.tsv")
