"""attncheck's version, in a leaf module: the package's modules read it without importing the package facade."""

__version__ = "0.1.0"
