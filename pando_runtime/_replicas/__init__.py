"""Host replicas: membership, leases, singletons and who owns what.

``_membership`` (:class:`Membership`: one replica among several, over leases), ``_settings``
(:class:`MembershipSettings` and the ownership change), ``_slot`` (the adapter's side of a
membership), ``_singleton`` (one holder at a time), ``_leases`` (the lease store an adapter
provides) and ``_ownership`` (rendezvous hashing). They build on ``_contract`` and ``_util``.
"""
