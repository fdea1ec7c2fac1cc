"""The operator's tools on the queue: schedules (and their cron expressions),
retention, pausing a queue, and retry and cancel by filter. The engine runs the
schedules and the retention too, so this room sits below it.
"""
