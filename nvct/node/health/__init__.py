"""One health policy for the node's GPUs, read by nvct-device-plugin, nvct-dra-plugin and the
exporter alike: NVIDIA's XID catalogue (``xids``), what an event or NVML's memory-health answers
mean and when a GPU may be used again (``policy``), each device's health as a state machine
(``state``) fed by NVML's events and answers (``nvml_watch``), the latches that outlive a
restart (``latches``), and how NVML is asked (``nvml_events``, ``nvml_condition``)."""
