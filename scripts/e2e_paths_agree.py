"""One model, one number: a study's fine-tuned runs decoded four ways give the same hypotheses.

    .venv/bin/python scripts/e2e_paths_agree.py study            # after `make study`

For each ``STUDY/asr-e2e/<checkpoint>`` run: the study's own decode (test.hyp.tsv), `asr transcribe`
on the run directory, `asr export` of it then `asr transcribe` on the export, and SpeechBrain's own
EncoderASR on the export in a fresh process where no gendergap package can be imported (one
utterance per call). Prints, per path, how many of the test hypotheses equal the study's and the
WER all / F / M it scores; exits 1 if any path differs.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


def tsv(path) -> dict[str, str]:
    return dict(line.split("\t", 1) for line in Path(path).read_text(encoding="utf-8").splitlines())


def wer(hyps: dict, refs: dict, genders: dict) -> str:
    import jiwer
    out = []
    for g in ("all", "F", "M"):
        ids = [i for i in refs if g == "all" or genders[i] == g]
        out.append(100 * jiwer.wer([refs[i] for i in ids], [hyps[i] for i in ids]))
    return " / ".join(f"{x:.2f}" for x in out)


def paths_of(run: Path, table: str, work: Path) -> dict[str, dict]:
    from downstream_asr.export import export_run
    from downstream_asr.transcribe import load_model, select_rows, transcribe_table
    from test_transcribe import ENV, FRESH_ONE_BY_ONE
    rows = select_rows(table, "test", "synth-fr")
    got = {"study decode": tsv(run / "test.hyp.tsv")}
    export = work / f"{run.name}-export"
    export_run(run, export)
    for label, folder in (("transcribe(run dir)", run), ("transcribe(export)", export)):
        model = load_model(folder)
        meta = transcribe_table(model, rows, work / label.replace("(", "-").replace(")", ""), progress=False,
                                text_norm=model.info.get("text_norm"))
        got[label] = tsv(meta["hyps"])
    wavs = dict(zip(rows["id"], rows["audio"]))
    fresh = subprocess.run([sys.executable, "-I", "-c", FRESH_ONE_BY_ONE, str(export), json.dumps(wavs), str(REPO)],
                           env=ENV, capture_output=True, text=True, cwd=work, check=True)
    sb = json.loads(fresh.stdout.splitlines()[-1])
    # EncoderASR's raw text, normalised as gendergap writes hypotheses (the run's text_norm)
    from downstream_asr.text import TextNorm, normalise_text
    norm = TextNorm.from_dict(json.loads((run / "run.json").read_text())["text_norm"])
    got["SpeechBrain EncoderASR(export)"] = {i: normalise_text(t, norm) for i, t in sb.items()}
    return got


def main(study: str) -> int:
    from corpora.utterances import UtteranceTable
    study = Path(study)
    table = str(study / "corpus" / "utterances.tsv")
    df = UtteranceTable.load(table).rows
    genders = dict(zip(df["id"], df["gender"]))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for run in sorted((study / "asr-e2e").iterdir()):
            if not (run / "test.hyp.tsv").is_file():
                continue
            got = paths_of(run, table, Path(tmp))
            refs = tsv(run / "test.ref.tsv")
            base = got["study decode"]
            for label, hyps in got.items():
                same = sum(hyps.get(i) == h for i, h in base.items())
                ok &= same == len(base)
                print(f"{run.name:8s} {label:32s} {same}/{len(base)} equal  WER all/F/M {wer(hyps, refs, genders)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "study"))
