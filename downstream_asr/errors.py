"""Engine failures of the CTC recipes whose cause this tool can name, said in one line.

- **A transcript longer than its frames.** CTC emits one label per output frame and needs a
  blank between two equal labels, so an utterance of T frames can carry at most T labels
  (fewer with repeats: ``ctc_min_frames``). torch's ``ctc_loss`` gives such an utterance an
  infinite loss; SpeechBrain's ``ctc_loss`` passes ``zero_infinity=True``, which sets it to 0
  with no word said: the utterance silently teaches nothing. Usually its transcript and audio
  do not match (a segmentation error), or the model's frame rate is too low for the text
  (``subsample``). The recipes leave it out of the loss, as SpeechBrain does, but say so: one
  warning line per utterance id (the first time it is seen), and the run's
  ``train_summary.json`` lists them (``ctc_too_long``).
- **Out of memory** on a batch: torch.cuda.OutOfMemoryError, or the CPU allocator's
  RuntimeError ("DefaultCPUAllocator: can't allocate memory"). The fix is a smaller batch, so
  the error names the option and a value to try.
"""
from __future__ import annotations

import contextlib

import torch

from corpora.base.errors import UserError


def ctc_min_frames(labels) -> int:
    """The fewest output frames a CTC alignment of ``labels`` needs: one per label, plus a blank
    between each pair of equal neighbours (``aab`` needs a, blank, a, b: 4)."""
    labels = list(labels)
    return len(labels) + sum(1 for a, b in zip(labels, labels[1:]) if a == b)


def too_long_for_ctc(ids, tokens: torch.Tensor, token_lens: torch.Tensor, frames: torch.Tensor,
                     frame_lens: torch.Tensor) -> list[tuple[str, int, int]]:
    """The utterances of a batch whose transcript needs more CTC frames than they have:
    ``(id, frames needed, frames given)``. Lengths are SpeechBrain's relative ones (fractions of
    the padded length), turned into counts as speechbrain.nnet.losses.ctc_loss does."""
    n_frames = (frame_lens * frames.shape[1]).round().int().tolist()
    n_labels = (token_lens * tokens.shape[1]).round().int().tolist()
    out = []
    for uid, row, n, t in zip(ids, tokens.tolist(), n_labels, n_frames):
        need = ctc_min_frames(row[:n])
        if need > t:
            out.append((str(uid), need, t))
    return out


def is_out_of_memory(exc: BaseException) -> bool:
    """torch's out-of-memory errors: CUDA's own class, and the allocators' RuntimeErrors."""
    if isinstance(exc, getattr(torch.cuda, "OutOfMemoryError", ())):
        return True
    text = str(exc)
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        "out of memory" in text.lower() or "can't allocate memory" in text or isinstance(exc, MemoryError))


def oom_error(exc: BaseException, option: str, value, where: str = "training") -> UserError:
    """The one-line error for running out of memory with ``option``=``value`` (a batch size)."""
    # torch's first two sentences: what ran out, and how much was asked for
    first = (". ".join(str(exc).strip().splitlines()[0].split(". ")[:2])[:200] if str(exc).strip()
             else type(exc).__name__)
    try:
        smaller = f"{option}={float(value) / 2:g}"
    except (TypeError, ValueError):
        smaller = f"a smaller {option}"
    return UserError(f"out of memory during {where} with {option}={value} ({first})",
                     fix=f"lower the batch: {smaller} (with --grad-accum 2 the update keeps its size); the rest "
                         "of the run resumes from its last checkpoint")


@contextlib.contextmanager
def batch_option(option: str, value, where: str = "training"):
    """Run the block; an out-of-memory error inside it becomes ``oom_error`` naming ``option``."""
    try:
        yield
    except Exception as e:   # noqa: BLE001 -- re-raised unless it is an out-of-memory error
        if is_out_of_memory(e):
            raise oom_error(e, option, value, where) from None
        raise
