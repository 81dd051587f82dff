"""nvct-dra-plugin: the node's GPUs through Dynamic Resource Allocation (``resource.k8s.io``).

``devices``: the DRA devices of this node (names, attributes, capacities, device nodes) from
the same inventory the device plugin reads.
"""
