"""A process around the engine: the database (configured, or the embedded server),
the event loop and the loop thread, logs, metrics, the argument types shared by
`taskboard` and `taskboard-tui`, and the testing helper (`run_jobs`).
"""
