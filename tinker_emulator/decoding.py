"""A large Llama-family model's prompt passes and decoding steps in a few tensor operations a
layer, computing what Hugging Face and PEFT compute.

Through Hugging Face and PEFT, a decoding step of SmolLM2-135M (30 layers of 7 projections, each with
LoRA's two small matmuls beside it) took 114 ms for 20 rows with 500 positions of keys in a
``preset=smollm2-tool`` step on a 2-core AMD EPYC (bfloat16, one thread), where reading its weights
and keys once takes about 11 ms. The module calls around each small matmul cost more than its
arithmetic, and the attention's 4-D matmul copied every layer's keys and values at every step.
``Decoder`` runs the same arithmetic with fewer calls: the adapter's ``A`` matrices of the
projections that read one input (query, key and value; gate and up) stacked into one product,
and the attention's products as ``keys @ queries`` on the cache's views (one bmm each for scores
and values; the 4-D matmul was 4x slower on them).

A prompt pass (``extend`` with many tokens a row, ``prefill.py``) runs in blocks of at most
``BLOCK_POSITIONS`` positions, so that no activation is large enough for the allocator to map
fresh pages for it: 64 prompts of 158 new tokens took 10.5-12.9 s through Hugging Face, 5.3-6.5 s
here, equally close to a float32 pass (mean KL 0.0016 nats for both).

A decoding step's results equal the Hugging Face model's under the same autocast (bfloat16
products, a float32 residual stream, norms and softmax; ``tests/local/test_decoding.py``) up to the
rounding of stacked products; a prompt pass's, up to the rounding of another attention kernel.
Architectures it does not know (``for_model`` returns ``None``) run through Hugging Face as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from peft.tuners.lora import LoraLayer
from torch.nn import functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from tinker_emulator import attention, kv_cache

# Positions of a prompt pass computed together: a block's activations (SmolLM2's MLP products are
# 1,536 wide) stay below the allocator's mmap threshold (``memory.py``, 8 MiB), so the heap's memory
# is reused instead of pages mapped and zeroed afresh by every operation. Passed whole, 64 prompts of
# 158 new tokens took 9.9 s of which 6.9 s in the kernel (4 million page faults), against 5.3 s when
# nothing was mapped afresh (2-core AMD EPYC, bfloat16, 2 threads).
BLOCK_POSITIONS = 1024
# Architectures whose decoding step this module computes (Hugging Face's class names).
SUPPORTED = frozenset({"LlamaForCausalLM"})


class UnsupportedAdapter(Exception):
    """An adapter of a kind ``_Projections`` does not compute (DoRA, a LoRA bias, several at once)."""


def _adapter(module: Any) -> tuple[torch.Tensor, torch.Tensor, float] | None:
    """The active LoRA adapter's ``A``, ``B`` and scale on ``module`` (``None``: none active)."""
    if not isinstance(module, LoraLayer):
        return None
    layer: Any = module  # PEFT's LoRA linear layer
    active = [] if layer.disable_adapters else [name for name in layer.active_adapters if name in layer.lora_A]
    if not active:
        return None
    name = active[0]
    if len(active) > 1 or layer.use_dora.get(name) or getattr(layer, "lora_bias", {}).get(name):
        raise UnsupportedAdapter(name)
    return layer.lora_A[name].weight, layer.lora_B[name].weight, float(layer.scaling[name])


class _Projections:
    """Linear layers that read the same input, each on its base weight, plus the active adapter's
    ``B (A x) scale``, with every layer's ``A`` stacked into one product. Adapters compute in the
    weights' dtype, as PEFT's do under autocast."""

    def __init__(self, modules: list[Any], dtype: torch.dtype) -> None:
        bases: list[Any] = [m.get_base_layer() if isinstance(m, LoraLayer) else m for m in modules]
        self.weights = [(base.weight, base.bias) for base in bases]
        self.a: torch.Tensor | None = None
        self.b: list[tuple[torch.Tensor, float, int, int] | None] = [None] * len(modules)
        stacked: list[torch.Tensor] = []
        for i, adapter in enumerate(_adapter(m) for m in modules):
            if adapter is not None:
                a, b, scale = adapter
                start = sum(len(t) for t in stacked)
                self.b[i] = (b.to(dtype), scale, start, start + len(a))
                stacked.append(a)
        if stacked:
            self.a = torch.cat(stacked).to(dtype)

    def __call__(self, x: torch.Tensor) -> list[torch.Tensor]:
        outputs = [F.linear(x, weight, bias) for weight, bias in self.weights]
        if self.a is not None:
            down = F.linear(x, self.a)
            for i, up in enumerate(self.b):
                if up is not None:
                    b, scale, start, end = up
                    outputs[i] = outputs[i] + F.linear(down[..., start:end], b) * scale
        return outputs


@dataclass
class _Layer:
    qkv: _Projections
    o: _Projections
    gate_up: _Projections
    down: _Projections
    input_norm: torch.Tensor
    post_attention_norm: torch.Tensor


class Decoder:
    """Prompt passes and decoding steps of a model with the adapter that was active when it was built."""

    def __init__(self, base: Any, dtype: torch.dtype, use_threads: Callable[[int], None]) -> None:
        config = base.config
        self.body = base.model
        self.layers = [
            _Layer(
                qkv=_Projections([layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj], dtype),
                o=_Projections([layer.self_attn.o_proj], dtype),
                gate_up=_Projections([layer.mlp.gate_proj, layer.mlp.up_proj], dtype),
                down=_Projections([layer.mlp.down_proj], dtype),
                input_norm=layer.input_layernorm.weight,
                post_attention_norm=layer.post_attention_layernorm.weight,
            )
            for layer in self.body.layers
        ]
        self.head = _Projections([base.lm_head], dtype)
        self.eps = config.rms_norm_eps
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.dtype = dtype
        self.use_threads = use_threads

    def _norm(self, hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Llama's RMSNorm of the float32 residual stream."""
        return weight * (hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + self.eps))

    def step(self, cache: Any, tokens: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Feed each row's next token (``tokens``, at ``positions``; ``mask``: the attention mask
        over the cache and this token), appending its keys and values to ``cache``; returns the
        next logits, float32 ``(rows, vocabulary)``."""
        return self.extend(cache, tokens[:, None], mask, positions[:, None])

    @torch.inference_mode()
    def extend(self, cache: Any, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Feed ``ids`` ``(rows, tokens)`` at ``positions`` (same shape; ``mask``: the attention mask
        over the cache and these tokens, left padding hidden), appending their keys and values to
        ``cache``; returns the logits after each row's last token, float32 ``(rows, vocabulary)``.
        A prompt pass (``prefill.py``) is this with many tokens, a decoding step with one."""
        self.use_threads(ids.numel())
        with torch.autocast(ids.device.type, enabled=False):
            return self._extend(cache, ids, mask, positions)

    def _extend(self, cache: Any, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        (rows, new), dim = ids.shape, self.head_dim
        hidden = self.body.embed_tokens(ids).float()  # the residual stream, updated block by block
        cos, sin = self.body.rotary_emb(hidden, positions)  # (rows, new, head_dim)
        visible = _visible(mask, new)
        blocks = _blocks(rows, new)
        queries = hidden.new_empty((rows, self.heads, new, dim), dtype=self.dtype)
        for index, layer in enumerate(self.layers):
            keys = hidden.new_empty((rows, self.kv_heads, new, dim), dtype=self.dtype)
            values = torch.empty_like(keys)
            for r, p in blocks:  # queries, keys and values of every block, then the cache grows once
                q, k, v = layer.qkv(self._norm(hidden[r, p], layer.input_norm).to(self.dtype))
                shape = (*q.shape[:2], -1, dim)
                q, k = apply_rotary_pos_emb(
                    q.view(shape).transpose(1, 2), k.view(shape).transpose(1, 2), cos[r, p], sin[r, p]
                )
                queries[r, :, p], keys[r, :, p], values[r, :, p] = q, k, v.view(shape).transpose(1, 2)
            keys, values = kv_cache.append(cache, index, keys, values)
            for r, p in blocks:
                if new == 1:
                    attended = self._attend_one(queries[r], keys[r], values[r], visible[r])
                else:
                    cut = keys.shape[2] - new + (p.stop or new)  # no key after the block's last query is visible
                    k, v, seen = keys[r, :, :cut], values[r, :, :cut], visible[r, :, p, :cut]
                    attended = attention.attend(queries[r, :, p], k, v, seen, dim**-0.5)
                    attended = attended.flatten(2)
                (out,) = layer.o(attended)
                stream = hidden[r, p]
                stream += out
                gate, up = layer.gate_up(self._norm(stream, layer.post_attention_norm).to(self.dtype))
                (mlp,) = layer.down(F.silu(gate) * up)
                stream += mlp
        (logits,) = self.head(self._norm(hidden[:, -1], self.body.norm.weight).to(self.dtype))
        return logits.float()

    def _attend_one(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: torch.Tensor
    ) -> torch.Tensor:
        """One query a row (a decoding step): each key/value head with its query heads as rows."""
        rows, dim, groups, length = len(q), self.head_dim, self.heads // self.kv_heads, keys.shape[2]
        keys = keys.reshape(rows * self.kv_heads, length, dim)
        values = values.reshape(rows * self.kv_heads, length, dim)
        # keys @ queries, not queries @ keys^T: 4x faster on the cache's strided views, though oneDNN's
        # bfloat16 bmm still copies them (about 20 ms of a 70 ms step at 20 rows x 500 positions)
        scores = torch.bmm(keys, q.reshape(rows * self.kv_heads, groups, dim).transpose(1, 2)).transpose(1, 2)
        scores = scores.float().view(rows, self.kv_heads, groups, length) * dim**-0.5
        scores = scores.masked_fill(~visible, torch.finfo(torch.float32).min)
        weights = torch.softmax(scores, dim=-1).to(self.dtype).view(rows * self.kv_heads, groups, length)
        return torch.bmm(weights, values).reshape(rows, 1, self.heads * dim)


def _blocks(rows: int, new: int) -> list[tuple[slice, slice]]:
    """The ``(rows, positions)`` blocks of a pass of ``new`` positions a row, each of at most
    ``BLOCK_POSITIONS`` positions where a row allows: whole rows together, a long row in pieces."""
    if rows * new <= BLOCK_POSITIONS:
        return [(slice(None), slice(None))]
    if new <= BLOCK_POSITIONS:
        per = BLOCK_POSITIONS // new
        return [(slice(start, start + per), slice(None)) for start in range(0, rows, per)]
    return [
        (slice(row, row + 1), slice(start, start + BLOCK_POSITIONS))
        for row in range(rows)
        for start in range(0, new, BLOCK_POSITIONS)
    ]


def _visible(mask: torch.Tensor, new: int) -> torch.Tensor:
    """Which keys each of the last ``new`` positions may attend to, ``(rows, 1, new, keys)``: the
    unpadded ones up to itself, and always itself (a padding position attends to itself alone, so
    that no row of scores is empty)."""
    keys = mask.shape[1]
    own = torch.arange(keys - new, keys, device=mask.device)[:, None]
    upto = torch.arange(keys, device=mask.device)[None, :] <= own
    return ((mask.bool()[:, None, None, :] & upto) | (torch.arange(keys, device=mask.device) == own)).view(
        len(mask), 1, new, keys
    )


def for_model(model: Any, dtype: torch.dtype, use_threads: Callable[[int], None]) -> Decoder | None:
    """A ``Decoder`` of ``model`` (a Hugging Face model, or PEFT's wrapper of one) with its active
    adapter, computing in ``dtype`` (the dtype its linear layers hold); ``None`` where this module
    does not compute its architecture or adapter, and Hugging Face decodes."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    if type(base).__name__ not in SUPPORTED or config.hidden_act != "silu" or getattr(config, "mlp_bias", False):
        return None
    try:
        return Decoder(base, dtype, use_threads)
    except UnsupportedAdapter:
        return None
