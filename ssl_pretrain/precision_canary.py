"""A reduced precision proves itself on the device before it produces a number.

Mixed precision runs each op through whatever kernel the device's library picks for that
dtype, shape and CPU. Those kernels can be wrong: on Intel CPUs with AMX, oneDNN's bf16
*grouped* ``conv1d`` (the positional convolution of every wav2vec 2.0, HuBERT and WavLM
encoder: groups 16, kernel 64-128) returned values off by ~100 % (relative Frobenius error 1.12
on random data; groups 1-2: 0.003), so bf16 features were garbage with exit code 0.

So the first use of a (device, precision) pair in a process runs a **canary**: the encoders'
own kinds of operation at their shapes (plain strided convolutions of the waveform front-end,
the grouped positional convolution, GroupNorm, LayerNorm, a linear layer, scaled-dot-product
attention), each once in fp32 and once under autocast on the same inputs, compared by
relative Frobenius error ``||y - y_fp32|| / ||y_fp32||``. bf16 keeps 8 bits of mantissa
(~0.4 % a rounding), so a correct kernel lands near 0.3-1 %; ``TOLERANCE`` is 3 %.

- Within tolerance: the path is plain autocast.
- Off: the same canary under the device library's fallback (oneDNN off on a CPU, cuDNN off
  on CUDA: PyTorch's own native kernels). When that is within tolerance it becomes the path:
  every forward of that precision then runs with the library off (slower, right).
- Off both ways: ``usable`` is False, and ssl_pretrain.device refuses it in one line naming the
  device, the precision and the fix (fp32).

What was done is a ``PrecisionPath``; ``runtime_info`` (ssl_pretrain.device) records its
``record()`` in every feature-store entry and result row, and ``gendergap bench
--check-precision`` prints it.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = 0.03          # relative Frobenius error against fp32 (bf16 rounding alone: ~0.3-1 %)
CANARY_SEED = 20261127    # the canary's inputs and weights: the same numbers on every machine


@dataclass(frozen=True)
class Shapes:
    """The op shapes the canary runs, as an encoder config states them."""
    hidden: int = 768
    pos_kernel: int = 128
    pos_groups: int = 16
    conv_dim: int = 512
    heads: int = 12

    @classmethod
    def of(cls, config) -> "Shapes":
        """The shapes of a transformers SSL config (families without a field keep the default)."""
        get = lambda name, default: int(getattr(config, name, None) or default)  # noqa: E731
        conv_dim = getattr(config, "conv_dim", None)
        return cls(hidden=get("hidden_size", cls.hidden), pos_kernel=get("num_conv_pos_embeddings", cls.pos_kernel),
                   pos_groups=get("num_conv_pos_embedding_groups", cls.pos_groups),
                   conv_dim=int(conv_dim[0]) if conv_dim else cls.conv_dim,
                   heads=get("num_attention_heads", cls.heads))


# The released models' shapes (base and large: 768/1024 wide, kernel 128, 16 groups) are always
# checked; a model's own shapes are added by the extractor that runs it.
RELEASED = (Shapes(), Shapes(hidden=1024, heads=16))


def _canary_ops(shapes: Shapes, device: str) -> dict[str, tuple]:
    """name -> (function, args): each op with its inputs and weights, drawn from one seeded generator."""
    g = torch.Generator().manual_seed(CANARY_SEED)
    r = lambda *size: torch.randn(*size, generator=g).to(device)  # noqa: E731
    d, k, groups, c = shapes.hidden, shapes.pos_kernel, shapes.pos_groups, shapes.conv_dim
    heads = max(1, shapes.heads)
    frames = 96
    return {
        "conv1d front-end (1->C, k10, s5)": (lambda x, w: F.conv1d(x, w, stride=5), (r(2, 1, 4000), r(c, 1, 10))),
        "conv1d front-end (C->C, k3, s2)": (lambda x, w: F.conv1d(x, w, stride=2),
                                            (r(2, c, 400), r(c, c, 3) / c ** .5)),
        f"conv1d positional (groups {groups}, k{k})": (
            lambda x, w: F.conv1d(x, w, padding=k // 2, groups=groups),
            (r(2, d, frames), r(d, d // groups, k) / (d // groups * k) ** .5)),
        "group_norm": (lambda x: F.group_norm(x, min(c, 512)), (r(2, c, 400),)),
        "layer_norm": (lambda x: F.layer_norm(x, (d,)), (r(2, frames, d),)),
        "linear": (lambda x, w: F.linear(x, w), (r(2, frames, d), r(4 * d, d) / d ** .5)),
        "attention": (lambda q, kk, v: F.scaled_dot_product_attention(q, kk, v),
                      tuple(r(2, heads, frames, d // heads) for _ in range(3))),
    }


def _errors(device: str, dtype: torch.dtype, shapes: tuple[Shapes, ...]) -> dict[str, float]:
    """Relative Frobenius error of every canary op under autocast to ``dtype``, against fp32."""
    out: dict[str, float] = {}
    with torch.no_grad():
        for s in shapes:
            for name, (fn, args) in _canary_ops(s, device).items():
                reference = fn(*args).float()
                with torch.autocast(device_type=torch.device(device).type, dtype=dtype):
                    y = fn(*args).float()
                err = float(torch.linalg.vector_norm(y - reference) / torch.linalg.vector_norm(reference))
                err = err if err == err else float("inf")   # NaN from a broken kernel counts as off
                out[name] = max(out.get(name, 0.0), err)
    return out


@contextlib.contextmanager
def library_off(device: str):
    """The fallback: the device's kernel library off (oneDNN on a CPU, cuDNN on CUDA), PyTorch's
    own kernels instead. A process-wide switch while the context is open; only the on/off flag is
    touched (``torch.backends.mkldnn.flags()`` would also reset TF32 and determinism settings)."""
    backend = torch.backends.cudnn if torch.device(device).type == "cuda" else torch.backends.mkldnn
    before = backend.enabled
    backend.enabled = False
    try:
        yield
    finally:
        backend.enabled = before


@dataclass(frozen=True)
class PrecisionPath:
    """How forwards in ``precision`` run on ``device``, and the canary numbers behind it."""
    device: str
    precision: str
    fallback: bool = False                  # True: the kernel library is off for this precision
    usable: bool = True                     # False: off from fp32 on both paths (refused by the caller)
    errors: dict = field(default_factory=dict)          # the path taken: op -> relative error
    default_errors: dict = field(default_factory=dict)  # plain autocast, when the fallback was needed

    @property
    def name(self) -> str:
        if self.precision == "fp32":
            return "fp32"
        off = "cuDNN" if self.device.startswith("cuda") else "oneDNN"
        return f"{self.precision} autocast" + (f", {off} off" if self.fallback else "")

    def context(self):
        """Autocast to the precision's dtype (with the library off on the fallback path)."""
        stack = contextlib.ExitStack()
        if self.precision == "fp32":
            return stack
        if self.fallback:
            stack.enter_context(library_off(self.device))
        stack.enter_context(torch.autocast(device_type=torch.device(self.device).type, dtype=DTYPES[self.precision]))
        return stack

    def worst(self) -> tuple[str, float]:
        """The op furthest from fp32 on the path taken, and its error."""
        return max(self.errors.items(), key=lambda kv: kv[1], default=("", 0.0))

    def guard(self):
        """Only the library switch, for an engine that opens its own autocast (SpeechBrain)."""
        return library_off(self.device) if self.fallback else contextlib.nullcontext()

    def record(self) -> dict:
        """What a result row and a feature-store entry keep."""
        if self.precision == "fp32":
            return {"path": "fp32"}
        out = {"path": self.name, "canary_max_rel_error": round(self.worst()[1], 5), "tolerance": TOLERANCE}
        if self.fallback:
            name, err = max(self.default_errors.items(), key=lambda kv: kv[1])
            out["plain_autocast_off"] = {"op": name, "rel_error": round(err, 5)}
        return out

    def report(self) -> str:
        """Lines for a person: every op's error on the path taken, and why that path."""
        lines = [f"{self.device} {self.precision}: {self.name} (tolerance {TOLERANCE:.0%} relative error)"]
        for op, err in self.errors.items():
            before = f"   plain autocast {self.default_errors[op]:.4f}" if self.default_errors else ""
            lines.append(f"  {op:42s} {err:.4f}{before}")
        return "\n".join(lines)


@functools.lru_cache(maxsize=None)
def checked_path(device: str, precision: str, extra: Shapes | None = None) -> PrecisionPath:
    """The path ``precision`` takes on ``device``, once per process and shapes (module docstring)."""
    if precision == "fp32":
        return PrecisionPath(device, precision)
    shapes = RELEASED + ((extra,) if extra is not None and extra not in RELEASED else ())
    plain = _errors(device, DTYPES[precision], shapes)
    if max(plain.values()) <= TOLERANCE:
        return PrecisionPath(device, precision, errors=plain)
    with library_off(device):
        fallback = _errors(device, DTYPES[precision], shapes)
    return PrecisionPath(device, precision, fallback=True, usable=max(fallback.values()) <= TOLERANCE,
                         errors=fallback, default_errors=plain)
