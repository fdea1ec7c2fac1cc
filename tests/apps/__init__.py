"""Applications as users write them, loaded by the `--app` tests (`tests.apps.X:registry`).

They import `taskboard.core` only, the public API (an import-linter contract holds them
to it), so they break when the public API does.
"""
