"""app.host: (docstring to write)."""
