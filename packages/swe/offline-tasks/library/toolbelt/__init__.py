"""toolbelt: small, dependency-free helpers for numbers, text, sequences, intervals, dates and matrices."""

__version__ = "1.0.0"
