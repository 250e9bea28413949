"""A model as the frozen-feature tasks use it: one value, resolved once at the edge.

    model = ModelChoice.resolve("F-tiny", registry, trust=False, device="auto", precision="bf16")
    view = model.features(store_root, rows, "all")      # the FeatureView, extracted where missing

The checkpoint (a registered name, a path, or FBANK), its registry entry and the trust decision
(``--trust-checkpoint``, never a file's), and the device and precision its forward passes run in
travel together, so the chain "device and precision -> CheckpointRef.resolve -> extractor_for ->
FeatureStore.view" is written here once; `ckpt features`, the features step, ST, the Kaldi export
and the probes' twins call ``features``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ssl_pretrain.checkpoints import CheckpointRef
from ssl_pretrain.device import device_and_precision
from ssl_pretrain.feature_store import FeatureStore, extractor_for


@dataclass(frozen=True)
class ModelChoice:
    ref: CheckpointRef
    device: str = "cpu"
    precision: str = "fp32"

    @classmethod
    def resolve(cls, spec, registry: str | os.PathLike | None = None, *, trust: bool = False,
                device: str | None = "cpu", precision: str | None = "fp32") -> "ModelChoice":
        """``spec`` (name, path or FBANK) resolved against ``registry``; device and precision checked."""
        device, precision = device_and_precision(device, precision)
        return cls(CheckpointRef.resolve(spec, registry, trust=trust), device, precision)

    @property
    def extractor(self):
        """The store's extractor of this model on this device (FBANK's filterbanks run on the CPU)."""
        return extractor_for(self.ref, self.device, self.precision)

    def features(self, store: str | os.PathLike, rows, layers, **options):
        """The FeatureView of ``rows`` (audio rows) at ``layers`` (a number, "last" or "all") from the
        store at ``store``, extracted there where it holds none (FeatureStore.view's ``options``)."""
        return FeatureStore(store).view(self.extractor, rows, layers, **options)
