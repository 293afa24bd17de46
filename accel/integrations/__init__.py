"""accel's integrations with other libraries: their models reach accel's ops without edits to the models.

- :mod:`accel.integrations.transformers`: Hugging Face ``transformers`` models (``patch(model)``,
  ``unpatch(model)``, ``enable()`` / ``disable()`` through transformers' own patch hook).

Importing this package imports none of those libraries; each integration imports its library when used.
"""

__all__: list[str] = []
