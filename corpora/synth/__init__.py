"""The built-in synthetic gendered corpus (espeak-ng voices, pyrealb sentences).

``synthesize(out_dir, size="mini", seed=0) -> Path`` writes the audio, the utterance table
and the MuST-SHE-style gender set; see ``build.py``. espeak-ng (GPL-3, via the pip package
espeakng-loader) is used only inside this package.

``SIZES`` and ``synthesize`` are read from ``build.py`` on first use, not at import: importing the
package, or one of its modules (a synthesis worker process imports ``corpora.synth.worker``: espeak,
numpy, scipy, soundfile), pulls in neither ``build`` nor the sentence generator's pyrealb
(tests/test_synth.py checks both in a fresh interpreter).
"""
from __future__ import annotations

__all__ = ["SIZES", "synthesize"]


def __getattr__(name):
    if name in __all__:
        import corpora.synth.build as build  # on first use only: pyrealb, numpy, scipy, soundfile, tqdm
        return getattr(build, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
