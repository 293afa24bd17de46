"""accel with ``transformers.Trainer``: one line, ``callbacks=[AccelCallback()]``.

Trains a random-init tiny Llama (no download) on a synthetic next-token task for a few steps, once with accel's
callback and once without, and prints both loss curves. On a GPU the callback installs accel's kernels and
patches the model (fused norms, SwiGLU, RoPE, attention, and the LM-head loss without logits); on a CPU the
patched model runs its own code where no accel kernel takes a call, so both curves are the same.

    python examples/trainer_llama.py --steps 8            # both runs, losses side by side
    python examples/trainer_llama.py --steps 8 --json     # one JSON line: {"accel": [...], "plain": [...]}

TRL's trainers (``SFTTrainer`` ...) subclass ``Trainer`` and take the same ``callbacks=`` argument.
"""

from __future__ import annotations

import argparse
import json
import tempfile

import torch
import transformers

import accel
from accel.integrations.transformers import AccelCallback


class _Tokens(torch.utils.data.Dataset):
    """``n`` sequences of ``seq`` token ids (a fixed random walk mod the vocabulary), labels = inputs."""

    def __init__(self, n: int, seq: int, vocab: int) -> None:
        g = torch.Generator().manual_seed(0)
        steps = torch.randint(1, 4, (n, seq), generator=g)
        self.ids = steps.cumsum(1) % vocab

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class _Losses(transformers.TrainerCallback):
    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))


def train(steps: int, use_accel: bool, *, hidden: int = 64, vocab: int = 128) -> list[float]:
    """The logged training losses of ``steps`` steps (one per step) of a tiny Llama, with or without accel."""
    cfg = transformers.LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=vocab,
                                   max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    losses = _Losses()
    callbacks = [losses] + ([AccelCallback()] if use_accel else [])
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=4,
                                              learning_rate=1e-3, logging_steps=1, save_strategy="no",
                                              report_to=[], seed=0, use_cpu=accel.device().type == "cpu",
                                              disable_tqdm=True, dataloader_num_workers=0)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=_Tokens(64, 32, vocab),
                                       callbacks=callbacks)
        trainer.train()
    return losses.losses


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8, help="training steps per run (default 8)")
    p.add_argument("--json", action="store_true", help="print one JSON line with both loss curves")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error(f"--steps must be at least 1, got {args.steps}")
    out = {"accel": train(args.steps, True), "plain": train(args.steps, False)}
    if args.json:
        print(json.dumps(out))
    else:
        for i, (a, b) in enumerate(zip(out["accel"], out["plain"]), 1):
            print(f"step {i:3d}  accel {a:.6f}  plain {b:.6f}")
    return out


if __name__ == "__main__":
    main()
