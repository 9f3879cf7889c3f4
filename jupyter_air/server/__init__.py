"""The Jupyter server extension: settings, background work and REST handlers."""
