"""nvct-hook: the OCI prestart hook that carries out a plan inside a container."""
