"""`gendergap st train` + `st decode` end to end on CPU: a random-init wav2vec 2.0 as the frozen
feature extractor, the tiny preset for a couple of fairseq updates, resume, checkpoint
averaging, beam-5 decoding, BLEU F/M/all in the results store."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece as spm
import torch
from sacrebleu.metrics import BLEU

from analysis.store import ResultsStore
from corpora.table import read_table
from gendergap.cli import main
from st_helpers import tiny_wav2vec, toy_rows, write_toy_table, write_wavs_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))   # bench_study_stages.st_data


@pytest.mark.slow
def test_train_resume_average_decode_score(tmp_path):
    rows = toy_rows()
    write_wavs_for(tmp_path, rows)
    table = write_toy_table(tmp_path, rows)
    model = tiny_wav2vec(tmp_path / "w2v")
    out = tmp_path / "st" / "toy.fr-en"
    train = ["st", "train", "--ckpt", str(model), "--layer", "1", "--train", str(table), "--train-split", "train",
             "--valid", str(table), "--valid-split", "valid", "--src", "fr", "--tgt", "en", "--out", str(out),
             "--feature-store", str(tmp_path / "store"), "--preset", "tiny", "data.vocab_size=40",
             "no-epoch-checkpoints=false"]
    assert main(train + ["max-epoch=1"]) == 0
    assert (out / "checkpoints" / "checkpoint1.pt").is_file()
    # features come from the store (train and valid rows), where other pairs and tasks find them
    entries = [json.loads(p.read_text()) for p in (tmp_path / "store").rglob("entry.json")]
    assert sorted(e["rows"] for e in entries) == [4, 16] and all(e["layers"] == [1] for e in entries)

    # the same command with a larger budget resumes from checkpoint_last.pt
    assert main(train + ["max-epoch=2"]) == 0
    log = (out / "train.log").read_text()
    assert "Loaded checkpoint" in log and (out / "checkpoints" / "checkpoint2.pt").is_file()
    meta = json.loads((out / "st.json").read_text())
    assert meta["resumed"] and meta["averaged"] == ["checkpoint1.pt", "checkpoint2.pt"]
    assert meta["feature_dim"] == 32 and meta["data"]["rows"] == {"train": 16, "valid": 4}
    # the same finished command again does not start fairseq
    assert main(train + ["max-epoch=2"]) == 0
    assert (out / "train.log").read_text() == log

    # averaged weights = mean of the kept epoch checkpoints
    ck = [torch.load(out / "checkpoints" / f"checkpoint{e}.pt", weights_only=False)["model"] for e in (1, 2)]
    avg = torch.load(out / "checkpoint_avg.pt", weights_only=False)["model"]
    key = "decoder.layers.0.fc1.weight"
    assert torch.allclose(avg[key], (ck[0][key] + ck[1][key]) / 2, atol=1e-6)
    assert not torch.allclose(ck[0][key], ck[1][key])
    # the tiny preset trains with fairseq's auxiliary CTC loss on the encoder (without it the
    # decoder learned only a language model in a CPU budget): its projection is averaged and kept
    assert "ctc_loss" in log and "encoder.ctc_proj.weight" in avg
    assert torch.allclose(avg["encoder.ctc_proj.weight"],
                          (ck[0]["encoder.ctc_proj.weight"] + ck[1]["encoder.ctc_proj.weight"]) / 2, atol=1e-6)

    # a MuST-SHE-style definition of the test rows (the gender set scores the same hypotheses)
    test_rows = [r for r in rows if r["split"] == "test"]
    mustshe = tmp_path / "mustshe.tsv"
    mustshe.write_text("ID\tREF\tWRONG-REF\tSPEAKER\tCATEGORY\tGENDERTERMS\n" + "".join(
        f"{r['id']}\t{r['tgt_text_en']}\t{r['tgt_text_en']}\t{'She' if r['gender'] == 'F' else 'He'}\t"
        f"1{r['gender']}\tthe cat\n" for r in test_rows), encoding="utf-8")

    hyp, db = tmp_path / "test.hyp", tmp_path / "results.db"
    assert main(["st", "decode", "--model", str(out), "--test", str(table), "--test-split", "test",
                 "--out", str(hyp), "--beam", "5", "--db", str(db), "--bootstrap", "50",
                 "--mustshe", str(mustshe)]) == 0
    hyps = dict(line.split("\t", 1) for line in hyp.read_text().splitlines())
    test_ids = [r["id"] for r in rows if r["split"] == "test"]
    assert sorted(hyps) == sorted(test_ids)

    # detokenised: each text is sentencepiece's decoding of the beam-5 pieces fairseq produced
    generate = (tmp_path / "test.hyp.work" / "generate" / "generate-test.txt").read_text().splitlines()
    assert "beam=5" in (tmp_path / "test.hyp.work" / "generate.log").read_text().replace("'beam': 5", "beam=5")
    sp = spm.SentencePieceProcessor(model_file=str(out / "data" / "spm_unigram40.model"))
    pieces = {int(l.split("\t")[0][2:]): l.split("\t")[2] for l in generate if l.startswith("H-")}
    assert len(pieces) == len(test_ids)
    for i, uid in enumerate(test_ids):
        assert "▁" not in hyps[uid]
        assert hyps[uid] == sp.decode_pieces(pieces[i].split()).strip()

    # BLEU rows F / M / all in the store equal sacreBLEU on the detokenised hypotheses
    with ResultsStore(db) as store:
        scores = store.scores(task="st")
    got = {r.gender: r.value for r in scores.itertuples() if r.metric == "bleu"}
    assert {"F", "M", "all"} <= set(got)
    assert set(scores["lang_pair"]) == {"fr-en"} and set(scores["checkpoint"]) == {"w2v"}
    t = read_table(table).set_index("id")
    for gender in ("F", "M", "all"):
        ids = [i for i in test_ids if gender == "all" or t.loc[i, "gender"] == gender]
        want = BLEU(tokenize="13a").corpus_score([hyps[i] for i in ids], [[t.loc[i, "tgt_text_en"] for i in ids]])
        assert got[gender] == pytest.approx(want.score, abs=1e-6)
    result = json.loads((tmp_path / "test.hyp.json").read_text())
    assert result["bleu"]["n_speakers"] == {"F": 2, "M": 2, "all": 4}
    with ResultsStore(db) as store:
        ms = store.scores(task="mustshe")
    assert {"coverage", "accuracy", "bleu"} <= set(ms["metric"]) and set(ms["lang_pair"]) == {"fr-en"}
    found = sum(("the" in h.lower().split()) or ("cat" in h.lower().split()) for h in hyps.values())
    assert result["mustshe"]["counts"]["found"] == found and result["mustshe"]["counts"]["terms"] == len(test_rows)


@pytest.mark.slow
def test_decoding_flags_of_a_gpu_fp16_run_work_with_fairseq_generate(tmp_path):
    """fairseq-generate's --fp16 halves the model but feeds it the data's fp32 features ("Input
    type (float) and bias type (c10::Half) should be the same"): `st decode` of an fp16 run failed
    so on an H100. A GPU fp16 run's decoding flags, run here on the CPU (the clash is the same),
    must decode; the same flags plus --fp16 show the failure they avoid."""
    from corpora.base.errors import UserError
    from downstream_st.decode import decode_st
    from downstream_st.prepare import FeatureSource, prepare_rows
    from downstream_st.presets import on_device
    from downstream_st.train import read_model_meta
    from ssl_pretrain.model_choice import ModelChoice

    rows = toy_rows()
    write_wavs_for(tmp_path, rows)
    table = write_toy_table(tmp_path, rows)
    out, store = tmp_path / "st", tmp_path / "store"
    assert main(["st", "train", "--ckpt", str(tiny_wav2vec(tmp_path / "w2v")), "--layer", "1", "--train", str(table),
                 "--train-split", "train", "--valid", str(table), "--valid-split", "valid", "--src", "fr",
                 "--tgt", "en", "--out", str(out), "--feature-store", str(store), "--preset", "tiny",
                 "data.vocab_size=40", "max-update=2"]) == 0
    meta = read_model_meta(out)
    gpu = on_device(meta["preset"], "cuda:0", "fp16")
    assert gpu["train"]["fp16"] is True
    meta["preset"] = {**gpu, "decode": {**gpu["decode"], "cpu": True}, "gpu": None}   # no GPU here
    ssl = ModelChoice.resolve(meta["ssl_checkpoint"], meta.get("registry"))
    test = prepare_rows(table, FeatureSource(ssl, layer=meta["layer"], store=str(store)),
                        split="test", src="fr", expected_dim=int(meta["feature_dim"]), progress=False)
    run = decode_st(out, meta, test, tmp_path / "gpu.hyp")
    assert "--fp16" not in run["command"]
    assert len((tmp_path / "gpu.hyp").read_text().splitlines()) == len(test) == 8
    with pytest.raises(UserError, match="fairseq exited with code 1"):
        decode_st(out, meta, test, tmp_path / "fp16.hyp", decode_flags={"fp16": True})
    assert "c10::Half" in (tmp_path / "fp16.hyp.work" / "generate.log").read_text()


def test_tiny_preset_validates_from_the_first_averaged_checkpoint():
    """fairseq validates at every save (every 25 updates); the tiny preset's losses before the
    checkpoints averaged at the end are only logged, so it validates and saves from the first of them."""
    from downstream_st.presets import apply_overrides, load_preset, validation_start
    tiny = load_preset("tiny")
    assert tiny["validate_from_average"] is True
    # 800 updates, saves every 25, the last 4 averaged: 725, 750, 775, 800
    assert validation_start(apply_overrides(tiny, ["max-update=800"])) == 725
    assert validation_start(apply_overrides(tiny, ["max-update=50"])) == 0
    assert validation_start(apply_overrides(tiny, ["max-update=800", "validate_from_average=false"])) is None
    assert validation_start(load_preset("xs")) is None      # the reference recipe validates as fairseq does
    assert validation_start(apply_overrides(tiny, ["max-update=800", "save-interval-updates=0"])) is None


@pytest.mark.parametrize("entry, flushed", [("ssl_pretrain.fairseq_entry", True), ("fairseq_cli.train", False)])
def test_fairseq_processes_flush_subnormal_floats(entry, flushed):
    """Every fairseq process (ST training and decoding, pretraining) starts through fairseq_entry,
    which flushes subnormal floats to zero: FBANK ST trained 2.5x slower on them. A plain process
    keeps them, so the test sees the entry's doing, not the machine's default."""
    probe = f"import {entry}, torch; print(float(torch.tensor([3e-39]) * 2))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    value = float(out.strip().splitlines()[-1])
    assert (value == 0.0) if flushed else value == pytest.approx(6e-39, rel=1e-3)


@pytest.mark.slow
def test_an_st_run_started_warm_is_the_plain_run(tmp_path, monkeypatch):
    """A sweep's ST job starts fairseq-train and fairseq-generate from the warm server (forked from
    a process that imported fairseq once; ssl_pretrain.run.start_fairseq(warm=True)). Forked from a
    server whose SpeechBrain import configured the root logger, fairseq must still configure its own
    (its log lines are read back), train the same model and decode the same text; its CPU time
    reaches the job through the job's ledger."""
    from bench_study_stages import st_data

    from downstream_st.decode import decode_st
    from downstream_st.presets import apply_overrides, load_preset
    from downstream_st.train import read_model_meta, train_st
    from gendergap.warm import LEDGER_ENV, Server, ledger_seconds
    from ssl_pretrain.run import FAST_PYTHON_ENV

    train, valid = st_data(tmp_path, n_train=40, n_valid=8, dim=16)
    preset = apply_overrides(load_preset("tiny"), ["max-update=6", "data.vocab_size=30", "save-interval-updates=3"])
    runs = {}
    with Server(tmp_path / "server.log", preload=("fairseq",)) as server:
        for way in ("plain", "warm"):
            if way == "warm":
                monkeypatch.setenv(FAST_PYTHON_ENV, server.python_command)
            monkeypatch.setenv(LEDGER_ENV, str(tmp_path / f"ledger-{way}"))
            out = tmp_path / way
            train_st(train, valid, out, preset=preset, src_lang="fr", tgt_lang="en", feature_dim=16)
            hyps = decode_st(out, read_model_meta(out), valid, out / "valid.hyp", split="valid")["hyps"]
            runs[way] = (torch.load(out / "checkpoint_avg.pt", weights_only=False)["model"],
                         open(hyps).read(), (out / "train.log").read_text())
    (plain, plain_hyps, plain_log), (warm, warm_hyps, warm_log) = runs["plain"], runs["warm"]
    assert plain.keys() == warm.keys() and all(torch.equal(plain[k], warm[k]) for k in plain)
    assert warm_hyps == plain_hyps and len(warm_hyps.splitlines()) == 8
    assert "(warm)" in warm_log and "(warm)" not in plain_log
    def summaries(log):   # fairseq's own format, the job reads its progress from: per-epoch losses
        fields = [dict(f.split(" ", 1) for f in ln.split(" | ")[3:]) for ln in log.splitlines()
                  if "| INFO | train |" in ln]
        return [(f["epoch"], f["loss"], f["ctc_loss"], f["num_updates"]) for f in fields]
    assert "| INFO | fairseq_cli.train |" in warm_log
    assert len(summaries(warm_log)) >= 2 and summaries(warm_log) == summaries(plain_log)
    assert not (tmp_path / "ledger-plain").exists()       # plain fairseq is the job's own child
    assert ledger_seconds(tmp_path / "ledger-warm") > 0.5   # train and generate, one line each
    assert len((tmp_path / "ledger-warm").read_text().split()) == 2
