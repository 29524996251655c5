"""A pando-runtime plugin written for adapter API 1.3: workloads run as local processes.

Frozen: it is what a plugin author wrote at 1.3, with 1.3's public names; never edited when
the core changes.
"""
