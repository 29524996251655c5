"""Layer 2, the manifests: pure builders of the objects an app is made of.

Same plan in, same dicts out (pods, Services, NetworkPolicies, the egress gateway's objects),
with the digests that make apply idempotent. No I/O: unit-tested without a server.
"""
