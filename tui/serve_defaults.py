"""Defaults of the --serve flags: apart from the server itself (aiohttp, textual-serve), so
`taskboard-tui` can print its help and check its flags without importing it."""

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_SESSIONS = 30
