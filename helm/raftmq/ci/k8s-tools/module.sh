# Shared by the Kubernetes tool builds (sourced, not run): a throw-away Go module that requires k8s.io/kubernetes
# and replaces each of its staging modules (which its own go.mod points at ./staging) by the published twin, and
# the version ldflags without which the binaries report v0.0.0-master (Helm refuses that for a chart with a
# kubeVersion constraint).

# k8s_module_init VERSION: turn the current directory into such a module (go.mod only; `go get` what you build).
k8s_module_init() {
    local version="$1" gomod staging_version
    go mod init raftmq.local/k8s-tools >/dev/null 2>&1
    go mod edit -go=1.26.0
    # k8s.io/kubernetes' own go.mod lists its staging modules; each becomes a replace by v0.<minor>.<patch>.
    gomod="$(go mod download -json "k8s.io/kubernetes@v${version}" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
    staging_version="v0.${version#1.}"
    {
        echo "require k8s.io/kubernetes v${version}"
        echo "replace ("
        sed -n 's#^\s*\(k8s\.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_version"'#p' "$gomod"
        echo ")"
    } >> go.mod
    echo "k8s-tools: $(grep -c '=> k8s.io/' go.mod) staging modules replaced by ${staging_version}" >&2
}

# k8s_ldflags VERSION: -ldflags for `go build` (stripped, with the server/client version set).
k8s_ldflags() {
    local version="$1" minor pkg flags="-s -w"
    minor="${version#1.}"; minor="${minor%%.*}"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X ${pkg}.gitVersion=v${version} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
        flags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
    done
    echo "$flags"
}
