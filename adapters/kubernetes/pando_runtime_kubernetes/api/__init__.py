"""Layer 1, the API: every byte to and from an API server or image registry goes through here.

The transport (HTTP, rate limit, retries, counts), exec streams, service-account tokens, and
the cluster set read from kubeconfig files. :class:`ApiError` is at the bottom: nothing in
this layer imports anything above it, and nothing above it speaks HTTP.
"""
