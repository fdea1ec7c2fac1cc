"""The engine: the lease protocol's SQL, the schema, and the worker's roles.

Never imports the dashboard, Textual or the stand-in servers (checked by import-linter).
"""
