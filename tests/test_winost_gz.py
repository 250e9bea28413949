"""WinoST as downloaded: gzipped 48 kHz wavs (``0001.wav.gz``) with macOS litter, indexed as they
are (durations from the decompressed headers) and read where a model reads audio (the feature
store's read_segment, the SpeechBrain CSV datasets, speed perturbation), with the same samples as
the unpacked wav."""
import gzip

import numpy as np
import pytest
import soundfile as sf

from corpora.readers import AudioCheck, read_winost
from corpora.table import read_table
from fixtures_corpora import make_winost_gz
from gendergap import cli
from ssl_pretrain.features import read_segment

AT_48K = AudioCheck(sample_rates=(48000,), progress=False)


def test_corpus_index_reads_wav_gz_as_downloaded(tmp_path, capsys):
    root = make_winost_gz(tmp_path)
    out = tmp_path / "winost.tsv"
    rc = cli.main(["corpus", "index", "--kind", "winost", "--root", str(root), "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    t = read_table(out).set_index("id")
    assert [p.rsplit("/", 1)[1] for p in t["audio"]] == ["0001.wav.gz", "0002.wav.gz", "0003.wav.gz"]
    assert "__MACOSX" not in "".join(t["audio"]) and "._" not in "".join(t["audio"])
    # durations from the decompressed headers: make_winost writes 1.1, 1.2, 1.3 s at 48 kHz
    assert [float(d) for d in t["duration"]] == pytest.approx([1.1, 1.2, 1.3], abs=1e-4)
    assert set(t["sample_rate"].astype(int)) == {48000}
    assert not list((root / "wav").glob("*.wav"))   # nothing unpacked beside the corpus


def test_a_plain_wav_wins_over_its_gz(tmp_path):
    root = make_winost_gz(tmp_path)
    (root / "wav" / "0002.wav").write_bytes(gzip.decompress((root / "wav" / "0002.wav.gz").read_bytes()))
    t = read_winost(root, check=AT_48K).set_index("id")
    assert t.loc["winost_0002", "audio"].endswith("0002.wav") and t.loc["winost_0001", "audio"].endswith(".wav.gz")


def test_feature_store_reads_a_gz_row_like_the_unpacked_wav(tmp_path):
    root = make_winost_gz(tmp_path)
    gz = root / "wav" / "0003.wav.gz"
    plain = tmp_path / "0003.wav"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    for offset, duration in ((0.0, 0.0), (0.25, 0.5)):
        a = read_segment(str(gz), offset, duration, 16000)
        b = read_segment(str(plain), offset, duration, 16000)
        assert len(a) == len(b) == (int(round(1.3 * 16000)) if duration == 0 else 8000)
        assert np.array_equal(a, b) and np.abs(a).max() > 0.05   # the tone, not silence


def test_a_truncated_gz_is_one_error_naming_the_file_and_line(tmp_path, capsys):
    root = make_winost_gz(tmp_path)
    gz = root / "wav" / "0002.wav.gz"
    gz.write_bytes(gz.read_bytes()[:200])
    out = tmp_path / "w.tsv"
    rc = cli.main(["corpus", "index", "--kind", "winost", "--root", str(root), "--out", str(out)])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1, err
    assert "0002.wav.gz" in err[0] and "en.txt:2" in err[0]
    assert not out.exists()


def test_speechbrain_datasets_read_a_gz_row_like_the_unpacked_wav(tmp_path):
    """A SpeechBrain CSV row pointing at a .wav.gz (a cut of it, at 48 kHz) gives the fine-tuning and
    frozen recipes the same 16 kHz samples as the unpacked wav, and so does speed perturbation."""
    import pandas as pd

    from downstream_asr.data import audio_dataset
    from downstream_asr.perturb import speed_perturbed
    from downstream_asr.text import build_vocab

    root = make_winost_gz(tmp_path)
    gz = root / "wav" / "0003.wav.gz"
    plain = tmp_path / "0003.wav"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    rows = pd.DataFrame({"ID": ["gz", "plain"], "duration": [0.5, 0.5], "wav": [str(gz), str(plain)],
                         "start": [12000, 12000], "stop": [36000, 36000], "wrd": ["le chat"] * 2,
                         "spk_id": ["s"] * 2, "text": ["le chat"] * 2})
    ds = audio_dataset(rows, build_vocab(rows["text"]))
    a, b = ds[0]["sig"].numpy(), ds[1]["sig"].numpy()
    assert len(a) == len(b) == 8000 and np.array_equal(a, b) and np.abs(a).max() > 0.05
    csv = tmp_path / "train.csv"
    rows.to_csv(csv, index=False)
    fast, _ = speed_perturbed(rows, csv, 1.1, tmp_path / "cache", 16000)
    sp = [sf.read(w)[0] for w in fast["wav"]]
    assert np.array_equal(sp[0], sp[1]) and len(sp[0]) == pytest.approx(8000 / 1.1, abs=2)
