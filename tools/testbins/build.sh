#!/usr/bin/env bash
# Builds the binaries the integration tests run (Kubernetes control plane,
# etcd 3.6 and 3.5, helm, cert-manager) from the Go wrapper modules beside this script,
# through the Go module proxy, into a cache outside the repository:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/testbins/<hash>/
#     k8s/               kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet
#     k8s-1.NN/          kube-apiserver of an older minor (best effort, see README.md)
#     etcd-3.6/          etcd etcdctl etcdutl
#     etcd-3.5/          etcd etcdctl etcdutl
#     helm/              helm
#     cert-manager/      controller cainjector (cert-manager's own webhook is not built)
#     cert-manager-crds/ cert-manager CRD YAML (Certificate, Issuer, ...), same release
#     minio/             minio (the S3 server), minio-setup (users and policies via madmin)
#
# <hash> covers every go.mod, go.sum and .go file under tools/testbins and this
# script, so bumping a version builds into a fresh directory. Each part is built
# only when its .done marker is missing, so an interrupted build resumes.
#
# Usage:
#   bash tools/testbins/build.sh [part ...]   build (all parts by default)
#   bash tools/testbins/build.sh --print-dir  print the directory, build nothing
#
# Progress goes to stderr; the last (and only) line on stdout is the directory:
#   TESTBINS_DIR=$(bash tools/testbins/build.sh | tail -1)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# cert-manager: the binaries come from the cert-manager/ wrapper module, the
# CRDs straight from the same release's module zip. The version must match the
# wrapper's require; the zip's go.sum hash and the release's git commit (for
# AppGitCommit, which upstream's Makefile sets from `git rev-parse HEAD`; the
# module proxy does not record it) are pinned here.
CERT_MANAGER_VERSION=v1.11.5
CERT_MANAGER_SUM=h1:K2LurvwIE4hIhODQZnkOW6ljYe3lVMAliS/to+gI05o=
CERT_MANAGER_GIT_COMMIT=b1d501c85d97afd2adde2e86c2b119ac060caece

export GOTOOLCHAIN=local
export GO111MODULE=on
export CGO_ENABLED=0
GO=${GO:-go}
GO_PARALLEL=${TESTBINS_GO_PARALLEL:-2}

log() { echo "testbins: $*" >&2; }
die() {
	log "error: $*"
	exit 1
}

inputs_hash() {
	(
		cd "$here"
		find . \( -name go.mod -o -name go.sum -o -name '*.go' -o -name build.sh \) -type f -print |
			LC_ALL=C sort |
			while IFS= read -r f; do
				printf '%s\n' "$f"
				cat "$f"
			done
	) | sha256sum | cut -c1-16
}

cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/etcd-operator/testbins
dir=$cache_root/$(inputs_hash)

if [[ ${1:-} == --print-dir ]]; then
	echo "$dir"
	exit 0
fi
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
	sed -n '2,24p' "$0" >&2
	exit 0
fi

command -v "$GO" >/dev/null || die "go not found (looked for '$GO')"
go_version=$("$GO" env GOVERSION)

mkdir -p "$dir"
# One build at a time per cache directory.
if command -v flock >/dev/null; then
	exec 9>"$dir/.lock"
	flock 9
fi

# Version of a module as selected in a wrapper module.
mod_version() { (cd "$1" && "$GO" list -m -mod=readonly -f '{{.Version}}' "$2"); }

gobuild() { # gobuild <module dir> <ldflags> <go build args...>
	local mod=$1 ldflags=$2
	shift 2
	(cd "$mod" && "$GO" build -mod=readonly -p "$GO_PARALLEL" -trimpath -ldflags "$ldflags" "$@") >&2
}

# Kubernetes version ldflags (hack/lib/version.sh sets the same variables).
k8s_ldflags() {
	local version=$1 minor
	minor=$(echo "$version" | cut -d. -f2)
	local pkg flags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	done
	echo "$flags"
}

build_k8s() { # build_k8s <out> <module dir> <cmd...>
	local out=$1 mod=$2 version cmd
	shift 2
	version=$(mod_version "$mod" k8s.io/kubernetes)
	local pkgs=()
	for cmd in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$cmd"); done
	gobuild "$mod" "$(k8s_ldflags "$version")" -o "$out/" "${pkgs[@]}"
	local got
	got=$("$out/kube-apiserver" --version)
	[[ $got == "Kubernetes $version" ]] || die "kube-apiserver --version printed '$got', want 'Kubernetes $version'"
	if [[ -x $out/kubectl ]]; then
		got=$("$out/kubectl" version --client -o json)
		[[ $got == *"\"gitVersion\": \"$version\""* ]] || die "kubectl version --client printed '$got', want $version"
	fi
	echo "$version" >"$out/VERSION"
}

build_etcd() { # build_etcd <out> <module dir>
	local out=$1 mod=$2 version
	version=$(mod_version "$mod" go.etcd.io/etcd/server/v3)
	# One `go build` for the three commands: one package graph, compiled once with -p over all
	# three, the links side by side. With `-o <dir>/` Go names each output after its package's
	# last element before the /v3 suffix: server, etcdctl, etcdutl.
	gobuild "$mod" "-s -w" -o "$out/" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3
	mv "$out/server" "$out/etcd"
	local got
	got=$("$out/etcd" --version)
	[[ $got == *"etcd Version: ${version#v}"* ]] || die "etcd --version printed '$got', want ${version#v}"
	got=$("$out/etcdctl" version)
	[[ $got == *"etcdctl version: ${version#v}"* ]] || die "etcdctl version printed '$got', want ${version#v}"
	got=$("$out/etcdutl" version)
	[[ $got == *"etcdutl version: ${version#v}"* ]] || die "etcdutl version printed '$got', want ${version#v}"
	echo "$version" >"$out/VERSION"
}

build_helm() { # build_helm <out> <module dir>
	local out=$1 mod=$2 version client_go k8s_minor
	version=$(mod_version "$mod" helm.sh/helm/v3)
	# helm's Makefile derives the Kubernetes version it assumes from client-go v0.X.Y -> 1.X.
	client_go=$(mod_version "$mod" k8s.io/client-go)
	k8s_minor=$(echo "$client_go" | cut -d. -f2)
	local flags="-s -w"
	flags+=" -X helm.sh/helm/v3/internal/version.version=$version"
	flags+=" -X helm.sh/helm/v3/internal/version.metadata="
	flags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
	local pkg
	for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
		flags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
	done
	gobuild "$mod" "$flags" -o "$out/helm" helm.sh/helm/v3/cmd/helm
	local got
	got=$(HELM_CONFIG_HOME="$out/.tmp" HELM_CACHE_HOME="$out/.tmp" HELM_DATA_HOME="$out/.tmp" \
		"$out/helm" version --template '{{.Version}}')
	rm -rf "$out/.tmp"
	[[ $got == "$version" ]] || die "helm version printed '$got', want $version"
	echo "$version" >"$out/VERSION"
}

build_cert_manager() { # build_cert_manager <out> <module dir>
	local out=$1 mod=$2 version
	version=$(mod_version "$mod" github.com/cert-manager/cert-manager)
	[[ $version == "$CERT_MANAGER_VERSION" ]] ||
		die "$mod requires cert-manager $version but build.sh pins $CERT_MANAGER_VERSION (and its commit)"
	# The same -X flags as upstream's Makefile (GOLDFLAGS).
	local flags="-s -w"
	flags+=" -X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$version"
	flags+=" -X github.com/cert-manager/cert-manager/pkg/util.AppGitCommit=$CERT_MANAGER_GIT_COMMIT"
	# One `go build` for both commands (outputs named controller and cainjector).
	gobuild "$mod" "$flags" -o "$out/" github.com/cert-manager/cert-manager/cmd/controller \
		github.com/cert-manager/cert-manager/cmd/cainjector
	# Neither command has --version; both log their version and commit (at
	# -v=2) as they start, before they need an apiserver, so start each with a
	# kubeconfig that does not exist and read what it logs before it gives up.
	local bin got
	for bin in controller cainjector; do
		got=$(timeout 60 "$out/$bin" -v=2 --kubeconfig="$out/no-such-kubeconfig" --leader-elect=false 2>&1 | head -20 || true)
		[[ $got == *"version\"=\"$version\""* || $got == *"version=\"$version\""* ]] ||
			die "cert-manager $bin did not log version $version as it started: $got"
		[[ $got == *"$CERT_MANAGER_GIT_COMMIT"* ]] ||
			die "cert-manager $bin did not log commit $CERT_MANAGER_GIT_COMMIT as it started: $got"
	done
	echo "$version" >"$out/VERSION"
}

build_minio() { # build_minio <out> <module dir>
	local out=$1 mod=$2 version
	version=$(mod_version "$mod" github.com/minio/minio)
	# MinIO's release tags are not semver; the module proxy serves commits as pseudo-versions.
	# Its version variables are left alone (they must parse as release times).
	# One `go build` for both (outputs named minio and minio-setup): they share madmin-go & co.
	gobuild "$mod" "-s -w" -o "$out/" github.com/minio/minio ./minio-setup
	local got
	got=$("$out/minio" --version 2>&1 | sed -n 1p)
	[[ $got == "minio version "* ]] || die "minio --version printed '$got'"
	# Read the whole help text before matching: `cmd | grep -q` under pipefail fails whenever grep
	# exits at its first match before the command has written the rest (SIGPIPE).
	local help
	help=$("$out/minio-setup" -h 2>&1) || true
	[[ $help == *-policy* ]] || die "minio-setup -h does not list -policy"
	echo "$version" >"$out/VERSION"
}

build_cert_manager_crds() { # build_cert_manager_crds <out>
	local out=$1 tmp json src sum
	tmp=$(mktemp -d)
	json=$(cd "$tmp" && "$GO" mod download -json "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION")
	rmdir "$tmp"
	src=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
	sum=$(sed -n 's/^[[:space:]]*"Sum": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
	[[ $sum == "$CERT_MANAGER_SUM" ]] || die "cert-manager $CERT_MANAGER_VERSION has sum '$sum', pinned $CERT_MANAGER_SUM"
	[[ -d $src/deploy/crds ]] || die "no deploy/crds in $src"
	# In this release deploy/crds holds the CRDs as the Helm chart's crd
	# templates use them: plain YAML except for four label lines with template
	# markers. Render those as the release's static cert-manager.crds.yaml does
	# (release name and chart name cert-manager, creator "static" so no Helm
	# labels); the check below fails on any marker left elsewhere.
	local f
	for f in "$src"/deploy/crds/crd-*.yaml; do
		sed -e "s/'{{ template \"cert-manager.name\" . }}'/'cert-manager'/" \
			-e "s/'{{ .Release.Name }}'/'cert-manager'/" \
			-e "s/^\( *\)# Generated labels {{- include \"labels\" . | nindent 4 }}\$/\1# Generated labels\n\1app.kubernetes.io\/version: \"$CERT_MANAGER_VERSION\"/" \
			"$f" >"$out/$(basename "$f")"
		chmod 0644 "$out/$(basename "$f")"
	done
	local kind
	for kind in Certificate CertificateRequest Issuer ClusterIssuer Order Challenge; do
		f=$(grep -l "^    kind: $kind\$" "$out"/*.yaml) || die "no CRD for kind $kind in cert-manager $CERT_MANAGER_VERSION"
		grep -q '^apiVersion: apiextensions.k8s.io/v1$' "$f" || die "$f is not an apiextensions.k8s.io/v1 object"
		grep -q '^kind: CustomResourceDefinition$' "$f" || die "$f is not a CustomResourceDefinition"
		! grep -q '{{' "$f" || die "$f has template markers"
	done
	echo "$CERT_MANAGER_VERSION" >"$out/VERSION"
}

# part <name> <required|optional> <function> <args...> runs
# <function> <output dir> <args...> unless the part is already built.
part() {
	local name=$1 need=$2 fn=$3
	shift 3
	local out=$dir/$name
	if [[ -f $out/.done ]]; then
		log "$name cached"
		return 0
	fi
	if [[ $need == optional && -f $out/.failed ]] && [[ $(head -1 "$out/.failed") == "$go_version" ]]; then
		log "$name: not buildable with $go_version: $(sed -n 2p "$out/.failed") (cached result; see $out/build.log)"
		return 0
	fi
	rm -rf "$out"
	mkdir -p "$out"
	log "building $name ..."
	local start=$SECONDS
	if [[ $need == required ]]; then
		"$fn" "$out" "$@"
	else
		# Best effort: record why it failed and go on. (set -e inside the
		# subshell: errexit would be ignored in an `if` condition.)
		local rc
		set +e
		(
			set -e
			"$fn" "$out" "$@"
		) 2>&1 | tee "$out/build.log" >&2
		rc=${PIPESTATUS[0]}
		set -e
		if [[ $rc -ne 0 ]]; then
			local pkg err reason
			pkg=$(grep -m1 '^# ' "$out/build.log" || true)
			if err=$(grep -m1 -E '\.go:[0-9]+(:[0-9]+)?: ' "$out/build.log"); then
				reason="${pkg:+${pkg#\# }: }${err}"
				# A compile error stays until the Go version changes; anything
				# else (network, proxy) is retried on the next run.
				printf '%s\n%s\n' "$go_version" "$reason" >"$out/.failed"
			else
				reason=$(grep -m1 -E '^go: |[Ee]rror' "$out/build.log" || tail -1 "$out/build.log")
			fi
			find "$out" -mindepth 1 -maxdepth 1 ! -name build.log ! -name .failed -exec rm -rf {} +
			log "$name: not buildable with $go_version: $reason"
			return 0
		fi
		rm -f "$out/build.log"
	fi
	touch "$out/.done"
	log "$name built in $((SECONDS - start))s"
}

all_parts=(k8s etcd-3.6 etcd-3.5 helm cert-manager cert-manager-crds minio)
for m in "$here"/k8s-1.*/; do
	[[ -f $m/go.mod ]] && all_parts+=("$(basename "$m")")
done

want=("$@")
if [[ ${#want[@]} -eq 0 ]]; then
	want=("${all_parts[@]}")
fi

for name in "${want[@]}"; do
	case $name in
	k8s)
		part k8s required build_k8s "$here/k8s" kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet
		;;
	k8s-1.*)
		[[ -f $here/$name/go.mod ]] || die "unknown part '$name' (no $here/$name/go.mod)"
		part "$name" optional build_k8s "$here/$name" kube-apiserver
		;;
	etcd-3.*)
		[[ -f $here/$name/go.mod ]] || die "unknown part '$name' (no $here/$name/go.mod)"
		part "$name" required build_etcd "$here/$name"
		;;
	helm)
		part helm required build_helm "$here/helm"
		;;
	cert-manager)
		part cert-manager required build_cert_manager "$here/cert-manager"
		;;
	cert-manager-crds)
		part cert-manager-crds required build_cert_manager_crds
		;;
	minio)
		part minio required build_minio "$here/minio"
		;;
	*)
		die "unknown part '$name' (known: ${all_parts[*]})"
		;;
	esac
done

echo "$dir"
