"""The random streams :mod:`accel.random` reads and writes: the CPU generator, or the default generators of one
accelerator backend's devices, with the checks every public function shares (a seed's range, a state's type,
size and device). Private to :mod:`accel.random` and :mod:`accel._rng_snapshot`; the names are theirs.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from accel import _compat, _select
from accel.backends import Backend
from accel.errors import DeviceIndexError, RngStateError, RngUnsupportedError, SeedError

__all__ = ["CPU", "KNOWN_STATES", "SEED_MAX", "SEED_MIN", "CpuStream", "DeviceStream", "active", "check_seed",
           "check_state", "fresh", "numpy_module", "resolve", "stream_for"]

SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1

#: Sizes of known generator states, to say what a wrongly sized state probably is.
KNOWN_STATES = {
    5056: "a torch CPU (mt19937) state",
    16: "a CUDA/ROCm/XPU Philox state",
    44: "an MPS Philox state",
    36: "an MPS Philox state of torch < 2.5",
}


# -- streams: the CPU generator, or the generators of one accelerator backend ----------------------------
class CpuStream:
    """The torch CPU generator (one "device")."""

    name = "cpu"
    device_type = "cpu"

    def label(self, index: int | None) -> str:
        return "cpu"

    def count(self) -> int:
        return 1

    def current_index(self) -> int:
        return 0

    def generator(self, index: int | None) -> torch.Generator:
        return torch.default_generator

    def get_state(self, index: int | None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_state(self, state: torch.Tensor, index: int | None) -> None:
        torch.set_rng_state(fresh(state))

    def initial_seed(self, index: int | None) -> int:
        return torch.initial_seed()

    def manual_seed_all(self, seed: int) -> None:
        torch.default_generator.manual_seed(seed)


CPU = CpuStream()


class DeviceStream:
    """The default generators of one accelerator backend's devices."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.name = backend.name
        self.device_type = backend.torch_device_type

    def label(self, index: int | None) -> str:
        where = self.device_type if index is None else f"{self.device_type}:{index}"
        return where if self.name == self.device_type else f"{where} ({self.name})"

    def _module(self) -> Any:
        mod = self.backend.device_module()
        if mod is None:
            raise RngUnsupportedError(
                f"accel.random: torch {torch.__version__} has no device module for {self.device_type!r}. "
                f"RNG state needs torch.{self.device_type}. Install the torch build for this hardware."
            )
        return mod

    @staticmethod
    def _upstream() -> Any:
        """``torch.accelerator.random`` where the running torch has it, else ``None``."""
        return _compat.accelerator_random()

    def _dev(self, index: int | None) -> str | torch.device:
        return self.device_type if index is None else torch.device(self.device_type, index)

    def count(self) -> int:
        return self.backend.device_count()

    def current_index(self) -> int:
        return self.backend.rng_current_index(self._module())

    def generator(self, index: int | None) -> torch.Generator:
        try:
            return self.backend.default_generator(index)
        except AttributeError as exc:
            raise RngUnsupportedError(
                f"accel.random.default_generator({self.label(index)!r}): {exc}. accel reads default generators "
                f"from torch.{self.device_type}.default_generators or torch.mps. Use get_rng_state/set_rng_state."
            ) from exc

    def get_state(self, index: int | None) -> torch.Tensor:
        upstream = self._upstream()
        if upstream is not None:
            return upstream.get_rng_state(index)
        return self._module().get_rng_state(self._dev(index))

    def get_state_all(self) -> list[torch.Tensor]:
        upstream = self._upstream()
        if upstream is not None:
            return list(upstream.get_rng_state_all())
        return self.backend.rng_states(self._module(), [self._dev(i) for i in range(self.count())])

    def set_state(self, state: torch.Tensor, index: int | None) -> None:
        self._module().set_rng_state(fresh(state), self._dev(index))

    def initial_seed(self, index: int | None) -> int:
        upstream = self._upstream()
        if upstream is not None:
            return int(upstream.initial_seed(index))
        mod = self._module()
        if index is None:
            seed = self.backend.rng_initial_seed(mod)
            if seed is not None:
                return seed
        return int(self.generator(index).initial_seed())  # per index, and where the module has no initial_seed

    def manual_seed_all(self, seed: int) -> None:
        self.backend.rng_manual_seed_all(self._module(), seed)


def stream_for(backend: Backend) -> CpuStream | DeviceStream:
    return CPU if backend.rng_is_host else DeviceStream(backend)


def active() -> CpuStream | DeviceStream:
    return stream_for(_select.backend())


def resolve(device: object, what: str) -> tuple[CpuStream | DeviceStream, int | None]:
    """A device spec -> (stream, index or None for the current device); typed errors from accel.device."""
    if device is None:
        return active(), None
    if isinstance(device, int) and not isinstance(device, bool):
        stream = active()
        count = stream.count()
        if not 0 <= device < count:
            raise DeviceIndexError(
                f"{what}: device index {device} is out of range: backend {stream.name!r} has {count} device(s), "
                f"so valid indices are 0..{count - 1}. Use a smaller index or check the visible-devices variables."
            )
        return stream, device
    sel = _select.selection(device)
    stream = stream_for(sel.backend)
    return stream, (None if stream is CPU else sel.device.index)


# -- validation ----------------------------------------------------------------------------------------------
def fresh(state: torch.Tensor) -> torch.Tensor:
    """A new contiguous copy of ``state`` at storage offset 0, for ``Generator.set_state``.

    torch's generators read the state from the start of its storage: a view (a row of a
    stacked tensor, a slice kept by ``torch.save``/``torch.load``) crashes the process.
    ``.contiguous()`` would return such a view unchanged, so always copy (5056 bytes at most).
    """
    return state.detach().clone(memory_format=torch.contiguous_format)


def check_seed(seed: object, what: str) -> int:
    """``seed`` as an int. Accepts what ``operator.index`` takes, as ``torch.manual_seed`` does: an ``int``,
    a NumPy integer, a one-element integer tensor (``torch.tensor(7)``); never a ``bool`` or bool tensor."""
    bad = isinstance(seed, bool) or not hasattr(type(seed), "__index__") or (
        isinstance(seed, torch.Tensor) and (seed.dtype == torch.bool or seed.is_floating_point()))
    value: int | None = None
    if not bad:
        try:
            value = operator.index(seed)
        except (TypeError, ValueError, RuntimeError):  # tensors/arrays of several elements or a float dtype
            bad = True
    if bad or value is None:
        shown = (f"a {seed.dtype} tensor of shape {tuple(seed.shape)}" if isinstance(seed, torch.Tensor)
                 else f"{seed!r} of type {type(seed).__name__}")
        raise SeedError(
            f"{what}: got seed {shown}. A seed is an integer (an int, a NumPy integer or a one-element integer "
            f"tensor). Pass an int (e.g. int(seed))."
        )
    if not SEED_MIN <= value <= SEED_MAX:
        raise SeedError(
            f"{what}: seed {value} is out of range. Seeds lie in -2**63 .. 2**64 - 1 (negative seeds wrap "
            f"modulo 2**64). Reduce it, e.g. seed % 2**64."
        )
    return value


def check_state(state: object, stream: CpuStream | DeviceStream, index: int | None, what: str) -> torch.Tensor:
    """Raise :class:`RngStateError` unless ``state`` can be set on that generator; returns it contiguous.

    The final check sets ``state`` on a clone of the live generator, so anything the
    generator itself would refuse is refused here, before the live generator changes.
    """
    shape_rule = "An RNG state is a 1-D torch.uint8 tensor on the CPU, as accel.random.get_rng_state() returns."
    if not isinstance(state, torch.Tensor):
        raise RngStateError(f"{what}: got {type(state).__name__}, not a tensor. {shape_rule} Pass such a tensor.")
    if not state.is_cpu:  # generators keep their state in host memory on every vendor
        raise RngStateError(
            f"{what}: the state tensor is on {state.device}. {shape_rule} Device generators keep their state "
            f"on the CPU too. Pass state.cpu()."
        )
    if state.dtype != torch.uint8:
        raise RngStateError(f"{what}: the state has dtype {state.dtype}. {shape_rule} Pass the tensor unchanged.")
    if state.dim() != 1:
        raise RngStateError(
            f"{what}: the state has shape {tuple(state.shape)}. {shape_rule} Pass the tensor unchanged."
        )
    label = stream.label(index)
    expected = stream.get_state(index).numel()
    if state.numel() != expected:
        guess = KNOWN_STATES.get(state.numel())
        looks = f" It looks like {guess}." if guess else ""
        raise RngStateError(
            f"{what}: the state has {state.numel()} bytes; the {label} generator's state has {expected}.{looks} "
            f"A state only fits the kind of generator it came from. Pass a state read from a {stream.name} "
            f"generator."
        )
    state = fresh(state)
    gen = stream.generator(index)
    if hasattr(gen, "clone_state"):
        try:
            gen.clone_state().set_state(fresh(state))
        except (RuntimeError, ValueError, TypeError) as exc:
            raise RngStateError(
                f"{what}: the {label} generator rejects this state: {exc}. The state is corrupted or from another "
                f"generator. Pass a state read from this kind of generator."
            ) from exc
    return state


def numpy_module() -> Any:
    """NumPy if installed, else ``None`` (imported on first use only)."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy
