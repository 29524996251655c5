"""Layer 4, the controller toolkit: a public watch controller, and the catalog's service source.

Built on the cache layer's watch loop and the API layer's transport, beside the features
(they share nothing but those layers).
"""
