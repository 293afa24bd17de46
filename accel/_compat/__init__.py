"""The one place that knows which running torch has which function.

Feature detection with ``hasattr`` on the running torch, never version-string
comparisons. Everything else in accel asks this package; what differs by vendor is
answered by the vendor's :class:`~accel.backends.Backend`, never here. Answers are
computed at first use and never import a DSL runtime or initialise a device.

One module per topic, every name re-exported here:

- :mod:`~accel._compat.runtime`: runtime functions per device type (``resolve``), device modules,
  stream and event classes, raw ``torch._C`` bindings accel hands out.
- :mod:`~accel._compat.rng`: ``torch.accelerator.random`` and default generators.
- :mod:`~accel._compat.graphs`: ``torch.accelerator.Graph``, vendor graph classes, graph-pool hooks.
- :mod:`~accel._compat.native`: the native DSL registry (``torch._native``), ``torch.library.get_kernel``.
- :mod:`~accel._compat.inductor`: Inductor config keys, modes and GEMM template packages.
- :mod:`~accel._compat.lowp`, :mod:`~accel._compat.distributed`, :mod:`~accel._compat.tunable`:
  low-precision dtypes and scaled GEMMs, c10d backends, symmetric memory and DTensor, TunableOp.
- :mod:`~accel._compat.versions`: installed versions of the optional DSL packages, and whether each
  imports with the running torch (a subprocess, cached on disk).

Functions here call each other through this package (``_compat.has_accelerator_graph()``,
not the module's own global), so replacing one here, as tests and :mod:`accel.testing` do,
changes every answer that depends on it.

Example:
    >>> from accel import _compat
    >>> _compat.resolve("cpu", "synchronize") is None
    True
    >>> _compat.module_version("no-such-distribution") is None
    True
"""

from __future__ import annotations

from . import distributed, graphs, inductor, lowp, native, rng, runtime, tunable, versions
from .distributed import c10d_backends, dtensor_class, has_symmetric_memory, register_dtensor_sharding
from .graphs import (
    accelerator_graph,
    graph_class,
    graph_pool_functions,
    has_accelerator_graph,
    has_xpu_graph,
    pool_functions,
)
from .inductor import (
    ck_available,
    cutedsl_available,
    find_spec,
    has_rdna3_flex_heuristics,
    inductor_backend,
    inductor_config_get,
    inductor_config_has,
    inductor_mode_options,
    inductor_modes,
    inductor_option_problem,
    inductor_options,
    nvgemm_available,
    origami_available,
)
from .lowp import has_dtype, has_scaled_mm, has_scaled_mm_v2
from .native import has_native_dsl_registry, library_get_kernel, native_dsl_registry, native_dsl_registry_reason
from .rng import (
    accelerator_random,
    default_generator,
    has_accelerator_random,
    module_default_generator,
    single_default_generator,
)
from .runtime import (
    RUNTIME_SOURCES,
    accelerator_allocator_stats,
    accelerator_has,
    accelerator_set_stream,
    address_reader,
    backend_for_device_type,
    device_module,
    event_class,
    first_present,
    lookup,
    register_backend,
    resolve,
    stream_class,
)
from .tunable import has_cuda_tunable, tunable_writer
from .versions import (IMPORT_TIMEOUT_S, ImportCheck, checked_version, import_cache_dir, import_check, import_key,
                       module_version, requirement_versions)


def _register_caches() -> None:
    """Declare this package's ``functools`` caches in :mod:`accel._caches` as detection caches: everything it
    caches is a fact of the running torch build, which :mod:`accel.testing` may fake (:mod:`.native` keeps bare
    ``functools.cache`` s). A topic module imported later is covered too."""
    from accel import _caches

    _caches.declare_package(__name__)


_register_caches()

# The names these had when this package was one module (callers and tests still use them).
_lookup = lookup
_find_spec = find_spec

# every topic module's public names, re-exported (imported by name above so readers and linters see them)
__all__ = [*runtime.__all__, *rng.__all__, *graphs.__all__, *native.__all__, *inductor.__all__, *lowp.__all__,
           *distributed.__all__, *tunable.__all__, *versions.__all__]
