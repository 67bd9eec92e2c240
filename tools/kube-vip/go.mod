// Tries kube-vip at one exact release, as a peer for the Lease benchmark (scripts/setup-kube).
// Optional: scripts/setup-kube says why when it does not build and carries on.
module vipd.local/tools/kube-vip

go 1.26.0

require github.com/kube-vip/kube-vip v1.0.0

tool github.com/kube-vip/kube-vip
