"""app.run: (docstring to write)."""
