"""In-process espeak-ng synthesis through ctypes (the library ships in the pip package
``espeakng-loader``).

espeak-ng is GPL-3. This module and the rest of ``corpora/synth`` are the only places in
gendergap that load it; nothing else imports this module.

Determinism: espeak-ng keeps state between utterances (and some voice variants add noise
from its random generator), so the same text spoken twice in one process can differ. What
*is* reproducible is a fresh process that calls ``espeak_ng_SetRandSeed(seed)`` before its
first utterance and then speaks a fixed list of utterances in a fixed order. The corpus
builder therefore runs one fresh process per speaker (see ``build.py``).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# espeak_AUDIO_OUTPUT: SYNCHRONOUS = samples are handed to the callback inside espeak_Synth.
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_POS_CHARACTER = 1
_CHARS_UTF8 = 1
_EE_OK = 0
# espeak_PARAMETER ids (speak_lib.h)
_RATE, _VOLUME, _PITCH, _RANGE = 1, 2, 3, 4

# gendergap's own voice variants (text files in espeak-ng's variant format), spoken through a data
# folder that overlays them on the package's: espeak-ng finds variants only in <data>/voices/!v.
PROJECT_VARIANTS_DIR = Path(__file__).with_name("espeak_variants")

_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


@dataclass(frozen=True)
class Prosody:
    """espeak-ng prosody parameters: rate in words/minute, pitch and range on 0-100 (50 = voice default)."""

    rate: int = 175
    pitch: int = 50
    range: int = 50
    volume: int = 100


def overlay_data_dir(dst) -> Path:
    """A copy of espeak-ng's data folder made of symlinks under ``dst``, with the project's variants
    (``PROJECT_VARIANTS_DIR``) added to ``voices/!v``: the package's folder is never written to.
    Returns ``dst`` (created; call once per fresh ``dst``)."""
    import espeakng_loader  # GPL-3: imported here only

    src, dst = Path(espeakng_loader.get_data_path()), Path(dst)
    variants = dst / "voices" / "!v"
    variants.mkdir(parents=True)
    for entry in src.iterdir():
        if entry.name != "voices":
            (dst / entry.name).symlink_to(entry)
    for entry in (src / "voices").iterdir():
        if entry.name != "!v":
            (dst / "voices" / entry.name).symlink_to(entry)
    for entry in [*(src / "voices" / "!v").iterdir(), *PROJECT_VARIANTS_DIR.iterdir()]:
        (variants / entry.name).symlink_to(entry)
    return dst


class Espeak:
    """One initialised espeak-ng engine. Create at most one per process.

    ``Espeak(seed, overlay_data_dir(tmp)).speak("Bonjour.", "fr+m3", Prosody(rate=160))`` returns
    int16 samples at ``self.sample_rate`` (22,050 Hz for the bundled data). ``data_dir``: espeak-ng's
    data folder; ``overlay_data_dir`` makes one that holds the package's variants and the project's.
    """

    _instance_made = False

    def __init__(self, seed: int, data_dir):
        if Espeak._instance_made:
            # espeak-ng is a process-wide singleton; a second init would silently share state.
            raise RuntimeError("espeak-ng is already initialised in this process; use one Espeak per process")
        import espeakng_loader  # GPL-3: imported here only

        self._lib = ctypes.CDLL(espeakng_loader.get_library_path())
        lib = self._lib
        lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
        lib.espeak_ng_SetRandSeed.restype = None
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetSynthCallback.argtypes = [_CALLBACK]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                                     ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        lib.espeak_Synth.restype = ctypes.c_int

        # The seed first: variants with breath noise draw from espeak's generator.
        lib.espeak_ng_SetRandSeed(int(seed))
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0,
                                     str(data_dir).encode(), 0)
        if rate <= 0:
            raise RuntimeError(f"espeak_Initialize failed (returned {rate})")
        self.sample_rate = int(rate)
        self._chunks: list[np.ndarray] = []

        def on_samples(wav, n, _events):
            if n > 0 and wav:
                self._chunks.append(np.ctypeslib.as_array(wav, shape=(n,)).copy())
            return 0  # 0 = keep synthesising

        self._callback = _CALLBACK(on_samples)  # keep a reference: C holds only the pointer
        lib.espeak_SetSynthCallback(self._callback)
        self._voice: str | None = None
        Espeak._instance_made = True

    def speak(self, text: str, voice: str, prosody: Prosody = Prosody()) -> np.ndarray:
        """Synthesise ``text`` with ``voice`` (e.g. ``fr+f4``); returns int16 samples."""
        lib = self._lib
        if voice != self._voice:
            if lib.espeak_SetVoiceByName(voice.encode()) != _EE_OK:
                raise ValueError(f"espeak-ng has no voice {voice!r}")
            self._voice = voice
        for param, value in ((_RATE, prosody.rate), (_PITCH, prosody.pitch),
                             (_RANGE, prosody.range), (_VOLUME, prosody.volume)):
            lib.espeak_SetParameter(param, int(value), 0)
        self._chunks = []
        data = text.encode("utf-8") + b"\0"
        err = lib.espeak_Synth(data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
        if err != _EE_OK:
            raise RuntimeError(f"espeak_Synth failed ({err}) on {text!r}")
        if not self._chunks:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(self._chunks).astype(np.int16, copy=False)
