#!/usr/bin/env bash
# Build kube-apiserver and kubelet 1.20.2 from Debian's own `kubernetes` source package
# (bookworm: 1.20.5+really1.20.2-1.1+deb12u1, full upstream tree with vendor/; Debian ships only
# kubectl from it) with Debian's golang-1.19. Nothing but Debian's mirror is used: apt-get
# source through a private deb-src list (the machine's apt config is not touched), GOPROXY=off.
#
#   OUT=dir [WORK=dir] bash build.sh  # -> $OUT/bin/{kube-apiserver,kubelet}; WORK kept
# (tests/support/k8slab.py runs it once, into $VPATCH_TEST_CACHE/k8s, and removes WORK after)
#
# The only step beyond `go build`: pkg/generated/openapi/zz_generated.openapi.go is not in the
# tarball (upstream's `make` generates it), so openapi-gen (vendored) makes it first, over the
# same package list as build/root/Makefile.generated_files. On the 2-core test machine under
# load, the build took 10-20 min of wall time and ~1.7 GB of work dir (source, Go cache).
set -euo pipefail
OUT=${OUT:?set OUT to a directory for the binaries}
mkdir -p "$OUT/bin"
OUT=$(cd "$OUT" && pwd)
WORK=${WORK:-$(mktemp -d -t vpatch-k8sbuild.XXXXXX)}
cd "$WORK"

command -v go >/dev/null 2>&1 || [ -x /usr/lib/go-1.19/bin/go ] || {
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends golang-1.19-go >/dev/null
}
export PATH=/usr/lib/go-1.19/bin:$PATH

mkdir -p apt/lists/partial apt/cache/archives/partial
printf 'deb-src http://deb.debian.org/debian bookworm main\n' >apt/sources.list
O=(-o "Dir::Etc::SourceList=$WORK/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$WORK/apt/lists" -o "Dir::Cache=$WORK/apt/cache")
apt-get "${O[@]}" update -qq
apt-get "${O[@]}" source --download-only kubernetes >/dev/null
tar xzf kubernetes_*.orig.tar.gz
SRC=$(ls -d "$WORK"/kubernetes-1.*)

# GOPATH mode, as 1.20's hack/ scripts build (vendor/k8s.io/* are links into staging/)
export GOPATH=$WORK/gopath GOCACHE=$WORK/gocache GO111MODULE=off GOPROXY=off CGO_ENABLED=0
mkdir -p "$GOPATH/src/k8s.io"
ln -sfn "$SRC" "$GOPATH/src/k8s.io/kubernetes"
cd "$GOPATH/src/k8s.io/kubernetes"

go build -o "$WORK/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
find -H . -not \( \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune \) -name '*.go' -type f \
  | sed 's|^./staging/src|vendor|; s|^\./||' \
  | grep -v -E '^vendor/k8s.io/(code-generator|sample-apiserver)/' \
  | xargs grep -l '^// *+k8s:' | xargs grep -l '+k8s:openapi-gen=' \
  | xargs -n1 dirname | LC_ALL=C sort -u | sed 's|^|k8s.io/kubernetes/|' >"$WORK/openapi-dirs.txt"
"$WORK/openapi-gen" --logtostderr -i "$(paste -sd, "$WORK/openapi-dirs.txt")" \
  -p k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi \
  -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt -r "$WORK/openapi-report.txt"

V=v1.20.2
P=k8s.io/kubernetes/vendor/k8s.io
LD="-s -w -X $P/component-base/version.gitVersion=$V -X $P/component-base/version.gitMajor=1"
LD="$LD -X $P/component-base/version.gitMinor=20 -X $P/client-go/pkg/version.gitVersion=$V"
LD="$LD -X $P/component-base/version.gitTreeState=clean"
nice go build -p 2 -ldflags "$LD" -o "$OUT/bin/" ./cmd/kube-apiserver ./cmd/kubelet
"$OUT/bin/kube-apiserver" --version
"$OUT/bin/kubelet" --version
echo "build_k8s: binaries in $OUT/bin; work dir (source, Go cache) $WORK: remove it when done" >&2
