"""Taskboard dashboard (Textual)."""
