"""A model as the downstream tasks use it: one value, resolved once at the edge.

    model = ModelChoice.resolve("F-tiny", registry, trust=False, device="auto", precision="bf16")
    view = model.features(store_root, rows, "all")      # the FeatureView, extracted where missing

The checkpoint (a registered name, a path, or FBANK), its registry entry and the trust decision
(``--trust-checkpoint``, never a file's), and the device and precision its forward passes run in
travel together. The command line and the sweep's steps resolve it (they are the edge); package
functions take it: `ckpt eval|features`, the features step, frozen and fine-tuned ASR, ST, the
Kaldi export and the probes. The chain "device and precision -> CheckpointRef.resolve ->
extractor_for -> FeatureStore.view" is written here once.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cached_property

from ssl_pretrain.checkpoints import CheckpointRef
from ssl_pretrain.device import device_and_precision
from ssl_pretrain.feature_store import FeatureStore, extractor_for


@dataclass(frozen=True)
class ModelChoice:
    ref: CheckpointRef
    device: str = "cpu"
    precision: str = "fp32"
    spec: str = ""                   # what the user named (a run records it: a decode resolves it again)
    registry: str | None = field(default=None, compare=False)   # where a name was looked up

    @classmethod
    def resolve(cls, spec, registry: str | os.PathLike | None = None, *, trust: bool = False,
                device: str | None = "cpu", precision: str | None = "fp32", name: str | None = None) -> "ModelChoice":
        """``spec`` (name, path or FBANK) resolved against ``registry``; device and precision checked.
        ``name``: the label of its rows instead of the registered name or the file's."""
        device, precision = device_and_precision(device, precision)
        ref = CheckpointRef.resolve(spec, registry, name=name, trust=trust)
        return cls(ref, device, precision, str(spec), None if registry is None else str(registry))

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def trusted(self) -> bool:
        """Whether the user vouched for it (--trust-checkpoint): its .pt is unpickled fully."""
        return self.ref.trusted

    def twin(self, seed: int = 0) -> "ModelChoice":
        """Its random-init twin (CheckpointRef.twin) on the same device and precision."""
        return replace(self, ref=self.ref.twin(seed))

    @cached_property
    def extractor(self):
        """The store's extractor of this model on this device (FBANK's filterbanks run on the CPU);
        one per value, so the model is loaded once however often it is asked."""
        return extractor_for(self.ref, self.device, self.precision)

    def features(self, store: str | os.PathLike, rows, layers, **options):
        """The FeatureView of ``rows`` (audio rows) at ``layers`` (a corpora.feature_request.Layers, or a
        spec it parses: a number, "last", "all", a comma list) from the store at ``store``, extracted
        there where it holds none (FeatureStore.view's ``options``)."""
        return FeatureStore(store).view(self.extractor, rows, layers, **options)
