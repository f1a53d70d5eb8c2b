"""The package version, in a module of its own so that any stage can record it without importing the package root."""

__version__ = "0.3.0"
