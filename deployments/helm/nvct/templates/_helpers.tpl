{{- /* The image of every container: image.repository:image.tag (default: the chart's appVersion). */ -}}
{{- define "nvct.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- /*
Where a DaemonSet's pods may run: nodeSelector, affinity and tolerations from the values.
"ready": the pod runs only on the nodes the installer labelled (nvct.readyLabel). "deploy"
names NVIDIA's GPU operator label nvidia.com/gpu.deploy.<deploy> ("false" stops the
pod on a node, as during a GPU reset); a node without that label passes. "dra" ("in" or
"notin"), with dra.enabled: the pod runs only on (or only off) the nodes labelled
dra.nodeLabel=true. With nfd.enabled, NFD's
PCI vendor label or nvidia.com/gpu.present=true is required as in NVIDIA's chart. A non-empty
affinity value replaces all of this, with NVIDIA's meaning.
*/ -}}
{{- define "nvct.scheduling" -}}
{{- $values := .root.Values -}}
{{- $selector := deepCopy ($values.nodeSelector | default dict) -}}
{{- if .ready }}
{{- with include "nvct.readyLabel" .root }}
{{- $_ := set $selector . "true" }}
{{- end }}
{{- end }}
{{- with $selector }}
nodeSelector:
  {{- if and $.ready (include "nvct.readyLabel" $.root) }}
  # Only where the installer has registered nvct's handlers (it labels its Node then). In the
  # template, not only in the RuntimeClass's scheduling: the DaemonSet controller places pods
  # by the template alone, and a pod the RuntimeClass's selector then keeps off a CPU node
  # would wait there for ever (and helm install --wait with it). A nodeSelector is ANDed with
  # any affinity (nvct's, NFD's, the affinity value), so no other value drops it.
  {{- end }}
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $values.affinity }}
affinity:
  {{- toYaml $values.affinity | nindent 2 }}
{{- else if or $values.nfd.enabled .deploy (and $values.dra.enabled .dra) }}
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms:
      {{- $presence := list "" }}
      {{- if $values.nfd.enabled }}
      {{- $presence = list "feature.node.kubernetes.io/pci-10de.present" "nvidia.com/gpu.present" }}
      {{- end }}
      {{- range $presence }}
        - matchExpressions:
          {{- if . }}
            - key: {{ . }}
              operator: In
              values: ["true"]
          {{- end }}
          {{- if $.deploy }}
            # NVIDIA's operator label: "false" stops this pod on the node (a GPU reset)
            - key: nvidia.com/gpu.deploy.{{ $.deploy }}
              operator: NotIn
              values: ["false"]
          {{- end }}
          {{- if and $values.dra.enabled $.dra }}
            # the nodes DRA serves run nvct-dra-plugin, the others nvct-device-plugin
            - key: {{ $values.dra.nodeLabel }}
              operator: {{ if eq $.dra "in" }}In{{ else }}NotIn{{ end }}
              values: ["true"]
          {{- end }}
      {{- end }}
{{- end }}
{{- end -}}

{{- /* The ConfigMap of NVIDIA-format plugin configs, "" when none is used. */ -}}
{{- define "nvct.configsName" -}}
{{- if .Values.config.name -}}
{{ .Values.config.name }}
{{- else if .Values.config.map -}}
nvct-device-plugin-configs
{{- end -}}
{{- end -}}

{{- /* nvct's config.toml of the device plugin, labeller and MPS control (one config: the MIG
strategy and sharing they report and apply agree). */ -}}
{{- define "nvct.driverRoot" -}}
{{- if .Values.nvidiaDriverRoot -}}
/host{{ .Values.nvidiaDriverRoot | trimSuffix "/" }}
{{- else -}}
/host
{{- end -}}
{{- end -}}

{{- /* A MIG strategy other than none: NVML must see the MIG devices (NVIDIA's chart adds
NVIDIA_MIG_MONITOR_DEVICES=all and CAP_SYS_ADMIN then). */ -}}
{{- define "nvct.mig" -}}
{{- if and .Values.migStrategy (ne .Values.migStrategy "none") -}}true{{- end -}}
{{- range .Values.config.map -}}
{{- if regexMatch "migStrategy\"?\\s*:\\s*\"?(single|mixed)" . -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{- /* The runtime's CRI socket on the node, for the exporter's per-pod usage: exporter.criSocket,
else the installer's engine's. */ -}}
{{- define "nvct.criSocket" -}}
{{- if .Values.exporter.criSocket -}}
{{ .Values.exporter.criSocket }}
{{- else if eq .Values.installer.engine "crio" -}}
/var/run/crio/crio.sock
{{- else -}}
/run/containerd/containerd.sock
{{- end -}}
{{- end -}}

{{- /*
nvct-config-manager, as NVIDIA's config-manager: it reads the node's label
nvidia.com/device-plugin.config, copies that entry of the configs ConfigMap to
/config/config.yaml (CONFIG_FILE of the device plugin, labeller and mps-control) and, as the
sidecar, sends SIGHUP on a change to the pod's "process" (by name: nvct-device-plugin, or
nvct-cli for the labeller and mps-control, each the only one of that name in its pod). The
init container (ONESHOT) writes the first config before that process starts. It alone gets
the API token (get/list/watch on nodes: config-manager.yaml).
*/ -}}
{{- define "nvct.configManager" -}}
{{- $values := .root.Values -}}
- name: config-manager{{ if .oneshot }}-init{{ end }}
  image: {{ include "nvct.image" .root }}
  imagePullPolicy: {{ $values.image.pullPolicy }}
  command: ["nvct-config-manager"]
  env:
    - name: ONESHOT
      value: {{ .oneshot | quote }}
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    - name: NODE_LABEL
      value: nvidia.com/device-plugin.config
    - name: CONFIG_FILE_SRCDIR
      value: /available-configs
    - name: CONFIG_FILE_DST
      value: /config/config.yaml
    - name: DEFAULT_CONFIG
      value: {{ $values.config.default | quote }}
    - name: FALLBACK_STRATEGIES
      value: {{ join "," $values.config.fallbackStrategies | quote }}
    - name: SEND_SIGNAL
      value: {{ not .oneshot | quote }}
    - name: SIGNAL
      value: {{ if .oneshot }}""{{ else }}"1"  # SIGHUP{{ end }}
    - name: PROCESS_TO_SIGNAL
      value: {{ if .oneshot }}""{{ else }}{{ .process }}{{ end }}
  securityContext:
    # the plugin's uid: a signal to it needs no capability
    runAsUser: 0
    privileged: false
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities: {drop: [ALL]}
  resources:
    requests: {cpu: 10m, memory: 32Mi}
    limits: {cpu: 200m, memory: 128Mi}
  volumeMounts:
    - name: available-configs
      mountPath: /available-configs
      readOnly: true
    - name: node-config
      mountPath: /config
    - name: api-access
      mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      readOnly: true
{{- end -}}

{{- /* The volumes of nvct-config-manager's pods: the configs, the chosen one, the API access. */ -}}
{{- define "nvct.configVolumes" -}}
- name: available-configs
  configMap:
    name: {{ include "nvct.configsName" . }}
- name: node-config  # the config nvct-config-manager chose for this node
  emptyDir: {medium: Memory, sizeLimit: 1Mi}
# the API token, CA and namespace, for nvct-config-manager only (the pod's other containers
# get none)
- name: api-access
  projected:
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3600
      - configMap:
          name: kube-root-ca.crt
          items: [{key: ca.crt, path: ca.crt}]
      - downwardAPI:
          items:
            - path: namespace
              fieldRef: {fieldPath: metadata.namespace}
{{- end -}}

{{- /* Seconds from a number or a duration as NVIDIA's gfd.sleepInterval takes it ("60s", "2m"). */ -}}
{{- define "nvct.seconds" -}}
{{- $text := toString . -}}
{{- if hasSuffix "m" $text -}}
{{ mul (trimSuffix "m" $text | int) 60 }}
{{- else -}}
{{ trimSuffix "s" $text }}
{{- end -}}
{{- end -}}

{{- /*
The RuntimeClass that gives the device plugin, labeller and exporter the node's GPUs: NVIDIA's
runtimeClassName means that class. Unset, "" or NVIDIA's "nvidia" (whose only-allocated-gpus
would drop their NVIDIA_VISIBLE_DEVICES=all) give nvct-system; another name is used as is.
*/ -}}
{{- define "nvct.runtimeClass" -}}
{{- if has .Values.runtimeClassName (list nil "" "nvidia") -}}
nvct-system
{{- else -}}
{{ .Values.runtimeClassName }}
{{- end -}}
{{- end -}}

{{- /*
The label the installer puts on its Node once the node's engine runs nvct's handlers (RuntimeClasses
nvidia and nvct-system), and takes off when it undoes that: the DaemonSets on the RuntimeClass
nvct-system (device plugin, labeller, exporter, DRA plugin) require it. "" with installer.enabled or installer.labelNodes false (nothing sets it then).
*/ -}}
{{- define "nvct.readyLabel" -}}
{{- if and .Values.installer.enabled .Values.installer.labelNodes -}}
nvct.io/runtime.ready
{{- end -}}
{{- end -}}
