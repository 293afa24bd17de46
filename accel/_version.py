"""The accel version (one place; ``accel.__version__`` re-exports it)."""

__version__ = "0.1.0"
