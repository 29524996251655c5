"""Everything that comes in, checked and structured.

Plan validation (``_validation``: the contract's rules, one coded problem per path), JSON and
YAML conversion (``_convert``: cattrs, imported on first use) and adapter settings
(``_config``: ``setting``, ``ConfigField``, the JSON schema). They build on ``_contract``.
"""
