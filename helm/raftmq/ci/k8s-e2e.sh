#!/usr/bin/env bash
# End-to-end check of the raftmq chart on a real cluster: the one your current kubeconfig context points at.
#
#   IMAGE=registry.example.com/raftmq:0.1.0 make k8s-e2e
#
# 1. installs the chart into a fresh namespace and waits for every member to be ready;
# 2. `helm test`: writes a message through the quorum and reads it back from every member;
# 3. checks that exactly one pod is labelled leader and that the leader Service routes to it only;
# 4. writes a marker message, force-kills the leader pod (no preStop, no graceful shutdown: a crash);
# 5. checks that a new leader is elected and labelled, that writes work again, that the pod comes back ready,
#    and that the marker written before the crash is on every member;
# 6. does a rolling restart (preStop hand-off, readiness-paced; only the member restarting may be unready at any
#    moment), runs `helm test` again;
# 7. (GROUPS_UPGRADE=1, the default) upgrades to groups: 2: group 0's pods must stay the same pods, the second
#    group comes up, the members learn it through DNS, and a write through the one client Service naming the
#    second group is stored there; then a lower `groups` must be refused; uninstalls and deletes
#    the namespace (KEEP=1 keeps them for debugging).
#
# Needs: kubectl, helm (3.8+ or 4), a cluster that can pull $IMAGE (for kind: `docker build -t raftmq:e2e .` and
# `kind load docker-image raftmq:e2e`, then IMAGE=raftmq:e2e), a default StorageClass, and room for 6 pods.
# Single-node clusters (kind, minikube) need ANTI_AFFINITY=soft (the default here); use hard on real clusters.
# CI cannot run this: no cluster is reachable there. The same checks of the rendered chart run in tests/helm/.
set -euo pipefail

CHART_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
: "${IMAGE:?set IMAGE=<repository>:<tag> to an image of this repository that the cluster can pull}"
NAMESPACE="${NAMESPACE:-raftmq-e2e-$(date +%s)}"
RELEASE="${RELEASE:-e2e}"
ANTI_AFFINITY="${ANTI_AFFINITY:-soft}"
STORAGE_SIZE="${STORAGE_SIZE:-4Gi}"  # the chart refuses less than ~2.9Gi with the default store sizes
TIMEOUT="${TIMEOUT:-600s}"
KEEP="${KEEP:-0}"
DIAG_DIR="${DIAG_DIR:-}"  # on failure, every pod's whole log (and its previous container's) and the events go here
# 1: also install the ValidatingAdmissionPolicy (Kubernetes 1.30+, cluster-admin) and check it stops a member
# from labelling a peer.
ADMISSION_POLICY="${ADMISSION_POLICY:-0}"
GROUPS_UPGRADE="${GROUPS_UPGRADE:-1}"
# Each member's CPU request: the chart's 500m fits 4 members on a 2-CPU node; the second group needs 6 (set at
# install: changing it later would roll group 0).
CPU_REQUEST="${CPU_REQUEST:-250m}"

repo="${IMAGE%:*}"
tag="${IMAGE##*:}"
if [[ "$repo" == "$IMAGE" || "$tag" == */* ]]; then
  echo "k8s-e2e: IMAGE must be <repository>:<tag>, got '$IMAGE'" >&2
  exit 2
fi

log() { printf '\n=== %s\n' "$*"; }
die() { printf 'k8s-e2e: FAIL: %s\n' "$*" >&2; exit 1; }

for tool in kubectl helm; do
  command -v "$tool" >/dev/null || die "$tool is not on PATH"
done
kubectl version --request-timeout=10s >/dev/null 2>&1 \
  || die "no reachable cluster in the current kubeconfig context ($(kubectl config current-context 2>/dev/null || echo none))"

FULL="${RELEASE}-raftmq"
SELECTOR="app.kubernetes.io/instance=${RELEASE},app.kubernetes.io/component=broker"
CLIENT_SVC="${FULL}.${NAMESPACE}.svc.cluster.local:8081"
kc() { kubectl -n "$NAMESPACE" "$@"; }

cleanup() {
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    log "diagnostics"
    kc get pods -o wide -L raftmq.io/role || true
    for pod in $(kc get pods -l "app.kubernetes.io/instance=${RELEASE}" -o name 2>/dev/null); do  # every group
      echo "--- $pod"; kc logs "$pod" --tail=40 || true
      if [[ -n "$DIAG_DIR" ]]; then
        kc logs "$pod" --all-containers >"$DIAG_DIR/${pod#pod/}.log" 2>&1 || true
        kc logs "$pod" --all-containers --previous >"$DIAG_DIR/${pod#pod/}.previous.log" 2>&1 || true
      fi
    done
    kc get events --sort-by=.lastTimestamp | tail -30 || true
    if [[ -n "$DIAG_DIR" ]]; then
      kc get events --sort-by=.lastTimestamp >"$DIAG_DIR/events.txt" 2>&1 || true
      echo "full logs and events in $DIAG_DIR"
    fi
  fi
  if [[ "$KEEP" == "1" ]]; then
    echo "KEEP=1: leaving release $RELEASE in namespace $NAMESPACE"
  else
    helm uninstall "$RELEASE" -n "$NAMESPACE" --wait >/dev/null 2>&1 || true
    kubectl delete namespace "$NAMESPACE" --wait=false >/dev/null 2>&1 || true
  fi
  exit $rc
}
trap cleanup EXIT

leader_pods() { kc get pods -l "${SELECTOR},raftmq.io/role=leader" -o jsonpath='{.items[*].metadata.name}'; }

# Waits until exactly one pod carries raftmq.io/role=leader (optionally a different one than $1); prints it.
wait_for_leader() {
  local not="${1:-}" pods
  for _ in $(seq 1 90); do
    pods="$(leader_pods)"
    if [[ -n "$pods" && "$pods" != *" "* && "$pods" != "$not" ]]; then
      echo "$pods"
      return 0
    fi
    sleep 2
  done
  die "no single leader label after 180s (leader pods: '${pods:-none}')"
}

# Runs the raftmq CLI inside a running member (the image ships it); the member's own config is not involved.
cli() { kc exec "$1" -c raftmq -- raftmq "${@:2}"; }

log "install $IMAGE as $RELEASE into namespace $NAMESPACE"
kubectl create namespace "$NAMESPACE"
helm install "$RELEASE" "$CHART_DIR" -n "$NAMESPACE" \
  --set image.repository="$repo" --set image.tag="$tag" \
  --set podAntiAffinity="$ANTI_AFFINITY" --set persistence.size="$STORAGE_SIZE" \
  --set resources.requests.cpu="$CPU_REQUEST" \
  --set rbac.admissionPolicy.enabled="$([[ "$ADMISSION_POLICY" == 1 ]] && echo true || echo false)" \
  --wait --timeout "$TIMEOUT"
kc rollout status "statefulset/$FULL" --timeout "$TIMEOUT"

log "helm test (write through the quorum, read back from every member)"
helm test "$RELEASE" -n "$NAMESPACE" --logs --timeout "$TIMEOUT"

leader="$(wait_for_leader)"
survivor="$(kc get pods -l "$SELECTOR" -o jsonpath='{.items[*].metadata.name}' | tr ' ' '\n' | grep -vx "$leader" | head -1)"
echo "leader: $leader, running the CLI from: $survivor"
cli "$survivor" cluster status --server "$CLIENT_SVC"

log "the leader Service routes to the leader pod only"
for attempt in $(seq 1 30); do
  behind="$(kc get endpointslices -l "kubernetes.io/service-name=${FULL}-leader" \
    -o jsonpath='{range .items[*].endpoints[*]}{.targetRef.name}{" "}{end}' | xargs)"
  [[ "$behind" == "$leader" ]] && break
  [[ $attempt -eq 30 ]] && die "leader Service endpoints are '$behind', expected '$leader'"
  sleep 2
done
if [[ "$ADMISSION_POLICY" == 1 ]]; then
  log "the admission policy stops $survivor from labelling its peer $leader"
  kc exec "$survivor" -c raftmq -- python -c '
import sys
from kubernetes import client, config
config.load_incluster_config()
try:
    client.CoreV1Api().patch_namespaced_pod(sys.argv[1], sys.argv[2], {"metadata": {"labels": {"raftmq.io/role": "follower"}}},
                                            _content_type="application/merge-patch+json")
except client.ApiException as e:
    print("refused:", e.status, e.reason)
    sys.exit(0 if e.status in (403, 422) else 1)
print("a member relabelled its peer")
sys.exit(1)' "$leader" "$NAMESPACE" || die "the admission policy let a member relabel another pod"
  [[ "$(leader_pods)" == "$leader" ]] || die "the leader label changed during the admission check"
fi
cli "$survivor" topic create e2e --server "$CLIENT_SVC" || [[ $? -eq 6 ]]
cli "$survivor" produce e2e --body via-leader-service --server "${FULL}-leader.${NAMESPACE}.svc.cluster.local:8081" \
  || die "write through the leader Service failed"

marker="before-crash-$(date +%s)"
log "write $marker, then kill the leader $leader"
cli "$survivor" produce e2e --body "$marker" --keys "$marker" --server "$CLIENT_SVC"
old_uid="$(kc get pod "$leader" -o jsonpath='{.metadata.uid}')"
kc delete pod "$leader" --grace-period=0 --force --wait=false

log "a new leader takes over"
new_leader="$(wait_for_leader "$leader")"
echo "new leader: $new_leader"
writer="$survivor"
[[ "$writer" == "$leader" ]] && writer="$new_leader"
for attempt in $(seq 1 30); do
  if cli "$writer" produce e2e --body "after-crash" --server "$CLIENT_SVC"; then break; fi
  [[ $attempt -eq 30 ]] && die "writes did not recover after the leader was killed"
  sleep 2
done

log "the killed pod comes back and catches up"
for _ in $(seq 1 150); do
  uid="$(kc get pod "$leader" -o jsonpath='{.metadata.uid}' 2>/dev/null || true)"
  [[ -n "$uid" && "$uid" != "$old_uid" ]] && break
  sleep 2
done
kc wait --for=condition=Ready "pod/$leader" --timeout "$TIMEOUT"
kc rollout status "statefulset/$FULL" --timeout "$TIMEOUT"
replicas="$(kc get statefulset "$FULL" -o jsonpath='{.spec.replicas}')"
for i in $(seq 0 $((replicas - 1))); do
  member="${FULL}-${i}.${FULL}-headless.${NAMESPACE}.svc.cluster.local:8081"
  for attempt in $(seq 1 30); do
    if cli "$writer" query e2e --key "$marker" --begin=-1h --json --server "$member" | grep -q "\"$marker\""; then
      echo "ok: $member has $marker"
      break
    fi
    [[ $attempt -eq 30 ]] && die "$member lost $marker (acknowledged before the crash)"
    sleep 2
  done
done
cli "$writer" cluster status --server "$CLIENT_SVC"

log "rolling restart (preStop hands leadership away, the PDB and readiness pace it)"
# Only the member being restarted may be unready: the others must stay ready through each restart's election.
ready_log="$(mktemp)"
( while :; do
    kc get pods -l "$SELECTOR" -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{" "}{end}' \
      >>"$ready_log" 2>/dev/null || true
    echo >>"$ready_log"
    sleep 1
  done ) &
sampler=$!
kc rollout restart "statefulset/$FULL"
kc rollout status "statefulset/$FULL" --timeout "$TIMEOUT"
kill "$sampler" 2>/dev/null || true
min_ready="$(awk 'NF > 0 { n = 0; for (i = 1; i <= NF; i++) if ($i ~ /=True$/) n++; print n }' "$ready_log" | sort -n | head -1)"
echo "fewest ready members in $(grep -c . "$ready_log") samples during the rollout: ${min_ready:-?} of $replicas"
[[ -n "$min_ready" && "$min_ready" -ge $((replicas - 1)) ]] \
  || die "members other than the one restarting went unready during the rolling restart (samples in $ready_log)"
wait_for_leader >/dev/null

log "helm test again"
helm test "$RELEASE" -n "$NAMESPACE" --logs --timeout "$TIMEOUT"

if [[ "$GROUPS_UPGRADE" == "1" ]]; then
  log "groups 1 -> 2: a second Raft group; group 0's pods stay the same pods"
  pod_uids() { kc get pods -l "$SELECTOR" -o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid} {end}'; }
  uids_before="$(pod_uids)"
  helm upgrade "$RELEASE" "$CHART_DIR" -n "$NAMESPACE" --reuse-values --set groups=2 --wait --timeout "$TIMEOUT"
  kc rollout status "statefulset/${FULL}-g1" --timeout "$TIMEOUT"
  [[ "$(pod_uids)" == "$uids_before" ]] || die "the upgrade to groups: 2 replaced group 0's pods ($uids_before -> $(pod_uids))"
  group1="$(kc get configmap "${FULL}-g1" -o jsonpath='{.data.raftmq\.yaml}' | sed -n 's/^  group: "\(.*\)"$/\1/p')"
  [[ -n "$group1" ]] || die "no cluster.group in ${FULL}-g1's config"
  g1_member="${FULL}-g1-0.${FULL}-g1-headless.${NAMESPACE}.svc.cluster.local:8081"
  # the members learn the group through DNS (every 5 s); its leader's reconcile pass creates the topic in it
  g1_marker="in-group-1-$(date +%s)"
  for attempt in $(seq 1 60); do
    sent="$(cli "$writer" produce e2e --body "$g1_marker" --keys "$g1_marker" --broker "$group1" --json \
      --server "$CLIENT_SVC" 2>&1 || true)"
    if grep -q "\"broker\": \"$group1\"" <<<"$sent"; then
      echo "sent through $CLIENT_SVC: $sent"
      break
    fi
    [[ $attempt -eq 60 ]] && die "no write through the client Service landed in group $group1"
    sleep 3
  done
  for attempt in $(seq 1 30); do
    found="$(cli "$writer" query e2e --key "$g1_marker" --begin=-1h --json --server "$g1_member" 2>&1 || true)"
    if grep -q "\"$g1_marker\"" <<<"$found"; then
      echo "ok: $g1_member (group $group1) has $g1_marker, written through $CLIENT_SVC"
      break
    fi
    [[ $attempt -eq 30 ]] && die "$g1_member does not have $g1_marker"
    sleep 2
  done
  status="$(cli "$writer" cluster status --server "$CLIENT_SVC")"
  echo "$status"
  grep -q "$group1" <<<"$status" || die "cluster status does not list group $group1"

  log "groups 2 -> 1 without draining is refused"
  if out="$(helm upgrade "$RELEASE" "$CHART_DIR" -n "$NAMESPACE" --reuse-values --set groups=1 2>&1)"; then
    die "helm upgrade to groups: 1 was accepted without groupsDrained"
  fi
  grep -q "groupsDrained" <<<"$out" || die "the refusal does not say how to confirm: $out"
  echo "refused: $out"
fi

log "PASS"
