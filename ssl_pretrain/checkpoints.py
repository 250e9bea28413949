"""One reference to an SSL checkpoint, whatever the user passed, for every command.

    ref = CheckpointRef.resolve("F-tiny", registry="runs/checkpoints.json")   # a registered name
    ref = CheckpointRef.resolve("runs/ssl/F/checkpoints/checkpoint_best.pt")  # fairseq .pt
    ref = CheckpointRef.resolve("ssl_pretrain/shipped/tiny-female.safetensors")  # a packed release
    ref = CheckpointRef.resolve("models/wav2vec2-FR-1K-large")                # a transformers folder
    ref = CheckpointRef.resolve("models/wavlm-base-plus")    # HuBERT, WavLM, data2vec, w2v-BERT too
    ref.name, ref.kind, ref.content_hash      # "F", "fairseq", sha256 of the weights' files
    twin = ref.twin(seed=0)                   # "F+random-init": same architecture, fresh weights
    ssl = ref.load(device="cuda:0", precision="bf16")   # a frozen feature extractor
    ref = CheckpointRef.resolve("FBANK")      # the no-pretraining baseline: 80-d log-mel, no model

The rules live here once:
- **name**: a registered name as is; for a path, the run folder of a fairseq ``checkpoint*.pt``
  (``runs/F/checkpoints/checkpoint_best.pt`` -> ``F``), else the file's stem or the folder's name.
- **families**: a transformers folder of any family in ssl_pretrain.families (wav2vec2 with XLS-R
  and MMS, hubert, wavlm, data2vec-audio, wav2vec2-conformer, wav2vec2-bert) loads through
  transformers' AutoModel; ``model_facts`` says what it is (family, size, front-end, sample rate).
- **safe loading**: a .pt is read with ``weights_only=True`` and an allowlist
  (ssl_pretrain/safe_load.py); ``trusted`` (``--trust-checkpoint``) unpickles it fully.
- **content hash**: sha256 over the checkpoint's files (a .pt, or a folder's config and weights),
  so a retrained checkpoint at the same path is a different checkpoint to every cache.
- **FBANK**: a reserved name (not a file, never in a registry) for the baseline every frozen-feature
  task can run in a checkpoint's place: 80-d Kaldi log-mel filterbanks stacked to the SSL frame
  rate (ssl_pretrain.feature_store.FbankExtractor). It has no weights, so no twin, no
  fine-tuning and no contrastive evaluation; it is how SUPERB reports the "no pretraining" row.
- **random-init twin**: the same architecture built afresh by its library under
  ``torch.manual_seed(seed)`` (transformers' own initialisation for the encoder; fairseq's for
  the contrastive evaluation, which needs the quantiser). What a probe or a score finds on the
  twin is not pretraining's doing.
"""
from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

from corpora.base.boundary import HF_LOCAL, MAX_CONFIG_BYTES, finite, read_json
from corpora.base.errors import UserError
from corpora.base.provenance import file_sha256
from corpora.base.registry_file import KIND_SUFFIX  # the file suffix each kind of registered checkpoint has
from corpora.base.reserved import FBANK  # the reserved name of the filterbank baseline
from ssl_pretrain.architecture import check_any_architecture, check_architecture, hf_config
from ssl_pretrain.convert import (
    convert_checkpoint,
    fairseq_to_transformers,
    load_fairseq_checkpoint,
    model_config,
    num_updates,
)
from ssl_pretrain.families import (
    FAMILIES,
    WAV2VEC2,
    Family,
    check_finetunable,
    check_weights_fit,
    describe,
    family_of,
    read_preprocessor,
)
from ssl_pretrain.registry import Registry, check_name

HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")
HF_FILES = ("config.json", "preprocessor_config.json") + HF_WEIGHTS
MAX_MODEL_GB = 4.0   # default bound on a folder's model in fp32 (XLS-R 1B: 3.9 GB); GENDERGAP_MAX_MODEL_GB raises it


def is_fbank(name) -> bool:
    return str(name) == FBANK


def max_model_bytes() -> int:
    """The memory a folder's model may take in fp32: ``GENDERGAP_MAX_MODEL_GB`` (default 4 GB)."""
    raw = os.environ.get("GENDERGAP_MAX_MODEL_GB")
    gb = MAX_MODEL_GB if raw is None else finite(raw, "GENDERGAP_MAX_MODEL_GB", lo=0.001, hi=1e5)
    return int(gb * 1e9)


def bounded_fairseq_config(mcfg: dict, path):
    """A fairseq checkpoint's model config as transformers' config, under the bounds a model folder's
    config.json meets (architecture.check_architecture): a .pt or packed release is handed as well."""
    try:
        config = hf_config(mcfg)
    except (TypeError, ValueError, KeyError, SyntaxError, AttributeError) as e:
        raise UserError(f"the checkpoint's model config does not describe a wav2vec 2.0 model ({type(e).__name__})",
                        path=path, fix="give a checkpoint written by fairseq's wav2vec2 pretraining") from None
    return check_architecture(config.to_dict(), WAV2VEC2, path, max_model_bytes())


def read_config(path: Path) -> dict:
    """A model folder's config.json as a dict, read the one bounded way (boundary.read_json)."""
    cfg_path = path / "config.json"
    if not os.path.lexists(cfg_path):
        raise UserError("no config.json in the model folder", path=path,
                        fix="give a Hugging Face model folder (config.json + model.safetensors) or a fairseq .pt")
    return read_json(cfg_path, "config.json", shape=dict, max_bytes=MAX_CONFIG_BYTES,
                     fix="download the model folder again")


def check_hf_folder(path: Path, trust: bool = False) -> dict:
    """A transformers folder of a supported family (ssl_pretrain.families) + weights, checked before
    anything reads or builds it: ssl_pretrain.safe_load.check_model_folder (custom code, every
    pickle, the shards an index names), then the architecture config.json describes (bounded
    shapes, the model's memory under ``max_model_bytes``) and the preprocessor's sample rate.
    ``CheckpointRef.resolve`` and the sweep's dry run (gendergap.steps.models) both call it."""
    cfg = read_config(path)
    from ssl_pretrain.safe_load import check_model_folder
    check_model_folder(path, trust=trust)   # custom code, symlinked folders, every pickle (index shards too)
    family_of(cfg, path / "config.json")   # one line listing the supported families otherwise
    st = (path / "config.json").stat()
    _check_architecture(str(path / "config.json"), st.st_size, st.st_mtime_ns, max_model_bytes())
    read_preprocessor(path)
    if not any((path / w).is_file() for w in HF_WEIGHTS):
        raise UserError("no weights (model.safetensors / pytorch_model.bin) in the model folder", path=path,
                        fix="download the whole model folder")
    return cfg


@functools.lru_cache(maxsize=64)
def _check_architecture(cfg_path: str, size: int, mtime_ns: int, max_bytes: int) -> None:
    """architecture.check_architecture once per config.json version (every resolve calls it, and a
    large model's meta-device build takes a fraction of a second)."""
    del size, mtime_ns  # part of the cache key only
    path = Path(cfg_path)
    cfg = read_config(path.parent)
    check_architecture(cfg, family_of(cfg, path), path, max_bytes)


def quiet_transformers(load, *args, **kwargs):
    """``load(*args, **kwargs)`` (a from_pretrained) without transformers' multi-line load report and
    progress bar: the caller checks the loading info and says a misfit in one line."""
    import logging

    from transformers.utils import logging as hf_logging
    hf_log, bar = logging.getLogger("transformers"), hf_logging.is_progress_bar_enabled()
    level = hf_log.level
    hf_log.setLevel(logging.ERROR)
    hf_logging.disable_progress_bar()
    try:
        return load(*args, **kwargs)
    finally:
        hf_log.setLevel(level)
        if bar:
            hf_logging.enable_progress_bar()


def check_recogniser_folder(path: Path) -> None:
    """A released recogniser's folder (a transformers CTC or sequence-to-sequence model) checked as
    ``check_hf_folder`` checks an encoder's, before anything is built (``asr transcribe`` and the
    sweep's dry run alike): the architecture its config.json describes -- a self-supervised family's
    under its own bounds, any other model's shape fields and meta-device build -- within
    ``max_model_bytes``. The caller has run safe_load.check_model_folder (custom code, pickles)."""
    cfg = read_config(path)
    family = FAMILIES.get(cfg.get("model_type"))
    if family is not None:
        check_architecture(cfg, family, path / "config.json", max_model_bytes())
    else:
        check_any_architecture(cfg, path / "config.json", max_model_bytes())


def load_checked(auto, path: Path, trust: bool = False):
    """``auto.from_pretrained`` of a checked transformers folder (AutoModel for an encoder,
    AutoModelForCTC / AutoModelForSpeechSeq2Seq for a released recogniser), its weights checked:
    finite first (safe_load.check_finite_weights), then fitting config.json -- none missing (left at
    random init), unexpected in its modules (dropped) or of another shape -- by its family's rule
    (families.check_weights_fit), or that rule for a model of none."""
    from ssl_pretrain.safe_load import check_finite_weights
    weights = weight_files(path)
    check_finite_weights([w for w in weights if not w.name.endswith(".index.json")], trust=trust)
    try:
        # mismatched shapes reported, not raised (a RuntimeError holding the report), so all misfits read alike
        model, info = quiet_transformers(auto.from_pretrained, str(path), output_loading_info=True,
                                         ignore_mismatched_sizes=True, **HF_LOCAL)
    except (RuntimeError, ValueError, OSError, KeyError, ImportError) as e:
        raise UserError(f"transformers cannot load the model folder ({type(e).__name__}: "
                        f"{' '.join(str(e).split())[:160]})", path=path, fix="copy the model folder again") from None
    check_weights_fit(model, info, FAMILIES.get(model.config.model_type), weights[0] if len(weights) == 1 else path)
    return model


def weight_files(folder: Path) -> list[Path]:
    """A transformers folder's weight files: those of HF_WEIGHTS present, and every shard the
    indexes among them name (resolved inside the folder)."""
    from ssl_pretrain.safe_load import index_shards
    found = [folder / n for n in HF_WEIGHTS if (folder / n).is_file()]
    shards = {s for f in found if f.name.endswith(".index.json") for s in index_shards(f)}
    return found + sorted(shards - set(found))


def _converted_updates(folder: Path) -> int | None:
    """The update count a folder converted by gendergap records (gendergap_source.json); None otherwise."""
    src = folder / "gendergap_source.json"
    if not os.path.lexists(src):
        return None
    updates = read_json(src, "gendergap_source.json", shape=dict, max_bytes=MAX_CONFIG_BYTES).get("num_updates")
    if updates is not None and (isinstance(updates, bool) or not isinstance(updates, int) or updates < 0):
        raise UserError(f"num_updates {updates!r} is not a count", path=src,
                        fix="convert the checkpoint again (gendergap ckpt convert)")
    return updates


def name_for_path(path: Path) -> str:
    """The name results are filed under when the user gave a path (see the module doc)."""
    path = path.resolve()
    if path.is_file() and path.name.startswith("checkpoint"):
        folder = path.parent
        return folder.parent.name if folder.name == "checkpoints" else folder.name
    return path.stem if path.is_file() else path.name


@dataclass(frozen=True)
class CheckpointRef:
    """A resolved checkpoint: its name, file or folder, kind (fairseq | packed | hf), twin seed, and
    whether the user vouched for it (``trusted``: unpickle a .pt fully)."""
    name: str
    path: Path
    kind: str
    random_init_seed: int | None = None
    trusted: bool = False

    # ---- resolving -----------------------------------------------------------------------
    @classmethod
    def resolve(cls, spec: str | os.PathLike, registry: str | os.PathLike | None = None,
                name: str | None = None, trust: bool = False) -> "CheckpointRef":
        """A registered name, a fairseq .pt, a packed .safetensors release, a transformers folder,
        or FBANK (the filterbank baseline)."""
        if is_fbank(spec):
            return cls(FBANK, Path(FBANK), "fbank")
        path = Path(spec)
        label = name
        if not path.exists():
            if os.sep in str(spec) or str(spec).endswith((".pt", ".safetensors")):
                raise UserError("checkpoint path not found", path=spec,
                                fix="give a fairseq .pt file, a transformers folder or a registered name")
            path = Path(Registry(registry).get(str(spec))["path"])
            label = label or str(spec)
            if not path.exists():
                raise UserError(f"the registered checkpoint {spec!r} points to a missing path", path=path,
                                fix=f"re-register it: gendergap ckpt add {spec} PATH --replace")
        path = path.resolve()
        if path.is_dir():
            check_hf_folder(path, trust=trust)
            kind = "hf"
        elif path.is_file():
            kind = next((k for k, suffix in KIND_SUFFIX.items() if path.suffix == suffix), None)
            if kind is None:   # what the registry's reader refuses is refused before it is written (or loaded)
                raise UserError(f"a checkpoint file is a fairseq {KIND_SUFFIX['fairseq']} or a packed "
                                f"{KIND_SUFFIX['packed']} release, not a {path.suffix or 'suffixless'} file", path=path,
                                fix="give the checkpoint file (checkpoints/checkpoint_best.pt), a packed .safetensors "
                                    "or a transformers folder")
        else:
            raise UserError("not a file or folder", path=path, fix="give a fairseq .pt or a transformers folder")
        return cls(label or name_for_path(path), path, kind, trusted=trust)

    def twin(self, seed: int = 0) -> "CheckpointRef":
        """The random-init twin: same architecture, weights drawn under ``torch.manual_seed(seed)``."""
        self._needs_model("has no random-init twin")
        return replace(self, name=f"{self.name}+random-init", random_init_seed=int(seed))

    @property
    def is_twin(self) -> bool:
        return self.random_init_seed is not None

    @property
    def is_fbank(self) -> bool:
        return self.kind == "fbank"

    def _needs_model(self, what: str) -> None:
        if self.is_fbank:
            raise UserError(f"FBANK (filterbanks, no pretrained model) {what}",
                            fix="use FBANK only as a frozen-feature baseline "
                            "(asr frozen, st, probe run, ckpt features)")

    # ---- identity ------------------------------------------------------------------------
    def files(self) -> list[Path]:
        if self.is_fbank:
            return []
        if self.kind == "hf":
            # the shards too: an index alone hashes the same whatever weights its shards hold
            configs = [self.path / n for n in HF_FILES[:2] if (self.path / n).is_file()]
            return configs + weight_files(self.path)
        return [self.path]

    @property
    def content_hash(self) -> str:
        """sha256 over the files' bytes (and the twin seed for a twin)."""
        h = hashlib.sha256()
        if self.is_fbank:
            from ssl_pretrain.feature_store import FbankExtractor
            h.update(FbankExtractor().key.encode())
        root = self.path.resolve() if self.kind == "hf" else None
        for f in self.files():
            # a folder's file by its path inside it (a shard may sit in a subfolder); a folder's top-level
            # files hash as they always did, so caches keyed on them stay valid
            # (f itself is not resolved: a top-level file may be a link into a hub cache's blobs)
            label = f.relative_to(root).as_posix() if root is not None and f.is_relative_to(root) else f.name
            h.update(f"{label}\0{file_sha256(f)}\n".encode())
        if self.is_twin:
            h.update(f"random-init:{self.random_init_seed}".encode())
        return h.hexdigest()

    def describe(self) -> dict:
        """What a result row records about the checkpoint."""
        return {"name": self.name, "path": str(self.path), "kind": self.kind, "sha256": self.content_hash,
                "random_init_seed": self.random_init_seed}

    # ---- loading -------------------------------------------------------------------------
    def fairseq_path(self) -> Path:
        """The .pt or packed file (a transformers folder is refused: this needs fairseq's config)."""
        self._needs_model("has no fairseq checkpoint")
        if self.kind == "hf":
            raise UserError("this needs a fairseq checkpoint (.pt), not a transformers folder", path=self.path,
                            fix="give the fairseq .pt the folder was converted from")
        return self.path

    def fairseq_state(self, mmap: bool = False) -> dict:
        """The fairseq checkpoint dict (config + weights), checked to be wav2vec 2.0 pretraining;
        ``mmap``: its tensors mapped, not read (the same checks, for the sweep's dry run)."""
        state = load_fairseq_checkpoint(self.fairseq_path(), trust=self.trusted, mmap=mmap)
        bounded_fairseq_config(model_config(state, self.path), self.path)
        return state

    def inspect(self, mmap: bool = False) -> dict:
        """kind, update count and model_facts (a fine-tuned or unsupported checkpoint is a UserError);
        ``mmap``: a fairseq file's tensors mapped, not read."""
        if self.is_fbank:
            return {"kind": "fbank", "updates": 0}
        if self.kind == "hf":
            return {"kind": "hf", "updates": _converted_updates(self.path), **self.model_facts()}
        state = self.fairseq_state(mmap)
        return {"kind": self.kind, "updates": num_updates(state), **self.model_facts(state)}

    @property
    def family(self) -> Family | None:
        """The model family (None for FBANK); a fairseq checkpoint is wav2vec 2.0."""
        if self.is_fbank:
            return None
        if self.kind != "hf":
            return WAV2VEC2
        return family_of(read_config(self.path), self.path)

    def architecture(self, state: dict | None = None):
        """(transformers config of the encoder, sample rate), without reading the weights: a folder's
        config.json and preprocessor_config.json; a fairseq file's model and task config (its
        tensors memory-mapped, or ``state`` when it is already read)."""
        self._needs_model("is not a model")
        if self.kind == "hf":
            from transformers import AutoConfig
            rate = read_preprocessor(self.path).get("sampling_rate", 16000)
            return AutoConfig.from_pretrained(str(self.path), **HF_LOCAL), int(rate)
        if state is None:
            state = load_fairseq_checkpoint(self.fairseq_path(), trust=self.trusted, mmap=True)
        task = state.get("cfg", {}).get("task", {}) if state.get("cfg") is not None else vars(state.get("args", {}))
        return bounded_fairseq_config(model_config(state, self.path), self.path), int(task.get("sample_rate", 16000))

    def model_facts(self, state: dict | None = None) -> dict:
        """family, parameters, layers, hidden_size, front_end, sample_rate (ssl_pretrain.families.describe)."""
        config, rate = self.architecture(state)
        return describe(config, rate, self.path)

    def check_finetunable(self) -> None:
        """One line when asr-e2e cannot fine-tune this checkpoint's family (w2v-BERT)."""
        self._needs_model("cannot be fine-tuned")
        check_finetunable(self.family, self.name)

    def load(self, device: str = "cpu", precision: str = "fp32"):
        """The encoder as a frozen feature extractor (ssl_pretrain.features.FrozenSSL)."""
        self._needs_model("has no encoder to load (read it through the feature store)")
        import torch

        from ssl_pretrain.features import FrozenSSL
        fbank = None
        if self.kind == "hf":
            model = self._load_folder()
            meta = read_preprocessor(self.path)
            normalize, rate = bool(meta.get("do_normalize", False)), int(meta.get("sampling_rate", 16000))
            fbank = self.family.feature_extractor(meta)
        else:
            model, info = fairseq_to_transformers(self.fairseq_state(), self.path)
            normalize, rate = info["normalize"], info["sample_rate"]
        if self.is_twin:
            torch.manual_seed(self.random_init_seed)
            model = type(model)(model.config)
        return FrozenSSL(model, normalize, rate, self.name, device=device, precision=precision, fbank=fbank)

    def _load_folder(self):
        """The folder's encoder through transformers' AutoModel, its weights checked (load_checked)."""
        from transformers import AutoModel
        return load_checked(AutoModel, self.path, trust=self.trusted)

    def check_weights(self) -> None:
        """The checks ``load`` makes of a folder's weights, for a caller that hands the folder to
        another library (SpeechBrain fine-tuning reads it itself) or checks before any job runs."""
        if self.kind == "hf":
            self._load_folder()

    def check_before_run(self) -> None:
        """What a study's run checks of this checkpoint -- registering it (``register_checkpoint``:
        resolve + inspect) and loading a folder's weights (finite, fitting config.json) -- for the
        sweep's dry run, so the dry run refuses what the run would: a fairseq file's tensors are mapped,
        not read (the loader, the allowlist and the config checks are the same)."""
        self.inspect(mmap=True)
        self.check_weights()

    def hf_folder(self, cache_root: str | os.PathLike) -> Path:
        """A transformers folder for fine-tuning (SpeechBrain reads one): the folder itself, or a
        fairseq checkpoint converted once into ``cache_root/<name>-<hash>`` (reused while the
        .pt's content is unchanged)."""
        self.check_finetunable()
        if self.is_twin:
            raise UserError(f"{self.name} is a random-init twin: fine-tuning starts from real weights",
                            fix="fine-tune the checkpoint itself")
        if self.kind == "hf":
            self.check_weights()   # SpeechBrain's lobe loads it with transformers, unchecked
            return self.path
        dest = Path(cache_root) / f"{self.name}-{self.content_hash[:12]}"
        if not (dest / "config.json").is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            convert_checkpoint(self.path, dest, trust=self.trusted)
        return dest


def register_checkpoint(registry: Registry, name: str, path: str | os.PathLike, *, replace_entry: bool = False,
                        trust: bool = False, **table3) -> dict:
    """Check a checkpoint (a pretraining wav2vec 2.0 .pt or a transformers folder of a supported
    family) and register it with its model facts (family, size, front-end, sample rate)."""
    check_name(name)
    path = Path(path)
    if not path.exists():
        raise UserError("checkpoint path not found", path=path, fix="give a fairseq .pt file or a transformers folder")
    found = CheckpointRef.resolve(path, trust=trust).inspect()
    updates = table3.pop("updates", None)
    model = {k: found.get(k) for k in MODEL_FACTS}
    return registry.add(name, path, kind=found["kind"], updates=updates if updates is not None else found["updates"],
                        replace=replace_entry, model=model, **table3)


MODEL_FACTS = ("family", "parameters", "layers", "hidden_size", "front_end", "sample_rate")

