"""The Kubernetes test bed: real etcd and kube-apiserver in network namespaces, vipd on top.

``bed.KubeBed`` builds it (a stacked control plane of three nodes and a client on one bridge),
``binaries`` finds what ``scripts/setup-kube`` built, ``pki`` makes its certificates with the
``openssl`` command, ``beliefs`` records each vipd's own view, ``load`` drives one API server's
Priority and Fairness level full, and ``verdict`` judges a holder timeline. Nothing here is a
stand-in for a Kubernetes component: the servers are the upstream binaries.
"""
