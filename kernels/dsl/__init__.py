"""Per-DSL host helpers, below the ops: ``<dsl>_utils.py`` (availability and version floor from package
metadata, lazy import, launches) for Triton, Helion and CuTeDSL; :mod:`.launch` (what every DSL's impls
share: output buffers, lazy kernel modules, device facts); ``triton_lang`` / ``cute_lang`` (device-side
helpers, imported only by kernel modules) and ``triton_configs`` (launch-config heuristics)."""
