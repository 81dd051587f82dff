"""The OCI hooks: ``nvct-hook`` (``__main__``: carries out a plan inside a container) and
``nvct-cdi-hook`` (``cdi``: the createContainer hook nvct's CDI specs name)."""
