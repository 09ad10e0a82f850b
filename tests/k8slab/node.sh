#!/usr/bin/env bash
# The k8s lab's one-node Kubernetes 1.20 (tests/support/k8slab.py starts it; `make k8s-lab`):
#   etcd (Debian etcd-server 3.4), kube-apiserver + kubelet (tests/k8slab/build.sh, from Debian's
#   `kubernetes` source package, 1.20.2, with Debian's golang-1.19), containerd 1.6 + runc 1.1 +
#   CNI bridge (Debian). No scheduler/controller-manager: pods name their node (spec.nodeName),
#   and the ServiceAccount admission plugin is off (no controller makes the default account).
#
# Everything runs in namespaces this script makes (pid + net + mount + uts): its own network
# with lo + a veth 10.200.0.1 (no `dummy` driver in this kernel) and a CNI bridge, a tmpfs over
# /run, /var/log and /var/lib (kubelet's and libcni's fixed paths), so nothing listens on the
# machine's network and killing the namespace's PID 1 ends every process of the cluster. Only
# cgroups are shared with the machine (containerd puts pods under /sys/fs/cgroup/*/k8s.io/,
# removed at the end).
#
#   K8S_BIN=dir IMAGES_TAR=docker-archive ENV_OUT=file bash node.sh
# IMAGES_TAR: a docker archive (`podman save -m`) holding the pods' images and the sandbox image
# localhost/pause:1. Exit 0 when the node registered and a static pod ran; the node is left
# running and ENV_OUT gets NSPID (kill it to stop everything), WORK (remove it after) and
# KUBECONFIG. On a failure everything is torn down (LOGS_TO=dir keeps the daemons' logs).
set -euo pipefail

K8S_BIN=${K8S_BIN:?set K8S_BIN to the directory holding kube-apiserver and kubelet}
K8S_BIN=$(cd "$K8S_BIN" && pwd)
W=$(mktemp -d -t vpatch-k8s.XXXXXX)
IMG=localhost/pause:1  # the static pod's: the base rootfs (python3), CMD sleep
up=0
fails=0
now() { date +%s.%N; }
dt() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }
ok() { printf '%-16s | ok   | %6s s | %s\n' "$1" "$2" "$3"; }
bad() { printf '%-16s | FAIL | %6s s | %s\n' "$1" "$2" "$3"; fails=$((fails + 1)); }
T0=$(now)

IMAGES_TAR=${IMAGES_TAR:?set IMAGES_TAR to a docker archive of the images}
ENV_OUT=${ENV_OUT:?set ENV_OUT to a file for NSPID, WORK and KUBECONFIG}
cg_before=$(ls -d /sys/fs/cgroup/*/k8s.io 2>/dev/null || true)

# The namespaces: `sleep` is their PID 1; killing it kills every process of the cluster.
unshare --pid --fork --mount-proc --net --mount --uts --propagation private sleep infinity \
  </dev/null >/dev/null 2>&1 &
UPID=$!
for _ in $(seq 50); do
  NSPID=$(cat "/proc/$UPID/task/$UPID/children" 2>/dev/null | tr -d ' ') && [ -n "$NSPID" ] && break
  sleep 0.1
done
in_ns() { nsenter -t "$NSPID" -p -n -m -u -- "$@"; }
teardown() {
  if [ "$up" = 1 ]; then return; fi
  if [ -n "${LOGS_TO:-}" ]; then mkdir -p "$LOGS_TO" && cp -r "$W/logs/." "$LOGS_TO/"; fi
  kill -KILL "$NSPID" 2>/dev/null || true
  wait "$UPID" 2>/dev/null || true
  # containerd's pod cgroups (only if this run made the k8s.io subtree)
  if [ -z "$cg_before" ]; then
    for d in /sys/fs/cgroup/*/k8s.io; do
      [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
    done
  fi
  rm -rf "$W"
}
trap teardown EXIT

in_ns sh -c '
  hostname node1
  ip link set lo up
  ip link add node0 type veth peer name node0p
  ip addr add 10.200.0.1/24 dev node0 && ip link set node0 up && ip link set node0p up
  ip route add default dev node0
  mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /var/log && mount -t tmpfs tmpfs /var/lib
  mkdir -p /var/log/pods /var/log/containers'

mkdir -p "$W"/{etcd,containerd,cni,kubelet,manifests,logs}
openssl genrsa -out "$W/sa.key" 2048 2>/dev/null
TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
echo "$TOKEN,admin,admin,system:masters" >"$W/tokens.csv"
cat >"$W/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://10.200.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: "$TOKEN"}}]
contexts: [{name: local, context: {cluster: local, user: admin}}]
current-context: local
EOF
cat >"$W/containerd/config.toml" <<EOF
version = 2
root = "$W/containerd/root"
state = "$W/containerd/state"
[grpc]
  address = "$W/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:1"
  # no CAP_SYS_RESOURCE here: the kubelet's oom_score_adj -998 for sandboxes (lower than ours)
  # kills runc's init ("can't get final child's PID from pipe: EOF"); clamp it to ours.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$W/cni"
EOF
cat >"$W/cni/10-bridge.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "pods", "plugins": [{"type": "bridge", "bridge": "cni0",
 "isGateway": true, "ipMasq": false, "ipam": {"type": "host-local", "dataDir": "$W/cni-ipam",
 "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}
EOF

L=$W/logs
in_ns etcd --name n1 --data-dir "$W/etcd" --listen-client-urls http://127.0.0.1:2379 \
  --advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
  --initial-advertise-peer-urls http://127.0.0.1:2380 --initial-cluster n1=http://127.0.0.1:2380 \
  >"$L/etcd.log" 2>&1 &
in_ns "$K8S_BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
  --bind-address=10.200.0.1 --secure-port=6443 --advertise-address=10.200.0.1 \
  --cert-dir="$W/apiserver-pki" --token-auth-file="$W/tokens.csv" \
  --service-cluster-ip-range=10.96.0.0/24 --service-account-issuer=https://kubernetes.default.svc \
  --service-account-key-file="$W/sa.key" --service-account-signing-key-file="$W/sa.key" \
  --authorization-mode=AlwaysAllow --disable-admission-plugins=ServiceAccount \
  --allow-privileged=true --kubelet-preferred-address-types=InternalIP \
  >"$L/apiserver.log" 2>&1 &
APID=$!
in_ns containerd --config "$W/containerd/config.toml" >"$L/containerd.log" 2>&1 &
K() { in_ns kubectl --kubeconfig "$W/kubeconfig" "$@"; }

t=$(now)
for _ in $(seq 300); do K get --raw /readyz >/dev/null 2>&1 && break; kill -0 "$APID" 2>/dev/null || break; sleep 0.5; done
if K get --raw /readyz >/dev/null 2>&1; then ok apiserver "$(dt "$t" "$(now)")" "etcd + kube-apiserver $(K version --short 2>/dev/null | tail -1)"
else bad apiserver "$(dt "$t" "$(now)")" "not ready: $(tail -3 "$L/apiserver.log")"; exit 1; fi

t=$(now)
for _ in $(seq 100); do [ -S "$W/containerd/containerd.sock" ] && break; sleep 0.2; done
in_ns ctr -a "$W/containerd/containerd.sock" -n k8s.io images import "$IMAGES_TAR" >/dev/null
ok images "$(dt "$t" "$(now)")" "$(in_ns ctr -a "$W/containerd/containerd.sock" -n k8s.io images ls -q | tr '\n' ' ')"

SERVER='import signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
print("server up", flush=True)
while True:
    time.sleep(3600)'
py_yaml() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }
cat >"$W/manifests/static-py.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata: {name: static-py}
spec:
  hostNetwork: true
  containers:
  - name: py
    image: $IMG
    imagePullPolicy: Never
    command: ["python3", "-c", $(py_yaml "$SERVER")]
EOF

t=$(now)
in_ns "$K8S_BIN/kubelet" --kubeconfig="$W/kubeconfig" --container-runtime=remote \
  --container-runtime-endpoint="unix://$W/containerd/containerd.sock" --runtime-request-timeout=5m \
  --cgroup-driver=cgroupfs --cgroups-per-qos=false --enforce-node-allocatable= \
  --fail-swap-on=false --root-dir="$W/kubelet" --cert-dir="$W/kubelet/pki" \
  --pod-manifest-path="$W/manifests" --hostname-override=node1 --node-ip=10.200.0.1 \
  --eviction-hard='memory.available<1Mi' --image-gc-high-threshold=100 --image-gc-low-threshold=99 \
  --read-only-port=0 --anonymous-auth=true --authorization-mode=AlwaysAllow --oom-score-adj=0 \
  >"$L/kubelet.log" 2>&1 &
for _ in $(seq 240); do
  [ "$(K get node node1 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ] && break
  sleep 0.5
done
st=$(K get node node1 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status} {.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}' 2>/dev/null || true)
case $st in True*) ok node "$(dt "$t" "$(now)")" "node1 Ready: $st" ;;
  *) bad node "$(dt "$t" "$(now)")" "node1: '$st'; kubelet: $(grep -E '^E' "$L/kubelet.log" | tail -2)" ;; esac

t=$(now)
for _ in $(seq 240); do [ "$(K get pod static-py-node1 -o jsonpath='{.status.phase}' 2>/dev/null)" = Running ] && break; sleep 0.5; done
ph=$(K get pod static-py-node1 -o jsonpath='{.status.phase}' 2>/dev/null || true)
[ "$ph" = Running ] && ok static-pod "$(dt "$t" "$(now)")" "static-py-node1 Running (mirror pod in the API)" \
  || bad static-pod "$(dt "$t" "$(now)")" "phase '$ph'"

[ "$fails" = 0 ] || exit 1
up=1
printf 'NSPID=%s\nWORK=%s\nKUBECONFIG=%s\nCG_NEW=%s\n' "$NSPID" "$W" "$W/kubeconfig" \
  "$([ -z "$cg_before" ] && echo 1 || echo 0)" >"$ENV_OUT"
echo "k8s node up in $(dt "$T0" "$(now)") s (NSPID $NSPID)"
