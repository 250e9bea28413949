"""WinoMT scoring speed, sentences per second: `--method aligned` (eflomal + spaCy) and `--method
lexicon`, and the aligned method's spaCy step against the naive way (one `nlp()` call per
sentence, no cache), in the same run, on the same sentences.

    python benchmarks/bench_winomt.py [--copies 40] [--repeats 3]

The set is the test set (tests/data/winomt_fr/sentences.txt, 71 hand-made English -> French pairs)
repeated ``--copies`` times (40 -> 2,840 sentences, about WinoMT's 3,888); like WinoMT itself it
repeats professions, which is what the per-string cache exploits. Best of ``--repeats``.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from analysis.winomt import read_gold, read_translations, score_winomt  # noqa: E402
from analysis.winomt_aligned import MorphologyPredictor, _nlp, entity_words, read_alignments  # noqa: E402
from test_winomt_aligned import load_set  # noqa: E402


def write_set(d: Path, copies: int) -> None:
    rows = load_set() * copies
    (d / "en.txt").write_text("".join(f"{r['gender']}\t{r['index']}\t{r['english']}\t{r['profession']}\n"
                                      for r in rows), encoding="utf-8")
    (d / "hyp.fr").write_text("".join(r["french"] + "\n" for r in rows), encoding="utf-8")
    (d / "hand.align").write_text("".join(r["links"] + "\n" for r in rows), encoding="utf-8")


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        write_set(d, args.copies)
        gold = read_gold(d / "en.txt")
        n = len(gold)
        _nlp("fr")  # load spaCy once, outside the timings
        score_winomt(d / "en.txt", d / "hyp.fr", "fr", method="lexicon")  # and the lexicon's spaCy cache
        t_lex = best(lambda: score_winomt(d / "en.txt", d / "hyp.fr", "fr", method="lexicon"), args.repeats)
        t_given = best(lambda: score_winomt(d / "en.txt", d / "hyp.fr", "fr", alignments_path=d / "hand.align"),
                       args.repeats)
        t_eflomal = best(lambda: score_winomt(d / "en.txt", d / "hyp.fr", "fr"), args.repeats)

        links = read_alignments(d / "hand.align", n)
        words = [entity_words(g.sentence, g.index, t, ln)
                 for g, t, ln in zip(gold, read_translations(d / "hyp.fr", n), links)]
        nlp = _nlp("fr")
        t_naive = best(lambda: [nlp(w) for w in words], args.repeats)
        t_ours = best(lambda: MorphologyPredictor("fr").predict_many(words), args.repeats)
    print(f"{n} sentences, best of {args.repeats}")
    print(f"  lexicon                      {t_lex:7.2f} s  {n / t_lex:8.0f} sentences/s")
    print(f"  aligned, given links         {t_given:7.2f} s  {n / t_given:8.0f} sentences/s")
    print(f"  aligned, eflomal aligning    {t_eflomal:7.2f} s  {n / t_eflomal:8.0f} sentences/s")
    print(f"  spaCy step: naive per-sentence nlp() {t_naive:.2f} s, cached nlp.pipe {t_ours:.3f} s "
          f"({t_naive / t_ours:.0f}x)")


if __name__ == "__main__":
    main()
