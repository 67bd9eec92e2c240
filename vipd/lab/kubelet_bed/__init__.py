"""The kubelet bed: kubeadm control-plane nodes with real kubelets and containerd (bed.py)."""
