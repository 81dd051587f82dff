"""nvct-runtime: an OCI runtime shim in front of runc/crun."""
