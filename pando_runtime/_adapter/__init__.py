"""The adapter layer: the contract as a class, and what every adapter is built with.

``_abc`` (:class:`RuntimeAdapter`, the contract), ``_info`` (:class:`AdapterInfo`),
``_registry`` (register, list and load adapters: a plugin kind), ``_fake_info`` (the built-in
fake's info, light to import), ``_delegating`` (the base of every wrapper) and ``_coverage``
(the check that a class covers the whole contract), ``_event_hub`` (the channel and the hub
an adapter streams bundle events with), ``_scope`` (read scopes),
``_api_observer`` and ``_helper_scripts`` (what an adapter runs in a helper container).
It builds on ``_input``, ``_replicas``, ``_plugins``, ``_contract`` and ``_util``.
"""
