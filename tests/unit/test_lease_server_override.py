"""``election.lease.api_server`` wins over the kubeconfig's server on every request.

The kubernetes client's kubeconfig loader re-reads the token before each request through
``refresh_api_key_hook``, copying the kubeconfig's server (in kubeadm's admin.conf, the VIP)
back over the configuration, and re-installs a fresh copy of that hook each time. A real
kube-apiserver bed caught vipd's second and later requests going to the VIP; this pins the
override across many refreshes.
"""

from __future__ import annotations

from pathlib import Path

from vipd.config import Lease
from vipd.kube import Access, Credentials, configuration

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: b, cluster: {server: "https://10.0.0.100:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: b, context: {cluster: b, user: u}}]
current-context: b
"""


def test_api_server_and_tls_name_survive_every_token_refresh(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    conf = configuration(Access.from_lease(Lease()), Credentials(str(path), str(path)))
    assert conf.host == "https://127.0.0.1:6443"
    for _ in range(5):  # what the client does before each request
        conf.refresh_api_key_hook(conf)
        assert conf.host == "https://127.0.0.1:6443"
        assert conf.tls_server_name == "kubernetes"
        assert conf.api_key == {"BearerToken": "Bearer abc"}
