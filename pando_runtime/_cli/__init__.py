"""The ``pando-runtime`` command line (the entry point ``pando_runtime._cli:main``).

``_main`` parses the arguments (and imports no runtime code for ``--help``); ``_run`` runs the
parsed command; ``_commands`` holds the handlers, ``_console`` the output and the exit-code
policy, ``_setup`` the config file and the fake's state file; ``_catalog`` and ``_exec`` the
catalog and exec commands, ``_progress`` and ``_units`` the console's displays.
"""

from ._main import main

__all__ = ["main"]
