"""nvct's Kubernetes API client: where the cluster is and how to prove who we are
(``access``), errors as one line with their fix (``errors``), and list-then-watch of one kind
of object that survives broken watches, 410 Gone and API server restarts (``reflect``).

Built on lightkube (typed models for every built-in group, ``resource.k8s.io/v1`` included,
and generic resources), which loads only here: nothing on a container's start path imports
this package (``tests/architecture``)."""
