"""The plugin machinery: one mechanism for every kind of plugin (adapters, catalogs).

``_kinds`` holds :class:`PluginKind`: the entry-point group, the built-ins, loading and its
coded errors, install hints. The adapter and catalog registries are instances of it, each in
its own layer.
"""
