"""nvct-cli: inspect the host, configure engines, generate CDI specs, diagnose."""
