"""The contract's vocabulary: the types, errors and versions a host and an adapter share.

Plans (``_plans``, ``_volumes``, ``_edge``, ``_trial``, ``_exec``, ``_log_options``), what is
observed (``_observed``, ``_refs``, ``_capacity``, ``_events``), what a runtime can do
(``_capabilities``), the coded error hierarchy (``_errors``), byte streams (``_streams``) and
the API version (``_version``). Plain data and small helpers: they import only ``_util``.
"""
