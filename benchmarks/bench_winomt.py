"""WinoMT scoring speed on the real set: mt_gender's 2019 en.txt (3,888 sentences) and its five
systems' French files as shipped (`English ||| French`), read from ../shared/data/winomt/.
Per system, seconds for `--method aligned` (eflomal aligning the whole set + spaCy), aligned on
saved links (tests/data/winomt_real_fr, spaCy only) and `--method lexicon`, each with the figures
it gives (official rounding, --reference acl2019, as mt_gender's 2019 logs) beside the log's.
Then the aligned method's spaCy step against the naive way (one `nlp()` per sentence, no cache).

    python benchmarks/bench_winomt.py [--systems google bing systran aws sota] [--repeats 1]

eflomal runs its 3 samplers in OpenMP threads (its binary links libgomp): OMP_NUM_THREADS bounds
them, and the timings are wall clock under the OMP_NUM_THREADS the run was given. Caches are
cleared before every timing, so each run pays its spaCy parses.
"""
from __future__ import annotations

import argparse
import gzip
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import analysis.winomt as winomt  # noqa: E402
from analysis.winomt import read_gold, read_translations, score_winomt  # noqa: E402
from analysis.winomt_aligned import MorphologyPredictor, _nlp, entity_words, read_alignments  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "winomt"
GOLD = DATA / "aggregates_acl2019"
LINKS = ROOT / "tests" / "data" / "winomt_real_fr"


def log_figures(system: str):
    log = DATA / "reference_logs" / f"{system}.fr.log"
    if not log.is_file():
        return None
    text = log.read_text(encoding="utf-8")
    acc, m, f = (float(re.search(rf"{k} = ([\d.]+)%", text).group(1)) for k in ("acc", "f1_male", "f1_female"))
    return acc, m - f


def timed(fn, repeats: int):
    best, out = None, None
    for _ in range(repeats):
        winomt._token_genders.cache_clear()
        t = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--systems", nargs="+", default=["google", "bing", "systran", "aws", "sota"])
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    if not (GOLD / "en.txt").is_file():
        sys.exit(f"mt_gender's WinoMT data is not at {DATA} (see the README there)")
    _nlp("fr")  # load spaCy once, outside the timings
    kw = dict(pro_path=GOLD / "en_pro.txt", anti_path=GOLD / "en_anti.txt", official_rounding=True,
              reference="acl2019")
    fig = lambda r: f"{r['acc']:5.1f} / {r['delta_g']:4.1f}"  # noqa: E731
    print(f"{len(read_gold(GOLD / 'en.txt'))} sentences per system; seconds (best of {args.repeats}); "
          "acc / dG with --reference acl2019 --official-rounding")
    print(f"{'system':8s} {'2019 log':>13s} | {'aligned+eflomal':>22s} | {'aligned, saved links':>22s} | "
          f"{'lexicon':>22s}")
    with tempfile.TemporaryDirectory() as tmp:
        for system in args.systems:
            tr = DATA / "translations" / system / "en-fr.txt"
            t_eflomal, a = timed(lambda: score_winomt(GOLD / "en.txt", tr, "fr", **kw), args.repeats)
            links = Path(tmp) / f"{system}.align"
            links.write_bytes(gzip.decompress((LINKS / f"{system}.align.gz").read_bytes()))
            t_links, s = timed(lambda: score_winomt(GOLD / "en.txt", tr, "fr", alignments_path=links, **kw),
                               args.repeats)
            t_lex, lx = timed(lambda: score_winomt(GOLD / "en.txt", tr, "fr", method="lexicon", **kw), args.repeats)
            ref = log_figures(system)
            print(f"{system:8s} {f'{ref[0]:5.1f} / {ref[1]:4.1f}' if ref else '(no log)':>13s} | "
                  f"{fig(a)} {t_eflomal:6.2f} s | {fig(s)} {t_links:6.2f} s | {fig(lx)} {t_lex:6.2f} s", flush=True)

        gold = read_gold(GOLD / "en.txt")
        tr, _ = read_translations(DATA / "translations" / "google" / "en-fr.txt", gold)
        g_links = Path(tmp) / "google-links.align"
        g_links.write_bytes(gzip.decompress((LINKS / "google.align.gz").read_bytes()))
        links = read_alignments(g_links, len(gold))
        words = [entity_words(g.sentence, g.index, " ".join(t.split()), ln) for g, t, ln in zip(gold, tr, links)]
        nlp = _nlp("fr")
        t_naive, _ = timed(lambda: [nlp(w) for w in words], args.repeats)
        t_ours, _ = timed(lambda: MorphologyPredictor("fr").predict_many(words), args.repeats)
    print(f"spaCy step (google's {len(words)} entity strings): naive per-sentence nlp() {t_naive:.2f} s, "
          f"cached nlp.pipe {t_ours:.3f} s ({t_naive / t_ours:.0f}x)")


if __name__ == "__main__":
    main()
