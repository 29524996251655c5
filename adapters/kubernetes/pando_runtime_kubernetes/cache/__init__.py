"""Layer 2, the cache: what the adapter knows of a cluster, fed by list-then-watch loops.

The watch loop and work queue, the informer (composing its supervisor, clock, liveness
probes, staleness and collector) and its projections of pods, Services and namespaces, the
disk store of a warm start, and the pure reading of pod status and capacity.
Uses the API layer; knows nothing of apps, plans or features.
"""
