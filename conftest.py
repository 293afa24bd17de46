"""pytest from the repository root: test the installed accel, never the checkout's folders by their own names.

``python -m pytest`` puts the current directory first on ``sys.path``, and pytest puts this file's directory
there too (``rootdir`` conftest, ``prepend`` import mode). The repository's top-level ``kernels/`` folder
(installed as ``accel.kernels``) would then shadow the ``kernels`` distribution that transformers 5.25+ imports
(``ImportError: cannot import name 'CUDAProperties' from 'kernels'``), and ``backends/`` likewise. Removing the
root from ``sys.path`` here, before any test imports, leaves ``accel`` resolved from the installed package.
"""

import os
import sys

_ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _ROOT]
for _name in ("kernels", "backends"):  # imported from the checkout before this ran (a plugin, say): forget it
    _module = sys.modules.get(_name)
    if _module is not None and (getattr(_module, "__file__", None) or "").startswith(_ROOT + os.sep):
        del sys.modules[_name]
