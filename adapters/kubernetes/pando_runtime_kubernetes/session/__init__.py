"""Layer 3, the session: one cluster's connection, cache, errors, reads, writes and streams.

:class:`~._session.ClusterSession` composes them; each feature is given one and reaches the
part it needs through one attribute (``session.reads``, ``session.writer``, ...). Uses the
cache and the API layers; knows nothing of the contract's features above it.
"""
