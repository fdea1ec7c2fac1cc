"""Taskboard engine: schema, fenced lease SQL, workers, handlers. Never imports Textual."""
