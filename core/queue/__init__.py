"""Jobs in and out, as applications see them: enqueue (async and sync connections),
the rows the enqueue statements take, dependencies between jobs, results, and the
retry and cancel of one job.
"""
