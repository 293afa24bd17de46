"""One line for ``transformers.Trainer`` (and TRL's trainers, which subclass it): ``callbacks=[AccelCallback()]``
patches the model the trainer trains when training begins.

Imports ``transformers`` (its ``TrainerCallback``): reached as ``accel.integrations.transformers.AccelCallback``,
imported only when asked for.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from .patching import patch
from .report import report

__all__ = ["AccelCallback"]


class AccelCallback(TrainerCallback):
    """A ``TrainerCallback`` that calls :func:`accel.integrations.transformers.patch` on the trainer's model at
    ``on_train_begin`` (before the first step; the optimizer already holds the same ``Parameter`` objects, which
    patching keeps) and, with ``install_kernels=True``, :func:`accel.kernels.install` first.

    Args:
        install_kernels: also install accel's kernels (``accel.kernels.install()``; default ``True``; on a
            machine without an accelerator they are listed but not installed, and the model runs its own code).
        **patch_options: keyword arguments of :func:`accel.integrations.transformers.patch` (``loss=False``,
            ``loss_options=...``, ...).

    Example:
        >>> from accel.integrations.transformers import AccelCallback
        >>> callback = AccelCallback(install_kernels=False)
        >>> callback.patch_options
        {}

    Attributes:
        report: the :class:`accel.integrations.transformers.PatchReport` of the last model patched (``None``
            before training begins).
    """

    def __init__(self, *, install_kernels: bool = True, **patch_options: Any) -> None:
        self.install_kernels = install_kernels
        self.patch_options = patch_options
        self.report = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if model is None:
            return
        if self.install_kernels:
            import accel.kernels

            accel.kernels.install()
        patch(model, **self.patch_options)
        self.report = report(model)
