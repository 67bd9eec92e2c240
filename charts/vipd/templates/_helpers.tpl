{{/*
What `vipd manifest daemonset` and `vipd manifest rbac` derive from a config (vipd/manifest.py),
derived here from the values the same way. tests/chart/test_chart.py renders both from one
config and compares the objects, so a change on one side without the other fails.
*/}}

{{/* The config the pods read from the ConfigMap: vipd's keys as given, without `node` (each pod
takes its node's name), without election.lease.kubeconfig or ipvs.discovery.kubeconfig (the
DaemonSet uses its ServiceAccount), and without `election` in the routed modes' ECMP pool
(nothing is elected there; vipd refuses the section). */}}
{{- define "vipd.config" -}}
{{- $v := .Values -}}
{{- $cfg := dict -}}
{{- if not (kindIs "invalid" $v.vips) }}{{ $_ := set $cfg "vips" $v.vips }}{{ end -}}
{{- if or (not (kindIs "invalid" $v.vip)) (kindIs "invalid" $v.vips) }}{{ $_ := set $cfg "vip" (required "vip: the VIP, an IP address literal, is required (or vips)" $v.vip) }}{{ end -}}
{{- if not (kindIs "invalid" $v.interface) }}{{ $_ := set $cfg "interface" $v.interface }}{{ end -}}
{{- $election := dict "mode" (default "vrrp" $v.election.mode) -}}
{{- if not (kindIs "invalid" $v.election.vrrp) }}{{ $_ := set $election "vrrp" $v.election.vrrp }}{{ end -}}
{{- if not (kindIs "invalid" $v.election.lease) }}{{ $_ := set $election "lease" (omit $v.election.lease "kubeconfig") }}{{ end -}}
{{- if ne (include "vipd.routedPool" .) "ecmp" }}{{ $_ := set $cfg "election" $election }}{{ end -}}
{{- range $key := list "announce" "garp" "log" "health" "ipvs" "metrics" }}
{{- if not (kindIs "invalid" (index $v $key)) }}{{ $_ := set $cfg $key (index $v $key) }}{{ end }}
{{- end -}}
{{- if not (kindIs "invalid" $v.membership) }}
{{- $m := omit $v.membership "kubeconfig" -}}
{{- if $m }}{{ $_ := set $cfg "membership" $m }}{{ end -}}
{{- end -}}
{{- if and (hasKey $cfg "ipvs") (hasKey $cfg.ipvs "discovery") }}
{{- $ipvs := deepCopy $cfg.ipvs -}}
{{- $_ := set $ipvs "discovery" (omit $ipvs.discovery "kubeconfig") -}}
{{- $_ := set $cfg "ipvs" $ipvs -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* The routed modes (announce.mode routing-table or bgp): their pool, "ecmp" or "leader";
empty in arp mode. */}}
{{- define "vipd.routedPool" -}}
{{- $a := default dict .Values.announce -}}
{{- if has (default "arp" $a.mode) (list "routing-table" "bgp") }}{{ default "ecmp" $a.pool }}{{ end -}}
{{- end -}}

{{/* bgp mode: vipd's own BGP speaker (ExaBGP, a child process in the pod). */}}
{{- define "vipd.speaker" -}}
{{- $a := default dict .Values.announce -}}
{{- if eq (default "arp" $a.mode) "bgp" }}true{{ end -}}
{{- end -}}

{{/* CAP_NET_RAW is needed: VRRP, gratuitous ARP, the Lease's ARP watch, BFD bound to the
uplink; not in the routed modes' ECMP pool without BFD (netlink alone: CAP_NET_ADMIN). */}}
{{- define "vipd.rawSockets" -}}
{{- $a := default dict .Values.announce -}}
{{- $bfd := default dict (default dict $a.bgp).bfd -}}
{{- if or (ne (include "vipd.routedPool" .) "ecmp") (and (include "vipd.speaker" .) $bfd.enabled) }}true{{ end -}}
{{- end -}}

{{- define "vipd.leaseMode" -}}
{{- if eq (default "vrrp" .Values.election.mode) "lease" }}true{{ end -}}
{{- end -}}

{{/* IPVS discovery is on: it lists the default/kubernetes EndpointSlices. */}}
{{- define "vipd.discovery" -}}
{{- $ipvs := default dict .Values.ipvs -}}
{{- $disc := default dict $ipvs.discovery -}}
{{- if and $ipvs.enabled $disc.enabled }}true{{ end -}}
{{- end -}}

{{/* The membership sources some *_from key follows (vipd.membership), as "endpointslices"
and/or "nodes" in one string (empty: none). */}}
{{- define "vipd.membershipSources" -}}
{{- $v := .Values -}}
{{- $lists := list -}}
{{- $vrrp := default dict (default dict $v.election).vrrp -}}
{{- if ne (default "vrrp" $v.election.mode) "lease" }}{{ $lists = append $lists (default list $vrrp.unicast_peers_from) }}{{ end -}}
{{- if not (kindIs "invalid" $v.health) }}{{ $lists = append $lists (default list (default dict $v.health).peers_from) }}{{ end -}}
{{- $ipvs := default dict $v.ipvs -}}
{{- if $ipvs.enabled }}{{ $lists = append $lists (default list $ipvs.backends_from) }}{{ end -}}
{{- $all := list -}}
{{- range $lists }}{{ $all = concat $all . }}{{ end -}}
{{- range $s := list "endpointslices" "nodes" }}{{ if has $s $all }}{{ $s }} {{ end }}{{ end -}}
{{- end -}}

{{/* metrics.auth is token: the endpoint asks the API server about scrapers' tokens. */}}
{{- define "vipd.metricsAuth" -}}
{{- $m := default dict .Values.metrics -}}
{{- if eq (default "none" $m.auth) "token" }}true{{ end -}}
{{- end -}}

{{/* The pods use the Kubernetes API (the Lease, IPVS discovery, or the endpoint's token
reviews): a ServiceAccount. */}}
{{- define "vipd.usesApi" -}}
{{- if or (include "vipd.leaseMode" .) (include "vipd.discovery" .) (include "vipd.metricsAuth" .) (include "vipd.membershipSources" .) }}true{{ end -}}
{{- end -}}

{{- define "vipd.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{- define "vipd.name" -}}
{{- $name := default "vipd" .Values.name -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" $name) -}}
{{- fail (printf "name must be a DNS-1123 label (got %q)" $name) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{- define "vipd.staticManifest" -}}
{{- default (printf "/etc/kubernetes/manifests/%s.yaml" (include "vipd.name" .)) .Values.handover.staticManifest -}}
{{- end -}}

{{- define "vipd.labels" -}}
app.kubernetes.io/name: vipd
app.kubernetes.io/instance: {{ include "vipd.name" . }}
app.kubernetes.io/component: daemonset
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* The scrape objects serve every vipd of the namespace, whatever its name: no instance. */}}
{{- define "vipd.scrapeLabels" -}}
app.kubernetes.io/name: vipd
app.kubernetes.io/component: daemonset
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "vipd.selectorLabels" -}}
app.kubernetes.io/name: vipd
app.kubernetes.io/instance: {{ include "vipd.name" . }}
app.kubernetes.io/component: daemonset
{{- end -}}

{{/* metrics.listen as "HOST PORT" (HOST without IPv6 brackets; 0.0.0.0 when empty). */}}
{{- define "vipd.listen" -}}
{{- $listen := "0.0.0.0:2112" -}}
{{- if and .Values.metrics .Values.metrics.listen }}{{ $listen = .Values.metrics.listen }}{{ end -}}
{{- $port := regexFind "[0-9]+$" $listen -}}
{{- $host := trimSuffix (printf ":%s" $port) $listen | trimPrefix "[" | trimSuffix "]" -}}
{{ default "0.0.0.0" $host }} {{ $port }}
{{- end -}}

{{/* terminationGracePeriodSeconds: vipd's longest graceful stop plus a margin of 10 s, at
least Kubernetes' default 30 s. VRRP: the make-before-break wait, Skew_Time at priority 1
(RFC 9568 §6.1; v2: RFC 3768 §6.1), truncated to microseconds, plus one advert interval.
Lease: the release within the renew deadline, then one retry period for the next holder.
The routed modes: nothing elected in the ECMP pool; then announce.drain and a second for the
route calls; bgp mode: the Cease and ExaBGP's graceful exit, 6 s. */}}
{{- define "vipd.gracePeriod" -}}
{{- $stop := 0.0 -}}
{{- $pool := include "vipd.routedPool" . -}}
{{- $a := default dict .Values.announce -}}
{{- if eq $pool "ecmp" -}}
{{- else if include "vipd.leaseMode" . -}}
{{- $lease := default dict .Values.election.lease -}}
{{- $stop = addf (default 10 $lease.renew_deadline) (default 2 $lease.retry_period) -}}
{{- else -}}
{{- $vrrp := default dict .Values.election.vrrp -}}
{{- $interval := float64 (default 1.0 $vrrp.advert_interval) -}}
{{- $skewUs := floor (divf (mulf 255 1000000) 256) -}}
{{- if eq (int (default 3 $vrrp.version)) 3 -}}
{{- $cs := round (mulf $interval 100) 0 -}}
{{- $skewUs = floor (divf (mulf 255 $cs 625) 16) -}}
{{- end -}}
{{- $stop = addf (divf $skewUs 1000000) $interval -}}
{{- end -}}
{{- if $pool -}}
{{- $drain := 2.0 -}}
{{- if not (kindIs "invalid" $a.drain) }}{{ $drain = float64 $a.drain }}{{ end -}}
{{- $stop = addf $stop $drain 1.0 -}}
{{- end -}}
{{- if include "vipd.speaker" . }}{{ $stop = addf $stop 6.0 }}{{ end -}}
{{- max 30 (add (int (ceil $stop)) 10) -}}
{{- end -}}

{{- define "vipd.probe" -}}
{{- $listen := splitList " " (include "vipd.listen" .root) -}}
{{- $m := default dict .root.Values.metrics -}}
httpGet:
  path: {{ .path }}
  port: {{ index $listen 1 }}
  scheme: {{ if $m.cert_file }}HTTPS{{ else }}HTTP{{ end }}
  {{- if not (has (index $listen 0) (list "0.0.0.0" "::")) }}
  host: {{ index $listen 0 | quote }}
  {{- end }}
periodSeconds: {{ .period }}
timeoutSeconds: 2
failureThreshold: {{ .failures }}
{{- end -}}

{{- define "vipd.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
  {{- if eq . "raw" }}
  add: [NET_ADMIN, NET_RAW]
  {{- else if eq . "admin" }}
  add: [NET_ADMIN]
  {{- end }}
{{- end -}}

{{/* The files the config names on the node, space-separated: health.ca_file, then
metrics.cert_file, metrics.key_file and metrics.client_ca_file, then bgp mode's
announce.bgp.peers[].password_file. */}}
{{- define "vipd.hostFiles" -}}
{{- $files := list -}}
{{- if and .Values.health .Values.health.ca_file }}{{ $files = append $files .Values.health.ca_file }}{{ end -}}
{{- $m := default dict .Values.metrics -}}
{{- range $key := list "cert_file" "key_file" "client_ca_file" }}
{{- if index $m $key }}{{ $files = append $files (index $m $key) }}{{ end }}
{{- end -}}
{{- if include "vipd.speaker" . }}
{{- range (default list (default dict (default dict .Values.announce).bgp).peers) }}
{{- if .password_file }}{{ $files = append $files .password_file }}{{ end }}
{{- end }}
{{- end -}}
{{- join " " $files -}}
{{- end -}}

{{/* The scheme, TLS and token of a PodMonitor's or ServiceMonitor's endpoint, from
metrics.cert_file and metrics.auth; "monitor" is "pod" or "service". */}}
{{- define "vipd.scrapeSecurity" -}}
{{- $m := default dict .root.Values.metrics -}}
{{- $mon := .root.Values.monitoring -}}
{{- if $m.cert_file }}
scheme: https
tlsConfig:
  {{- toYaml (required "monitoring.tlsConfig: how Prometheus verifies the HTTPS endpoint (metrics.cert_file is set)" (empty $mon.tlsConfig | ternary nil $mon.tlsConfig)) | nindent 2 }}
{{- end }}
{{- if include "vipd.metricsAuth" .root }}
{{- if $mon.tokenSecret }}
authorization:
  type: Bearer
  credentials:
    {{- toYaml $mon.tokenSecret | nindent 4 }}
{{- else if eq .monitor "service" }}
bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
{{- else }}
{{- fail "monitoring.tokenSecret: the Secret key with Prometheus's token (metrics.auth is token)" }}
{{- end }}
{{- end }}
{{- end -}}
