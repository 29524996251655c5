"""Layer 4, the features: bundles, volumes, the edge, trials, usage, images, the canary.

Each feature sees the cluster through the session layer's ``ClusterSession`` (reads from the
cache, writes through the API) and builds objects with the manifests; features do not import
each other's internals, and the adapter above composes them.
"""
