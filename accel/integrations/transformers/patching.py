"""``patch`` and ``unpatch``: a model's known modules get (and give back) their verified accel classes, in place."""

from __future__ import annotations

from typing import Any

from torch import nn

from .causal_lm import as_options
from .decoder_layer import link_layers
from .experts import register as register_experts
from .families import family_of, known, original
from .guards import dispatch_keys
from .report import check_module
from .verify import LOCK, ROLE_MODULES, config_keys, configs, one_node, verdict

__all__ = ["patch", "unpatch"]


def patch(model: nn.Module, *, norms: bool = True, mlp: bool = True, rope: bool = True, loss: bool = True,
          loss_options: Any = None, mlp_recompute: bool | None = None,
          norm_recompute: bool | None = None, eval_loss: bool | None = None) -> nn.Module:
    """Make ``model``'s known modules use accel's ops, in place; returns ``model``.

    Each module accel covers and verifies (module docstring) gets an accel subclass of its own class as
    its class: the same object, the same ``Parameter`` objects and ``state_dict`` keys, the same numerics
    (on CPU and without kernels bit for bit: the ops' references are the modules' own arithmetic). A
    model of a family accel does not know is returned as it is; :func:`report` says what was replaced,
    what already routes (``nn.LayerNorm``) and what was left and why. Patching twice replaces nothing more;
    a second call's ``loss_options``, ``mlp_recompute``, ``norm_recompute`` and ``eval_loss``, where given,
    replace the first's (:func:`unpatch` undoes the replacements).

    Args:
        model: an ``nn.Module`` (a Hugging Face model, or any module holding some).
        norms: replace the RMSNorm modules (``accel::rms_norm_hf``), and the decoder layers (Llama, Mistral,
            Qwen2/3, Gemma 1-3 with Gemma 2/3's sandwich norms, Phi-3: verified by behaviour), whose residual
            adds then run inside the norm
            that reads each sum (``accel::add_rms_norm_hf``: the sum and the normalised sum from one kernel,
            and in backward the norm's input gradient and the residual's summed in it; the same bits as the
            add and the norm). The MLP's add is fused with the next layer's input norm (the last layer's with
            the model's final norm), whose own call then returns the output computed with the add, unless the
            layer's output was changed or replaced since (a hook; a change through ``.data`` is invisible: pass
            ``norms=False`` there), the norm is hooked, or grad mode or activation checkpointing differ between
            the two. Under ``torch.compile``, non-reentrant activation checkpointing and other saved-tensor hooks
            the layers run their own code; in inference mode nothing is handed off; a sharded (FSDP2) or
            subclass weight keeps the model's own add and norm.
        mlp: replace the gated MLPs: SwiGLU (``accel::swiglu``), Gemma's GeGLU (``accel::geglu``); and the
            routed experts of mixture-of-experts layers (transformers 5.x's experts modules: Qwen3-MoE, OLMoE,
            Mixtral, GPT-OSS) with :func:`accel.nn.moe.experts` where torch's grouped GEMM takes the call.
        rope: replace the attention modules' RoPE (``accel::rope``).
        loss: replace the causal LM's loss (:func:`accel.nn.lm_head.lm_head_loss`, Gemma 2's final-logit
            softcap inside it, when ``labels`` are given; ``logits`` are then ``None`` unless the call passes ``return_logits=True``). Where an
            accel loss kernel is registered for the device (``accel.kernels.install()`` on a GPU), a
            training-mode call with ``labels``, no ``past_key_values`` and no ``use_cache`` builds no KV cache
            (``past_key_values`` is ``None``): Hugging Face builds one by default, a copy of each layer's
            keys and values that the step drops with the output (HF Llama on the H200: 16 ``cat`` kernels,
            0.95 ms per step). ``use_cache=True`` builds it. So does a call passing ``position_ids`` without
            an ``attention_mask``, whose mask Hugging Face builds differently without a cache (packed
            sequences get a block-diagonal mask). Without a cache Hugging Face checks its own
            ``position_ids`` for packing (one device-to-host read per forward).
        loss_options: the :class:`accel.nn.LinearCrossEntropyOptions` of the loss (torch's own class on
            torch 2.13+ is read field by field into accel's). Default ``None``: chunks of
            :func:`accel.nn.linear_cross_entropy.model_chunk_rows` rows (at least 1024 where there are as
            many tokens, up to 2048 while the chunk's buffers stay within the head weight's size, at most 1
            GiB of them), ``acc_policy="auto"`` (on a GPU ``"compact"``: the
            logits chunk and the head's weight gradient accumulate in the weight's dtype; ``"accurate"`` keeps
            both in fp32 for one ``[vocab, hidden]`` fp32 scratch more). The loss is fp32 either way, as
            Hugging Face's.
        mlp_recompute: ``True`` (what ``None`` means on a first patch): the replaced MLPs save ``gate`` and
            ``up`` only and recompute ``silu(gate) * up`` in backward, so one ``[tokens, intermediate]``
            tensor per layer is not kept between forward and backward, for one more elementwise pass in
            backward (HF Llama on the H200: 0.60 GiB less peak; ``benchmarks/real_models.py`` measures it). Where
            all three projections are plain ``nn.Linear`` (no hooks, in the activations' dtype, outside
            autocast) and a kernel serves the SwiGLU, the whole MLP is one autograd node
            (:func:`accel.kernels.ops.swiglu.mlp.swiglu_mlp`); with a fused ``gate_up_proj`` (Phi-3) the down
            projection alone (:func:`accel.kernels.ops.swiglu.linear.swiglu_linear`). The same bits either
            way but for the one-node MLP's input gradient, whose two terms are summed inside a GEMM (one
            rounding, not two). ``False``: the product is saved, as the model's code does (and double
            backward works). ``None`` on a model patched before: keep its setting.
        norm_recompute: ``True`` (what ``None`` means on a first patch): a replaced RMSNorm's output is not
            kept for backward by the modules it feeds; it is recomputed there from the norm's input and
            weight (which the norm keeps anyway), by the same kernel (the same bits): the MLP that takes it
            whole (``swiglu_mlp``) and the attention's q/k/v projections. Where those are plain ``nn.Linear``
            they run as one autograd node (:func:`accel.integrations._shared_linears.shared_input_linears`)
            whose backward sums their input gradients inside the GEMMs (two add kernels fewer per layer; one
            rounding of the sum, not two); else saved-tensor hooks around the attention's forward recompute
            the input for each projection. One ``[tokens, hidden]`` tensor per norm is not kept, for one norm
            forward more in backward. Neither one-node path has a double backward (``create_graph=True``
            raises): pass ``norm_recompute=False, mlp_recompute=False`` for that. An output (or the norm's
            input) changed in place before the consumer keeps it is kept as it is (a change through ``.data``
            is invisible: pass ``False`` there); under other saved-tensor hooks (non-reentrant activation
            checkpointing, offloading) nothing is recomputed and the MLP runs as modules. ``False``: the outputs are kept, as the model's code
            does. ``None`` on a model patched before: keep its setting.
        eval_loss: ``True``: a call with ``labels`` under ``no_grad`` (an evaluation loop that reads the loss
            alone) also takes the fused loss, its ``logits`` ``None`` unless the call passes
            ``return_logits=True``; no ``[tokens, vocab]`` logits nor their fp32 copy are made. ``False`` (what
            ``None`` means on a first patch): such calls run the model's own code and return its logits, as
            ``Trainer.evaluate``'s ``compute_metrics`` needs them. ``None`` on a model patched before: keep
            its setting.

    Returns:
        ``model`` itself.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``, or ``loss_options`` cannot be read as
            :class:`accel.nn.LinearCrossEntropyOptions` (nothing is changed then).
    """
    check_module(model, "patch")
    if loss_options is not None:  # checked before any module changes (not at the first training step)
        from accel.nn import linear_cross_entropy as lce

        loss_options = as_options(lce, loss_options)
    dispatch_keys()
    register_experts()
    wanted = {"rms_norm": norms, "mlp": mlp, "attention": rope, "causal_lm": loss, "decoder_layer": norms,
              "experts": mlp}
    flags = {"mlp": mlp_recompute, "rms_norm": norm_recompute}
    cfgs = configs(model)
    with LOCK, config_keys():
        for module in model.modules():
            cls = type(module)
            k = known(cls)
            if k is None and original(cls) is not cls:  # patched before: only the options apply
                orig = known(original(cls))
                if orig is not None and orig[1] == "causal_lm":
                    _causal_lm_options(module, loss_options, eval_loss)
                if orig is not None and orig[1] in _FLAGS:
                    _set_flag(module, _FLAGS[orig[1]], flags[orig[1]])
                continue
            if k is None or not wanted[k[1]]:
                continue
            family, role, variant = k
            accel_cls, _ = verdict(cls, role, variant, cfgs.get(family))
            if accel_cls is not None and ROLE_MODULES[role].instance_reason(module) is None:
                module.__class__ = accel_cls
                if role == "attention" and one_node(cls, cfgs.get(family)):
                    vars(module)["accel_one_node"] = True
                if role == "causal_lm":
                    _causal_lm_options(module, loss_options, eval_loss)
                if role in _FLAGS:
                    _set_flag(module, _FLAGS[role], flags[role])
        link_layers(model, lambda m: family_of(original(type(m))) is not None)
    return model


def _causal_lm_options(module: nn.Module, loss_options: Any, eval_loss: bool | None) -> None:
    """Record ``patch``'s loss options on a replaced causal LM (``None``: keep what it has)."""
    if loss_options is not None:
        module.accel_loss_options = loss_options
    if eval_loss is not None:
        vars(module)["accel_eval_loss"] = bool(eval_loss)


#: The per-module switch of patch's recompute options, by role: the attribute the module's forward reads.
_FLAGS = {"mlp": "accel_mlp_recompute", "rms_norm": "accel_norm_recompute"}


def _set_flag(module: nn.Module, attr: str, value: bool | None) -> None:
    """Record one of ``patch``'s recompute options on a replaced module: ``None`` keeps what it has, ``True`` is
    the default (no attribute), ``False`` the attribute its forward reads."""
    if value is False:
        setattr(module, attr, False)
    elif value:
        vars(module).pop(attr, None)


def unpatch(model: nn.Module) -> nn.Module:
    """Give every module of ``model`` that :func:`patch` (or a model built under :func:`enable`) replaced its
    original class back, in place; returns ``model``. Parameters and state are untouched.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
    """
    check_module(model, "unpatch")
    with LOCK:
        for module in model.modules():
            orig = original(type(module))
            if orig is not type(module):
                module.__class__ = orig
                vars(module).pop("accel_loss_options", None)
                vars(module).pop("accel_eval_loss", None)
                vars(module).pop("accel_next_norm", None)
                vars(module).pop("accel_one_node", None)
                for attr in _FLAGS.values():
                    vars(module).pop(attr, None)
    return model
