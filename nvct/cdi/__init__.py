"""CDI (Container Device Interface) specs for the host's GPUs, and the hook they call.

``spec``: build a spec from the plan code and render it as JSON or YAML; ``registry``: read
the specs in the spec directories; ``hook``: the createContainer hook (symlinks, ldconfig).
"""
