"""app.cli: (docstring to write)."""
