# LAB FIXTURE STAND-IN -- written for the gpufleet.llm test lab. It is not the DFlash authors' code
# and it is not meant to produce good drafts. It exists because real DFlash drafters are normal Hub
# repositories whose config.json "auto_map" points at a custom-code file named dflash.py (about
# 8 KB), which SGLang and transformers import with trust_remote_code. The lab needs a file of that
# name, size and shape: importable without a GPU, readable, and honest about what it is.
"""A small, readable DFlash-style draft model for the gpufleet.llm lab.

How a DFlash drafter works (in one paragraph): the target model runs normally; at a few of its
layers (``dflash_config.target_layer_ids``) the hidden states are captured. The drafter concatenates
those captured states, projects them back to ``hidden_size`` with one linear layer (``fc``), and
then runs ``num_hidden_layers`` small transformer layers over a block of ``block_size`` positions
whose input tokens are all ``dflash_config.mask_token_id``. All positions of the block are predicted
in one forward pass (block diffusion rather than token-by-token drafting), using the *target's*
embedding table and LM head -- the drafter has none of its own, which is why its ``hidden_size``
and ``vocab_size`` must equal the target's. The target then verifies the drafted block in a single
pass and accepts the longest agreeing prefix; the average accepted length is what operators measure.

Only :func:`check_compatible` is used by the lab (it is pure Python); the torch module below is a
faithful-in-shape sketch that loads the fixture's ``model.safetensors`` tensor names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Sequence

__all__ = ["DFlashSettings", "check_compatible", "DFlashDraftModel"]

LAB_FIXTURE = True


@dataclass(frozen=True)
class DFlashSettings:
    """The handful of config keys a DFlash drafter is defined by."""

    hidden_size: int
    vocab_size: int
    num_hidden_layers: int
    num_target_layers: int
    block_size: int
    target_layer_ids: List[int] = field(default_factory=list)
    mask_token_id: int = 0

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "DFlashSettings":
        dflash = config.get("dflash_config") or {}
        return cls(
            hidden_size=int(config["hidden_size"]),
            vocab_size=int(config["vocab_size"]),
            num_hidden_layers=int(config["num_hidden_layers"]),
            num_target_layers=int(config["num_target_layers"]),
            block_size=int(config["block_size"]),
            target_layer_ids=[int(i) for i in dflash.get("target_layer_ids", [])],
            mask_token_id=int(dflash.get("mask_token_id", 0)),
        )


def _text_config(target_config: Mapping[str, Any]) -> Mapping[str, Any]:
    # Multimodal targets (Kimi K2.x) nest the language model's numbers under text_config.
    return target_config.get("text_config") or target_config


def check_compatible(draft_config: Mapping[str, Any], target_config: Mapping[str, Any]) -> List[str]:
    """Return human-readable problems that would make this drafter unusable with that target.

    An empty list means compatible. These are the checks operators had to do by eye.
    """
    problems: List[str] = []
    draft = DFlashSettings.from_config(draft_config)
    text = _text_config(target_config)
    target_layers = int(text["num_hidden_layers"])
    if draft.hidden_size != int(text["hidden_size"]):
        problems.append(
            f"hidden_size {draft.hidden_size} != target hidden_size {text['hidden_size']}"
        )
    if draft.vocab_size != int(text["vocab_size"]):
        problems.append(f"vocab_size {draft.vocab_size} != target vocab_size {text['vocab_size']}")
    if draft.num_target_layers != target_layers:
        problems.append(
            f"num_target_layers {draft.num_target_layers} != target num_hidden_layers {target_layers}"
        )
    if not draft.target_layer_ids:
        problems.append("dflash_config.target_layer_ids is empty")
    for layer_id in draft.target_layer_ids:
        if not 0 <= layer_id < target_layers:
            problems.append(f"target layer id {layer_id} outside 0..{target_layers - 1}")
    if list(draft.target_layer_ids) != sorted(set(draft.target_layer_ids)):
        problems.append("dflash_config.target_layer_ids must be strictly increasing")
    if not 0 <= draft.mask_token_id < draft.vocab_size:
        problems.append(f"mask_token_id {draft.mask_token_id} outside the vocabulary")
    if draft.block_size < 2:
        problems.append(f"block_size {draft.block_size} is too small to draft anything")
    return problems


try:  # torch is optional: controller-side checks must not need it.
    import torch
    from torch import nn
except ImportError:  # pragma: no cover - exercised on hosts without torch
    torch = None
    nn = None


if nn is not None:

    class _RMSNorm(nn.Module):
        def __init__(self, size: int, eps: float = 1e-6) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(size))
            self.eps = eps

        def forward(self, x):
            scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
            return (x.float() * scale).to(x.dtype) * self.weight

    class _Attention(nn.Module):
        def __init__(self, hidden: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.q_proj = nn.Linear(hidden, hidden, bias=False)
            self.k_proj = nn.Linear(hidden, hidden, bias=False)
            self.v_proj = nn.Linear(hidden, hidden, bias=False)
            self.o_proj = nn.Linear(hidden, hidden, bias=False)

        def forward(self, x, context):
            # Queries come from the block being drafted; keys/values also see the target context,
            # and no causal mask inside the block: every position is drafted at once.
            batch, length, hidden = x.shape
            kv_input = torch.cat([context, x], dim=1)

            def split(t):
                return t.view(batch, -1, self.heads, hidden // self.heads).transpose(1, 2)

            q, k, v = split(self.q_proj(x)), split(self.k_proj(kv_input)), split(self.v_proj(kv_input))
            out = nn.functional.scaled_dot_product_attention(q, k, v)
            return self.o_proj(out.transpose(1, 2).reshape(batch, length, hidden))

    class _Layer(nn.Module):
        def __init__(self, hidden: int, intermediate: int, heads: int) -> None:
            super().__init__()
            self.input_layernorm = _RMSNorm(hidden)
            self.self_attn = _Attention(hidden, heads)
            self.post_attention_layernorm = _RMSNorm(hidden)
            self.mlp = nn.ModuleDict(
                {
                    "gate_proj": nn.Linear(hidden, intermediate, bias=False),
                    "up_proj": nn.Linear(hidden, intermediate, bias=False),
                    "down_proj": nn.Linear(intermediate, hidden, bias=False),
                }
            )

        def forward(self, x, context):
            x = x + self.self_attn(self.input_layernorm(x), context)
            h = self.post_attention_layernorm(x)
            gated = nn.functional.silu(self.mlp["gate_proj"](h)) * self.mlp["up_proj"](h)
            return x + self.mlp["down_proj"](gated)

    class DFlashDraftModel(nn.Module):
        """Shape-faithful sketch; the lab fixture's weights are random."""

        def __init__(self, config: Dict[str, Any], hidden: int = 0, intermediate: int = 0,
                     heads: int = 4) -> None:
            super().__init__()
            self.settings = DFlashSettings.from_config(config)
            # The fixture stores tiny tensors; callers pass the tensor sizes, not config sizes.
            hidden = hidden or self.settings.hidden_size
            intermediate = intermediate or int(config.get("intermediate_size", 4 * hidden))
            n_captured = len(self.settings.target_layer_ids)
            self.fc = nn.Linear(n_captured * hidden, hidden, bias=False)
            self.hidden_norm = _RMSNorm(hidden)
            self.layers = nn.ModuleList(
                _Layer(hidden, intermediate, heads) for dummy in range(self.settings.num_hidden_layers)
            )
            self.norm = _RMSNorm(hidden)

        def forward(self, captured: Sequence["torch.Tensor"], block_embeddings):
            """captured: one [batch, ctx, hidden] tensor per target layer id;
            block_embeddings: the target's embedding of block_size mask tokens."""
            context = self.hidden_norm(self.fc(torch.cat(list(captured), dim=-1)))
            x = block_embeddings
            for layer in self.layers:
                x = layer(x, context)
            return self.norm(x)  # the target's LM head turns this into draft logits

else:

    class DFlashDraftModel:  # type: ignore[no-redef]
        def __init__(self, *args, **kwargs):
            raise RuntimeError("DFlashDraftModel needs torch; check_compatible() does not.")
