"""The experts role: the routed experts of Hugging Face's mixture-of-experts layers (transformers 5.x's experts
modules, the classes ``@use_experts_implementation`` decorates: Qwen3-MoE, OLMoE, Mixtral, GPT-OSS and their kin)
on :func:`accel.nn.moe.experts`: a gather, two grouped GEMMs and a weighted combine, with the gated product on
``accel::swiglu`` (``accel::geglu``) where the module's gate is transformers' default one and its activation
computes SiLU (GELU-tanh), else the module's own ``_apply_gate`` (GPT-OSS's clamped one).

The router, its top-k and the auxiliary loss are the model's own: only the experts' call changes. It runs where
torch's grouped GEMM takes the call (:func:`accel.nn.moe.native_grouped_mm_takes`: CUDA, bf16, sm80+) or an accel
kernel serves ``accel::grouped_mm``; elsewhere the module's own forward runs (whatever
``config._experts_implementation`` chose), so accel is never the slower path. transformers 4.x holds experts as
``nn.ModuleList``s of MLPs, which have no class of this role (their MLPs are the MLP role's).

:func:`register` also adds ``"accel"`` to transformers' ``ALL_EXPERTS_FUNCTIONS`` (``experts_implementation=
"accel"``), the same function.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from accel.kernels.ops.geglu import op as geglu_ops
from accel.kernels.ops.swiglu import op as swiglu_ops
from accel.nn import moe

from .code import subclass
from .guards import accel_takes, device_type, instance_forward, is_sharded, live
from .mlp import is_gelu_tanh, is_silu

__all__ = ["GEMM_OP", "build", "experts_forward", "instance_reason", "register", "serves"]

GEMM_OP = "accel::grouped_mm"
#: experts implementations that are kernels the user chose (the hub's): accel steps aside for them
_CHOSEN = ("deepgemm", "sonicmoe")


def instance_reason(module: nn.Module) -> str | None:
    """Why these experts are not replaced although their class is verified, or ``None``."""
    if getattr(module, "_is_expert_parallel", False):
        return "its experts are sharded across ranks (expert parallelism): accel steps aside"
    if getattr(module, "has_post_expert_norm", False):
        return "it normalises each expert's output (has_post_expert_norm): accel's experts do not"
    impl = getattr(getattr(module, "config", None), "_experts_implementation", None)
    if impl in _CHOSEN:
        return f"its config chose the {impl!r} experts kernel: accel steps aside for it"
    if any(is_sharded(p) for p in module.parameters(recurse=False)):
        return "its weights are DTensors (FSDP2 or tensor parallel): accel steps aside"
    return instance_forward(module)


def _default_gate(module: nn.Module) -> bool:
    gate = getattr(type(module), "_apply_gate", None)
    return getattr(gate, "__qualname__", "") == "_default_apply_gate" and getattr(
        gate, "__module__", "").startswith("transformers.")


def _activation(module: nn.Module) -> Any:
    """``[S, H] -> [S, I]``: the gated product as the module computes it, on accel's fused op where it is the
    default gate (``act(gate) * up`` of the halves) of SiLU or GELU-tanh and a kernel takes it."""
    if not getattr(module, "has_gate", True):
        return module.act_fn
    act = getattr(module, "act_fn", None)
    op = None
    if _default_gate(module):
        op = (swiglu_ops.swiglu, "accel::swiglu") if is_silu(act) else (
            (geglu_ops.geglu, "accel::geglu") if is_gelu_tanh(act) else None)
    if op is None:
        return module._apply_gate

    def gated(h: torch.Tensor) -> torch.Tensor:
        gate, up = h.chunk(2, dim=-1)
        if accel_takes(op[1], gate, up):
            return op[0](gate, up)
        return module._apply_gate(h)
    return gated


def _takes(module: nn.Module, x: torch.Tensor, w: torch.Tensor) -> bool:
    return moe.native_grouped_mm_takes(x, w) or live(GEMM_OP, device_type(x)) is not None


def serves(device: str, dtype: torch.dtype) -> bool:
    """Whether replaced experts with weights of ``dtype`` on a ``device`` device take accel's path (torch's grouped
    GEMM takes the call, or an accel kernel serves ``accel::grouped_mm``): what :func:`report` says."""
    if live(GEMM_OP, device) is not None:
        return True
    if device != "cuda" or dtype != torch.bfloat16 or not torch.cuda.is_available():
        return False
    probe = torch.empty(0, 8, dtype=dtype, device="cuda")
    return moe.native_grouped_mm_takes(probe, torch.empty(1, 8, 8, dtype=dtype, device="cuda"))


def experts_forward(self: nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor,
                    top_k_weights: torch.Tensor) -> torch.Tensor:
    """transformers' experts call (``ALL_EXPERTS_FUNCTIONS``' signature) on :func:`accel.nn.moe.experts`:
    ``hidden_states`` ``[T, D]``, ``top_k_index`` and ``top_k_weights`` ``[T, K]``; returns ``[T, D]`` in
    ``hidden_states``' dtype. Experts accel does not compute (a norm after each expert, expert-parallel shards
    whose foreign ids are sentinels, other than 2-D tokens) run transformers' own ``batched_mm`` function (its
    ``grouped_mm`` needs 16-byte aligned strides on a CPU that transformers checks on torch <= 2.10 only)."""
    if (getattr(self, "has_post_expert_norm", False) or getattr(self, "_is_expert_parallel", False)
            or hidden_states.dim() != 2):
        from transformers.integrations import moe as hf_moe

        return hf_moe.batched_mm_experts_forward(self, hidden_states, top_k_index, top_k_weights)
    w_in = self.gate_up_proj if getattr(self, "has_gate", True) else self.up_proj
    w_out = self.down_proj
    if not getattr(self, "is_transposed", False):
        w_in, w_out = w_in.transpose(-2, -1), w_out.transpose(-2, -1)
    b_in = b_out = None
    if getattr(self, "has_bias", False):
        b_in = self.gate_up_proj_bias if getattr(self, "has_gate", True) else self.up_proj_bias
        b_out = self.down_proj_bias
    out = moe.experts(hidden_states.to(w_in.dtype), top_k_index, top_k_weights, w_in, w_out, _activation(self),
                      b_in=b_in, b_out=b_out)
    return out.to(hidden_states.dtype)


_INDEX, _WEIGHTS = ("top_k_index", "router_indices"), ("top_k_weights", "routing_weights")


def build(cls: type, variant: str | None) -> tuple[type | None, str | None]:
    """``(accel subclass, None)``, or ``(None, reason)`` where the class is not one transformers' experts interface
    dispatches (no ``@use_experts_implementation``: its weights' layout is unknown)."""
    forward = getattr(cls, "forward", None)
    if "experts_interface" not in getattr(getattr(forward, "__code__", None), "co_freevars", ()):
        return None, "its forward is not dispatched by transformers' experts interface (@use_experts_implementation)"

    def forward_accel(self, hidden_states, *args, **kwargs):
        index = args[0] if args else next((kwargs[k] for k in _INDEX if k in kwargs), None)
        weights = args[1] if len(args) > 1 else next((kwargs[k] for k in _WEIGHTS if k in kwargs), None)
        extra = len(args) > 2 or set(kwargs) - set(_INDEX) - set(_WEIGHTS)
        w_in = self._parameters.get("gate_up_proj" if getattr(self, "has_gate", True) else "up_proj")
        if (extra or index is None or weights is None or type(hidden_states) is not torch.Tensor
                or hidden_states.dim() != 2 or w_in is None or type(w_in.data) is not torch.Tensor
                or getattr(self, "_is_expert_parallel", False) or getattr(self, "has_post_expert_norm", False)
                or not _takes(self, hidden_states, w_in.transpose(-2, -1) if not self.is_transposed else w_in)):
            return forward(self, hidden_states, *args, **kwargs)
        return experts_forward(self, hidden_states, index, weights)

    forward_accel.__doc__ = forward.__doc__
    forward_accel.__signature__ = inspect.signature(forward)
    return subclass(cls, "experts", {"forward": forward_accel}), None


def register() -> bool:
    """Add ``"accel"`` to transformers' ``ALL_EXPERTS_FUNCTIONS`` (5.x; idempotent): ``from_pretrained(...,
    experts_implementation="accel")`` then calls :func:`experts_forward`. ``False`` where transformers has no
    experts interface (4.x)."""
    try:
        from transformers.integrations import moe as hf_moe
    except ImportError:
        return False
    interface = getattr(hf_moe, "ALL_EXPERTS_FUNCTIONS", None)
    if interface is None:
        return False
    if "accel" not in interface:
        interface.register("accel", experts_forward)
    return True
