"""fairseq's speech-to-text model and beam search made batch-invariant: an utterance's encoding and
hypothesis depend on that utterance alone, never on which other utterances share its batch
(docs DESIGN "Measurement invariance"). ssl_pretrain.fairseq_entry installs this in every fairseq
process gendergap starts, fairseq-train and fairseq-generate alike, never through ``--user-dir``.

fairseq 0.12 couples the utterances of a batch in two places:

* ``Conv1dSubsampler`` (fairseq/models/speech_to_text/modules/convolution.py), the s2t_transformer's
  front end: kernel-5, stride-2 convolutions with GLU over the zero-padded batch, nothing masked in
  between. After the first layer the padded frames hold bias + GLU values instead of zeros, and the
  next layer's last real frames (the kernel reaches 2 frames past them) read those values: a short
  utterance beside a long one is encoded differently from the same utterance alone.
  ``masked_subsampler_forward`` zeroes every frame past an utterance's length before each layer, its
  length after each layer by the class's own formula (the one the encoder's padding mask is built
  from), so a batched forward equals the one-utterance forward on every real frame.
* ``SequenceGenerator._generate`` (fairseq/sequence_generator.py) caps every hypothesis of a batch at
  ``max_len_a * src_len + max_len_b`` with ``src_len`` the batch's padded length: beside a longer
  utterance, a short one may grow past the cap it has alone. ``own_length_caps`` ends each sentence
  at the cap fairseq gives it when it is decoded alone (EOS forced from that step on, as fairseq
  forces it at its batch cap); the batch cap still sizes fairseq's buffers.

Everything else on the path is per utterance already: features come from the feature store one
utterance per entry, the collater pads with zeros, the encoder's self-attention and the decoder's
cross-attention take the padding mask, and beam search keeps and finishes each sentence's beams on
their own. What remains is float rounding: a batch of other shapes runs other kernel blockings, so
a hypothesis's score may move in its 7th digit (measured <= 5e-7 on the tiny model of
tests/test_batch_invariance_st.py, where the hypotheses themselves were identical).
"""
from __future__ import annotations

import functools
import math

import torch


def _next_lengths(lengths: torch.Tensor) -> torch.Tensor:
    """Frames after one subsampler layer: Conv1dSubsampler.get_out_seq_lens_tensor's formula for one
    layer, so the lengths masked here are the ones the encoder's padding mask is built from."""
    return ((lengths.float() - 1) / 2 + 1).floor().long()


def _zero_padding(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``x`` (B x C x T) with the frames at and past each utterance's length set to 0."""
    past = torch.arange(x.size(2), device=x.device)[None, :] >= lengths.to(x.device)[:, None]
    return x.masked_fill(past[:, None, :], 0.0)


def masked_subsampler_forward(self, src_tokens: torch.Tensor, src_lengths: torch.Tensor):
    """Conv1dSubsampler.forward with the padded frames zeroed before each conv layer (why: the
    module docstring). Same parameters, same output shape and lengths as fairseq's forward."""
    x = src_tokens.transpose(1, 2).contiguous()  # B x T x (C x D) -> B x (C x D) x T
    lengths = src_lengths
    for conv in self.conv_layers:
        # before the first layer this is what the collater's zero padding already is; before the
        # others it removes what bias and GLU put on the padded frames
        x = _zero_padding(x, lengths)
        x = torch.nn.functional.glu(conv(x), dim=1)
        lengths = _next_lengths(lengths)
    x = x.transpose(1, 2).transpose(0, 1).contiguous()  # -> T x B x (C x D)
    return x, self.get_out_seq_lens_tensor(src_lengths)


def _alone_cap(generator, src_len: int) -> int:
    """The max_len SequenceGenerator._generate computes for a batch of this one utterance."""
    if generator.match_source_len:
        return int(src_len)
    return min(int(generator.max_len_a * src_len + generator.max_len_b), generator.max_len - 1)


def _caps_by_id(generator, sample: dict) -> torch.Tensor | None:
    """Each sentence's own cap, indexed the way _generate hands sentences to search.step
    (``original_batch_idxs``: the sample's ids, else positions in the batch); None when the batch
    carries no per-utterance lengths (then fairseq's own cap is all there is)."""
    net_input = sample["net_input"]
    if "src_tokens" not in net_input or "src_lengths" not in net_input:
        return None
    lengths = net_input["src_lengths"].view(-1).tolist()
    ids = sample.get("id")
    ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(range(len(lengths)))
    caps = torch.full((max(ids) + 1,), torch.iinfo(torch.long).max, dtype=torch.long)
    caps[ids] = torch.tensor([_alone_cap(generator, n) for n in lengths], dtype=torch.long)
    return caps


def _capped_step(search_step, caps: torch.Tensor, eos: int):
    """``search.step`` that first leaves only EOS to the sentences at or past their own cap, as
    _generate does to all sentences at its batch cap (``step >= max_len``)."""
    def step(step_i, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None, *args, **kwargs):
        if original_batch_idxs is not None:
            ended = (caps[original_batch_idxs.cpu()] <= step_i).to(lprobs.device)
            if bool(ended.any()):
                lprobs[ended, :, :eos] = -math.inf   # lprobs: bsz x beam x vocab
                lprobs[ended, :, eos + 1:] = -math.inf
        return search_step(step_i, lprobs, scores, prev_output_tokens, original_batch_idxs, *args, **kwargs)
    return step


def own_length_caps(generate):
    """Wrap SequenceGenerator._generate so that each sentence ends at its own cap (module docstring)."""
    @functools.wraps(generate)
    def wrapped(self, sample, *args, **kwargs):
        caps = _caps_by_id(self, sample)
        if caps is None:
            return generate(self, sample, *args, **kwargs)
        self.search.step = _capped_step(self.search.step, caps, self.eos)   # this call's sentences only
        try:
            return generate(self, sample, *args, **kwargs)
        finally:
            del self.search.step   # back to the class's step
    wrapped.gendergap_batch_invariant = True
    return wrapped


def install() -> None:
    """Patch fairseq's classes in this process (idempotent). fairseq_entry calls it at import, so a
    fairseq-train rank or fairseq-generate runs the same model function."""
    from fairseq.models.speech_to_text.modules.convolution import Conv1dSubsampler
    from fairseq.sequence_generator import SequenceGenerator

    Conv1dSubsampler.forward = masked_subsampler_forward
    if not getattr(SequenceGenerator._generate, "gendergap_batch_invariant", False):
        SequenceGenerator._generate = own_length_caps(SequenceGenerator._generate)

