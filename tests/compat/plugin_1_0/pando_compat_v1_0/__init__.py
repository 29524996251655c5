"""A pando-runtime plugin written for adapter API 1.0: workloads run as local processes.

Frozen: it is what a plugin author wrote at 1.0, with 1.0's public names; never edited when
the core changes.
"""
