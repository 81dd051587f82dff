"""The CDI library: reading what the Container Device Interface specs on a host offer.

``names``: fully-qualified device names (``vendor/class=name``); ``specs``: the spec files and
their devices by the CDI rules (later directories win, conflicts dropped) and resolving names to
edits; ``registry``: listing every name (``nvct-cli cdi list``). The default spec directories are
``nvct.base.defaults.CDI_SPEC_DIRS`` (the config defaults to them). Writing specs is the plan's
(``nvct.plan.cdi_spec``, ``nvct.plan.cdi_imex``), and the hook they name is ``nvct.hook.cdi``,
as the CDI project keeps ``pkg/cdi`` apart from its producers.
"""
