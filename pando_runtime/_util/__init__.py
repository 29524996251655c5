"""The floor: helpers that know nothing of the contract.

Converters that keep attrs types immutable (``_frozen``), background task groups
(``_background``) and the package's loggers (``_log``). Every other layer may import these;
they import no other part of the core.
"""
