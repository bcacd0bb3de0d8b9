"""app.model: (docstring to write)."""
