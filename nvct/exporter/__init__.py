"""``nvct-cli exporter``: GPU metrics in Prometheus text, named as dcgm-exporter's, each GPU's
series labelled with the pod, namespace and container holding it (kubelet pod-resources).

A sampler thread reads NVML and the kubelet every interval; the HTTP handler only renders the
latest sample, so a slow or hung driver never delays a scrape.
"""
