"""The built-in synthetic gendered corpus (espeak-ng voices, pyrealb sentences).

``synthesize(out_dir, size="mini", seed=0) -> Path`` writes the audio, the utterance table
and the MuST-SHE-style gender set; see ``build.py``. espeak-ng (GPL-3, via the pip package
espeakng-loader) is used only inside this package.
"""

from corpora.synth import build
__all__ = ["SIZES", "synthesize"]


def __getattr__(name):
    # Lazy, so that a synthesis worker process imports only what it needs (espeak, numpy, scipy).
    if name in __all__:
        return getattr(build, name)
    raise AttributeError(name)
