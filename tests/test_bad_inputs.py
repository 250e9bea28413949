"""Bad inputs the first pass of issue 19 left open: unbalanced quotes and huge fields in a generic
CSV/TSV, NaN/Inf samples in a float wav, WinoST's 48 kHz wavs with no extra flag, Kaldi pipe
entries reaching the commands that read audio, a segment past the end in a generic table, a
writer killed mid-write, an existing directory as --out. Each test builds the layout on disk and
runs the real CLI (docs/bad-inputs.md lists them)."""
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import soundfile as sf

from cli_helpers import run_lines as run
from corpora.base.errors import UserError
from corpora.table import read_table
from corpora.utterances import UtteranceTable
from fixtures_corpora import make_generic, make_kaldi, make_winost, write_audio

MAP = "id=utt_id,audio=path,speaker=spk,gender=sex,text=transcript,offset=start,duration=dur"
HEADER = "utt_id,path,spk,sex,transcript,start,dur,age\n"


def user_error(capsys, out_file, argv, *needles):
    rc, _, err = run(capsys, *argv)
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("gendergap: error: "), err[0]
    for n in needles:
        assert n in err[0], err[0]
    assert not out_file.exists() and not list(out_file.parent.glob(f".{out_file.name}.*"))
    return err[0]


def index_generic(csv, out):
    return ["corpus", "index", "--kind", "generic", "--root", csv, "--map", MAP, "--out", out, "--no-progress"]


# ------------------------------------------------------------------ unbalanced quotes, huge fields

def test_unbalanced_quote_that_swallows_a_row_is_refused(tmp_path, capsys):
    csv = make_generic(tmp_path)
    # Row 2 opens a quote it never closes; row 3's stray closing quote ends the field just before a
    # comma, so csv reads ONE row with the right field count: row 3 vanished with exit 0.
    csv.write_text(HEADER + 'u1,wav/long.wav,A,Female,"oui, bien sûr,0.0,1.5,30\n'
                   'u2,wav/long.wav,A,Female,deuxième",2.0,1.5,30\n'
                   "u3,wav/short.wav,B,Male,court,0,1.0,41\n", encoding="utf-8")
    out = tmp_path / "o.tsv"
    user_error(capsys, out, index_generic(csv, out), f"{csv}:2:", "quoted field", "unbalanced quote",
               "runs over line 3")


def test_unclosed_quote_and_text_after_a_closing_quote(tmp_path, capsys):
    csv = make_generic(tmp_path)
    out = tmp_path / "o.tsv"
    # A quote never closed: the field runs to the end of the file.
    csv.write_text(HEADER + "u1,wav/long.wav,A,Female,oui,0.0,1.5,30\n"
                   "u2,wav/long.wav,A,Female,deuxième,2.0,1.5,30\n"
                   'u3,wav/short.wav,B,Male,"court,0,1.0,41\n', encoding="utf-8")
    user_error(capsys, out, index_generic(csv, out), f"{csv}:4:", "quoted field", "not closed")
    # A 12" screen: a quoted field closed in the middle of the text.
    csv.write_text(HEADER + 'u1,wav/long.wav,A,Female,"un écran 12" plat,0.0,1.5,30\n', encoding="utf-8")
    user_error(capsys, out, index_generic(csv, out), f"{csv}:2:", "after a closing quote", '""')


def test_a_quoted_field_over_two_lines_is_still_read(tmp_path, capsys):
    csv = make_generic(tmp_path)
    csv.write_text(HEADER + 'u1,wav/long.wav,A,Female,"oui,\nbien sûr",0.0,1.5,30\n'
                   "u3,wav/short.wav,B,Male,court,0,1.0,41\n", encoding="utf-8")
    out = tmp_path / "o.tsv"
    rc, _, err = run(capsys, *index_generic(csv, out))
    assert rc == 0, err
    assert list(read_table(out)["text"]) == ["oui, bien sûr", "court"]


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_a_field_over_128_kb_is_read(tmp_path, capsys, suffix):
    # A whole-talk transcript can pass csv's default field_size_limit (131072 characters).
    d = make_generic(tmp_path).parent
    long_text = " ".join(["mot"] * 60000)                       # 240 KB
    sep = "," if suffix == ".csv" else "\t"
    meta = d / f"meta{suffix}"
    meta.write_text(sep.join(["utt_id", "path", "spk", "sex", "transcript"]) + "\n"
                    + sep.join(["u1", "wav/long.wav", "A", "Female", long_text]) + "\n", encoding="utf-8")
    out = tmp_path / "o.tsv"
    rc, _, err = run(capsys, "corpus", "index", "--kind", "generic", "--root", meta, "--map",
                     "id=utt_id,audio=path,speaker=spk,gender=sex,text=transcript", "--out", out)
    assert rc == 0, err
    assert read_table(out)["text"][0] == long_text


def test_an_unbalanced_quote_swallowing_a_big_file_is_the_quote_error(tmp_path, capsys):
    csv = make_generic(tmp_path)
    rows = "".join(f"u{i},wav/long.wav,A,Female,texte {i},0.0,1.0,30\n" for i in range(3, 5000))
    csv.write_text(HEADER + 'u1,wav/long.wav,A,Female,"oui,0.0,1.5,30\n' + rows, encoding="utf-8")
    out = tmp_path / "o.tsv"
    user_error(capsys, out, index_generic(csv, out), f"{csv}:2:", "quoted field", "not closed")


# ------------------------------------------------------------------ NaN / Inf samples

@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_float_wav_with_nan_or_inf_is_refused(tmp_path, capsys, bad):
    csv = make_generic(tmp_path)
    x = (0.1 * np.sin(np.arange(16000) / 10.0)).astype("float32")
    x[8000] = bad
    sf.write(csv.parent / "wav" / "short.wav", x, 16000, subtype="FLOAT")
    out = tmp_path / "o.tsv"
    user_error(capsys, out, index_generic(csv, out), f"{csv}:4:", "short.wav", "NaN or Inf samples",
               "first at 0.500 s")


def test_float_wav_without_nan_is_indexed(tmp_path, capsys):
    csv = make_generic(tmp_path)
    write_audio(csv.parent / "wav" / "short.wav", 1.0)
    x, sr = sf.read(csv.parent / "wav" / "short.wav", dtype="float32")
    sf.write(csv.parent / "wav" / "short.wav", x, sr, subtype="DOUBLE")
    out = tmp_path / "o.tsv"
    rc, _, err = run(capsys, *index_generic(csv, out))
    assert rc == 0, err
    assert read_table(out).set_index("id").loc["u3", "duration"] == 1.0


# ------------------------------------------------------------------ WinoST at 48 kHz, as released

def winost_help_example():
    from gendergap.cmd_corpus import INDEX_DESCRIPTION
    lines = [ln.strip() for ln in INDEX_DESCRIPTION.splitlines() if "--kind winost" in ln and "gendergap" in ln]
    assert len(lines) == 1, "the --help has one WinoST example"
    return shlex.split(lines[0])[1:]                            # without the program name


def test_winost_48k_help_example_runs_as_written(tmp_path, capsys, monkeypatch):
    make_winost(tmp_path)                                     # tmp_path/winost: en.txt + wav/N.wav at 48 kHz
    monkeypatch.chdir(tmp_path)                               # the example's relative paths
    argv = winost_help_example()
    assert "--sample-rates" not in argv
    rc, _, err = run(capsys, *argv)
    assert rc == 0, err
    t = read_table(tmp_path / argv[argv.index("--out") + 1])
    assert set(t["sample_rate"]) == {48000} and len(t) == 3 and set(t["gender"]) == {"F"}
    # Where audio is read for a 16 kHz model, it is resampled to the model's rate.
    from ssl_pretrain.features import read_segment
    x = read_segment(t["audio"][0], 0.0, float(t["duration"][0]), 16000)
    assert x.dtype == np.float32 and abs(len(x) - 16000 * t["duration"][0]) <= 1


# ------------------------------------------------------------------ Kaldi pipes downstream

def piped_kaldi_table(tmp_path, capsys):
    d = make_kaldi(tmp_path)
    (d / "wav.scp").write_text("rec1 sox audio/rec1.wav -t wav -r 16000 - |\nrec2 audio/rec2.flac\n")
    (d / "spk2gender").write_text("s1 f\ns2 m\ns3 m\n")
    table = tmp_path / "k.tsv"
    rc, _, err = run(capsys, "corpus", "index", "--kind", "kaldi", "--root", d, "--out", table, "--no-progress")
    assert rc == 0, err
    return table


def test_piped_audio_is_one_clear_line_where_audio_is_read(tmp_path, capsys):
    table = piped_kaldi_table(tmp_path, capsys)
    loaded = UtteranceTable.load(table)   # a pipe row is kept as given: it can be indexed and counted
    df = loaded.rows
    with pytest.raises(UserError) as e:
        loaded.audio_rows()
    line = str(e.value)
    assert line.startswith(f"{table}:2: ") and "piped command" in line and "s1-rec1-000" in line
    assert "format_wav_scp.sh" in line                      # what to do: dump the audio to files
    out = tmp_path / "m"
    rc, _, err = run(capsys, "manifest", "build", "--table", table, "--gender", "any", "--format", "fairseq",
                     "--out", out)
    assert rc == 2 and len(err) == 1, err
    assert "piped command" in err[0] and f"{table}:2:" in err[0]
    assert not out.exists() and not list(tmp_path.glob(".m.*"))
    # Rows from plain files still resolve.
    plain = UtteranceTable(df[df["audio"].str.endswith(".flac")], loaded.sources).audio_rows()
    assert plain["audio"].str.endswith("rec2.flac").all() and plain["audio"].map(os.path.isabs).all()


# ------------------------------------------------------------------ segment past the end, generic

def test_generic_segment_past_the_end_is_an_error(tmp_path, capsys):
    csv = make_generic(tmp_path)
    csv.write_text(csv.read_text().replace("u3,wav/short.wav,B,Male,court,0,1.0,41",
                                           "u3,wav/short.wav,B,Male,court,0,3.0,41"), encoding="utf-8")
    out = tmp_path / "o.tsv"
    user_error(capsys, out, index_generic(csv, out), f"{csv}:4:", "0.00-3.00 s runs past the end", "(1.00 s)")


# ------------------------------------------------------------------ interrupted writes, --out a directory

def test_a_writer_killed_mid_write_leaves_the_old_table(tmp_path):
    out = tmp_path / "t.tsv"
    out.write_text("the old table\n")
    started = tmp_path / "started"
    child = textwrap.dedent(f"""
        import time
        from corpora.base.atomic import atomic_open
        with atomic_open({str(out)!r}) as f:
            f.write("half a new table\\n")
            f.flush()
            open({str(started)!r}, "w").close()
            time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", child])
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert out.read_text() == "the old table\n"               # never half of the new one


def test_an_existing_directory_as_out_is_one_line(tmp_path, capsys):
    csv = make_generic(tmp_path)
    out = tmp_path / "tables"
    out.mkdir()
    rc, _, err = run(capsys, *index_generic(csv, out))
    assert rc == 2 and len(err) == 1 and "this is a directory, not a file name" in err[0], err
    assert list(out.iterdir()) == []
