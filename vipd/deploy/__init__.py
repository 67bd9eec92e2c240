"""Running vipd on Kubernetes: the manifests rendered from one config (``manifest``) and the
static pod to DaemonSet handover (``adopt``)."""
