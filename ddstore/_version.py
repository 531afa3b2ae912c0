"""The package's version: a bottom module (imports nothing), so that any module can name
it without importing the package (``ddstore/__init__.py`` re-exports it)."""
__version__ = "0.1.0"
