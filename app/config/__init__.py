"""app.config: (docstring to write)."""
