"""`gendergap score asr|st|delta|compare` through the CLI: outputs, the results DB, bad input."""
import json
import subprocess
import sys

import jiwer
import pytest
import sacrebleu

from cli_helpers import one_error_line
from cli_helpers import run_text as run
from gendergap import cli
from scoring_data import make_corpus, write_inputs


@pytest.fixture()
def files(tmp_path):
    data = make_corpus(n_utts=120, n_speakers=8, seed=4)
    return data, write_inputs(tmp_path, *data)


def test_score_asr_writes_the_json_contract(files, tmp_path, capsys):
    (ids, refs, hyps, spk, gen), (r, h, t) = files
    rc, out, err = run(capsys, "score", "asr", "--refs", r, "--hyps", h, "--speakers", t,
                       "--bootstrap", 300, "--seed", 0, "--json", tmp_path / "a.json")
    assert rc == 0, err
    res = json.loads((tmp_path / "a.json").read_text())
    for key in ("metric", "all", "F", "M", "delta_rel", "n_utts", "n_speakers", "ci", "signature", "speaker_stats"):
        assert key in res
    assert res["metric"] == "wer" and res["all"] == 100 * jiwer.wer(refs, hyps)
    assert res["bootstrap"]["seed"] == 0 and "seed:0" in res["signature"]
    for k in ("F", "M", "delta_rel"):
        lo, hi = res["ci"][k]
        assert lo < res[k] < hi
    assert f"all {res['all']:.2f}" in out and "signature: wer|norm:none" in out


def test_score_st_bleu_and_chrf(files, tmp_path, capsys):
    (ids, refs, hyps, spk, gen), (r, h, t) = files
    rc, out, err = run(capsys, "score", "st", "--refs", r, "--hyps", h, "--speakers", t, "--json", tmp_path / "b.json")
    assert rc == 0, err
    res = json.loads((tmp_path / "b.json").read_text())
    assert res["metric"] == "bleu" and res["all"] == sacrebleu.corpus_bleu(hyps, [refs]).score
    assert "tok:13a" in res["signature"] and "case:mixed" in res["signature"]
    rc, out, err = run(capsys, "score", "st", "--metric", "chrf", "--refs", r, "--hyps", h, "--speakers", t)
    assert rc == 0 and f"{sacrebleu.corpus_chrf(hyps, [refs]).score:.2f}" in out


def test_db_rows_and_compare_from_json_and_from_db(files, tmp_path, capsys):
    (ids, refs, hyps, spk, gen), (r, h, t) = files
    worse = [x + " euh euh" for x in hyps]
    h2 = tmp_path / "worse.tsv"
    h2.write_text("".join(f"{i}\t{x}\n" for i, x in zip(ids, worse)), encoding="utf-8")
    db = tmp_path / "results.db"
    for name, hyp in (("A", h), ("B", h2)):
        rc, out, err = run(capsys, "score", "st", "--refs", r, "--hyps", hyp, "--speakers", t, "--bootstrap", 200,
                           "--json", tmp_path / f"{name}.json", "--db", db, "--checkpoint", name,
                           "--task", "st", "--lang-pair", "fr-en")
        assert rc == 0, err
    from analysis.store import ResultsStore
    with ResultsStore(db, readonly=True) as store:
        scores = store.scores(task="st")
        runs = store.runs()
    assert len(scores) == 8 and set(scores["gender"]) == {"F", "M", "all", "delta_rel"}
    assert set(scores["lang_pair"]) == {"fr-en"} and scores["ci_low"].notna().all()

    rc, out, err = run(capsys, "score", "compare", "--a", tmp_path / "A.json", "--b", tmp_path / "B.json",
                       "--resamples", 500, "--json", tmp_path / "cmp.json")
    assert rc == 0, err
    cmp = json.loads((tmp_path / "cmp.json").read_text())
    assert cmp["difference"]["all"] > 0 and cmp["p_value"]["all"] < 0.01
    assert cmp["sacrebleu_paired"]["bootstrap"]["p_value"] < 0.01  # sacrebleu's own test agrees
    rc, out, err = run(capsys, "score", "compare", "--db", db, "--run-a", int(runs["id"][0]),
                       "--run-b", int(runs["id"][1]), "--method", "ar", "--resamples", 1000)
    assert rc == 0, err
    assert "paired ar over speakers" in out and "delta_rel" in out
    h2.write_text("".join(f"{i}\tx\n" for i in ids), encoding="utf-8")  # B's hypotheses changed since
    rc, out, err = run(capsys, "score", "compare", "--db", db, "--run-a", int(runs["id"][0]),
                       "--run-b", int(runs["id"][1]))
    assert rc == 2 and "changed since it was scored" in one_error_line(err)


def test_delta_command(capsys):
    rc, out, err = run(capsys, "score", "delta", "--female", "22.3", "--male", "25.7")
    assert rc == 0 and out.strip() == "-14.17"
    rc, out, err = run(capsys, "score", "delta", "--female", "0", "--male", "0")
    assert rc == 2 and "undefined" in one_error_line(err)
    rc, out, err = run(capsys, "score", "delta", "--female", "-5", "--male", "2.5")  # printed -333 before
    assert rc == 2 and out == "" and "--female -5: a WER or BLEU score cannot be negative" in one_error_line(err)


def test_one_speaker_per_gender_says_the_interval_is_undefined(tmp_path, capsys):
    ids, refs, hyps, spk, gen = make_corpus(n_utts=20, n_speakers=2, seed=0)
    r, h, t = write_inputs(tmp_path, ids, refs, hyps, spk, gen)
    rc, out, err = run(capsys, "score", "asr", "--refs", r, "--hyps", h, "--speakers", t, "--json", tmp_path / "o.json")
    assert rc == 0, err
    res = json.loads((tmp_path / "o.json").read_text())
    assert res["ci"] == {"F": None, "M": None, "all": None, "delta_rel": None}
    assert "CI for F: undefined" in out and "[" not in out.splitlines()[0]  # no interval printed
    assert "CI is undefined" in err


def _bad(tmp_path, capsys, *extra, refs=None, hyps=None, table=None):
    ids, refs_, hyps_, spk, gen = make_corpus(n_utts=12, n_speakers=4, seed=0)
    r, h, t = write_inputs(tmp_path, ids, refs_, hyps_, spk, gen)
    if refs is not None:
        r.write_bytes(refs)
    if hyps is not None:
        h.write_bytes(hyps)
    if table is not None:
        t.write_text(table, encoding="utf-8")
    rc, out, err = run(capsys, "score", "asr", "--refs", r, "--hyps", h, "--speakers", t, *extra)
    assert rc == 2
    return one_error_line(err), (r, h, t)


def test_hypothesis_ids_missing_from_references(tmp_path, capsys):
    hyps = "".join(f"utt{i:04d}\tle chat\n" for i in range(12)) + "ghost1\tx\nghost2\ty\n"
    line, (r, h, t) = _bad(tmp_path, capsys, hyps=hyps.encode())
    assert f"{h}:13:" in line and "2 hypothesis id(s) are not in the references: 'ghost1', 'ghost2'" in line


def test_space_separated_hypotheses_are_named_as_such(tmp_path, capsys):
    hyps = "".join(f"utt{i:04d} le chat\n" for i in range(12))  # Kaldi-style "id text", no tab
    line, (r, h, t) = _bad(tmp_path, capsys, hyps=hyps.encode())
    assert f"{h}:1: no tab on this line of the hypotheses" in line and "id<TAB>text" in line


def test_duplicate_id_names_file_and_line(tmp_path, capsys):
    refs = "utt0000\ta\nutt0001\tb\nutt0000\tc\n"
    line, (r, h, t) = _bad(tmp_path, capsys, refs=refs.encode())
    assert f"{r}:3: duplicate id 'utt0000'" in line and "first on line 1" in line


def test_speaker_without_gender(tmp_path, capsys):
    ids, refs, hyps, spk, gen = make_corpus(n_utts=12, n_speakers=4, seed=0)
    header = "id\tspeaker\tgender\n"
    table = header + "".join(f"{i}\t{s}\t{'U' if s == 'spk2' else g}\n" for i, s, g in zip(ids, spk, gen))
    line, (r, h, t) = _bad(tmp_path, capsys, table=table)
    assert f"{t}:4: speaker 'spk2' has no gender (U)" in line


def test_non_utf8_file_names_the_line(tmp_path, capsys):
    refs = "utt0000\tle chat\nutt0001\tl'\xe9t\xe9\n".encode("latin-1")
    line, (r, h, t) = _bad(tmp_path, capsys, refs=refs)
    assert f"{r}:2: references file is not UTF-8" in line


def test_empty_file(tmp_path, capsys):
    line, (r, h, t) = _bad(tmp_path, capsys, hyps=b"\n\n")
    assert f"{h}:1: empty hypotheses file" in line


def test_missing_hypotheses_and_db_without_checkpoint(tmp_path, capsys):
    hyps = "".join(f"utt{i:04d}\tle chat\n" for i in range(10))
    line, _ = _bad(tmp_path, capsys, hyps=hyps.encode())
    assert "2 reference id(s) have no hypothesis: 'utt0010', 'utt0011'" in line
    line, _ = _bad(tmp_path, capsys, "--db", tmp_path / "x.db")
    assert "--db needs --checkpoint" in line


def test_real_process_exit_code_and_single_stderr_line(tmp_path):
    ids, refs, hyps, spk, gen = make_corpus(n_utts=6, n_speakers=2, seed=0)
    r, h, t = write_inputs(tmp_path, ids, refs, hyps, spk, gen)
    h.write_bytes(b"utt0000\ta\nutt0000\tb\n")
    proc = subprocess.run([sys.executable, "-m", "gendergap.cli", "score", "asr", "--refs", str(r), "--hyps", str(h),
                           "--speakers", str(t)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"gendergap: error: {h}:2: duplicate id 'utt0000' in the hypotheses (first on line 1) -- "
        "each id must appear once; drop or rename the repeated line"]


def test_gender_translation_leaves_are_under_score(capsys):
    with pytest.raises(SystemExit):
        cli.main(["score", "--help"])
    out = capsys.readouterr().out
    for leaf in ("asr", "st", "delta", "compare", "mustshe", "winomt"):
        assert leaf in out


def test_an_existing_directory_as_output_file_is_one_line(files, tmp_path, capsys):
    _, (r, h, t) = files
    (tmp_path / "out").mkdir()
    rc, out, err = run(capsys, "score", "asr", "--refs", r, "--hyps", h, "--speakers", t, "--json", tmp_path / "out")
    assert rc == 2 and "this is a directory, not a file name" in one_error_line(err)
    assert list((tmp_path / "out").iterdir()) == [] and not list(tmp_path.glob(".out.*"))  # nothing left behind


def test_a_failing_db_step_leaves_no_json_behind(files, tmp_path, capsys):
    import os
    import stat
    _, (r, h, t) = files
    db = tmp_path / "r.db"
    from analysis.store import ResultsStore
    ResultsStore(db).close()
    os.chmod(db, stat.S_IRUSR)  # a protected results DB
    out = tmp_path / "asr.json"
    rc, _, err = run(capsys, "score", "asr", "--refs", r, "--hyps", h, "--speakers", t, "--json", out,
                     "--db", db, "--checkpoint", "F-tiny")
    assert rc == 2 and "read-only" in one_error_line(err)
    assert not out.exists()


def test_score_asr_cer_equals_jiwer_cer_and_refuses_a_translation_metric(files, tmp_path, capsys):
    """CER is WER's additive rows over characters: the corpus figure equals jiwer.cer on the whole
    set (and per gender), never a mean of per-utterance rates; a metric of the other leaf is one line."""
    (ids, refs, hyps, spk, gen), (r, h, t) = files
    rc, out, err = run(capsys, "score", "asr", "--metric", "cer", "--refs", r, "--hyps", h, "--speakers", t,
                       "--bootstrap", 0, "--json", tmp_path / "c.json")
    assert rc == 0, err
    res = json.loads((tmp_path / "c.json").read_text())
    assert res["metric"] == "cer" and res["all"] == pytest.approx(100 * jiwer.cer(refs, hyps), abs=1e-9)
    female = [i for i, g in enumerate(gen) if g == "F"]
    assert res["F"] == pytest.approx(100 * jiwer.cer([refs[i] for i in female], [hyps[i] for i in female]), abs=1e-9)
    assert res["signature"].startswith("cer|norm:none|jiwer:") and res["all"] != pytest.approx(
        100 * sum(jiwer.cer(a, b) for a, b in zip(refs, hyps)) / len(refs))
    rc, out, err = run(capsys, "score", "asr", "--metric", "bleu", "--refs", r, "--hyps", h, "--speakers", t)
    assert rc == 2 and "not a metric of `score asr`" in one_error_line(err) and "wer, cer" in err


def test_a_metric_added_to_the_registry_is_offered_and_scored(files, monkeypatch, capsys, tmp_path):
    """docs/architecture.md's recipe for a metric, done from outside the package: a class over
    additive per-utterance rows, added to analysis.metrics.METRICS; `score st --metric` takes it and
    its speaker-level CIs come from the same resampling of rows."""
    import numpy as np

    from analysis import metrics

    class LengthRatio:
        """Hypothesis characters per reference character, in percent (a toy, but additive)."""
        name, kind, stat_names, higher_is_better = "len-ratio", "st", ("hyp_chars", "ref_chars"), True
        signature = "len-ratio|toy"

        def utterance_stats(self, refs, hyps):
            return np.array([[len(h), len(r)] for r, h in zip(refs, hyps)], dtype=np.int64)

        def score(self, stats):
            return float(self.scores(np.asarray(stats, dtype=float)[None, :])[0])

        def scores(self, stats):
            stats = np.asarray(stats, dtype=float)
            return 100.0 * stats[:, 0] / stats[:, 1]

        def same_references(self, a, b):
            return bool(np.array_equal(np.asarray(a)[:, 1], np.asarray(b)[:, 1]))

    monkeypatch.setitem(metrics.METRICS, "len-ratio", LengthRatio)
    (ids, refs, hyps, spk, gen), (r, h, t) = files
    rc, out, err = run(capsys, "score", "st", "--metric", "len-ratio", "--refs", r, "--hyps", h, "--speakers", t,
                       "--bootstrap", 200, "--seed", 0, "--json", tmp_path / "l.json")
    assert rc == 0, err
    res = json.loads((tmp_path / "l.json").read_text())
    assert res["all"] == pytest.approx(100 * sum(map(len, hyps)) / sum(map(len, refs)))
    assert res["ci"]["all"][0] < res["all"] < res["ci"]["all"][1] and res["signature"].startswith("len-ratio|toy")


def test_the_score_help_names_every_metric_of_its_kind(capsys):
    """`score asr|st --help` names its metrics without importing them (a fast --help): the names
    it shows are the registry's, so a metric added to METRICS and not to the help fails here."""
    from analysis.metrics import metrics_for

    for kind in ("asr", "st"):
        with pytest.raises(SystemExit):
            cli.main(["score", kind, "--help"])
        shown = capsys.readouterr().out
        assert "--metric {" + ",".join(metrics_for(kind)) + "}" in shown.replace("\n", " ").replace("  ", " ")
