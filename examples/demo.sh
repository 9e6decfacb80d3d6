#!/usr/bin/env bash
# demo.sh: dpd on three workloads, judged by real packets. Run as root from
# the repository (`make demo` builds first). It creates three namespaces
# wired like a Calico CNI would (host veth cali-demo-*, pod address /32,
# default route via 169.254.1.1), starts bin/dpd with the linux dataplane
# on a private socket and pin directory, applies examples/demo.yaml with
# bin/dpdctl, probes every interesting connection with nc and ping, prints
# the verdicts and the endpoints' statuses, and removes everything it
# created on exit. Exit status: 0 when every verdict is the expected one.
set -euo pipefail

cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
SCENARIO=${SCENARIO:-examples/demo.yaml}

if [[ $(id -u) != 0 ]]; then
  echo "demo.sh: run as root (it creates namespaces and loads eBPF programs)" >&2
  exit 2
fi
for tool in ip nc ping "$BIN/dpd" "$BIN/dpdctl"; do
  command -v "$tool" >/dev/null || { echo "demo.sh: $tool not found (run 'make demo')" >&2; exit 2; }
done

TMP=$(mktemp -d /tmp/dpd-demo.XXXXXX)
SOCK=$TMP/dpd.sock
PIN=/sys/fs/bpf/dpd-demo-$$
DPD_PID=""
PODS=(frontend backend db)
declare -A IFACE=([frontend]=cali-demo-fe [backend]=cali-demo-be [db]=cali-demo-db)
declare -A ADDR=([frontend]=10.65.77.1 [backend]=10.65.77.2 [db]=10.65.77.3)
declare -A MAC=([frontend]=0a:58:0a:41:4d:01 [backend]=0a:58:0a:41:4d:02 [db]=0a:58:0a:41:4d:03)
ns() { echo "dpd-demo-$1"; }

cleanup() {
  local rc=$?
  set +e
  if [[ -n $DPD_PID ]] && kill -0 "$DPD_PID" 2>/dev/null; then
    kill -TERM "$DPD_PID"
    wait "$DPD_PID" 2>/dev/null
  fi
  for p in "${PODS[@]}"; do
    ip netns pids "$(ns "$p")" 2>/dev/null | xargs -r kill 2>/dev/null
    ip link del "${IFACE[$p]}" 2>/dev/null
    ip netns del "$(ns "$p")" 2>/dev/null
  done
  # The pins hold dpd's maps and links; removing them detaches everything.
  rm -rf "$PIN"
  if [[ $rc != 0 && -s $TMP/dpd.log ]]; then
    echo "--- dpd log (last 40 lines) ---" >&2
    tail -n 40 "$TMP/dpd.log" >&2
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }

step "three workloads, wired as a CNI plugin would"
for p in "${PODS[@]}"; do
  ip netns add "$(ns "$p")"
  ip link add "${IFACE[$p]}" type veth peer name eth0 address "${MAC[$p]}" netns "$(ns "$p")"
  ip -n "$(ns "$p")" link set lo up
  ip -n "$(ns "$p")" addr add "${ADDR[$p]}/32" dev eth0
  ip -n "$(ns "$p")" link set eth0 up
  ip -n "$(ns "$p")" route add 169.254.1.1 dev eth0 scope link
  ip -n "$(ns "$p")" route add default via 169.254.1.1 dev eth0
  ip link set "${IFACE[$p]}" up
  printf '  %-9s %-13s %s\n' "$p" "${IFACE[$p]}" "${ADDR[$p]}/32"
done

step "starting dpd (linux dataplane, socket $SOCK, pins $PIN)"
"$BIN/dpd" --dataplane=linux --socket "$SOCK" --bpf-pin-dir "$PIN" \
  --metrics-addr 127.0.0.1:0 --log-level info >"$TMP/dpd.log" 2>&1 &
DPD_PID=$!
for _ in $(seq 100); do
  "$BIN/dpdctl" --socket "$SOCK" --timeout 1s status >/dev/null 2>&1 && break
  kill -0 "$DPD_PID" 2>/dev/null || { echo "dpd exited" >&2; exit 1; }
  sleep 0.1
done
"$BIN/dpdctl" --socket "$SOCK" status >/dev/null

step "applying $SCENARIO (tier 'demo', profile kns.shop, IP set s:shop-frontends)"
"$BIN/dpdctl" --socket "$SOCK" apply -f "$SCENARIO" --fail-on-error

# Servers on every probed port, so a failed probe is a policy drop and not
# a closed port.
serve() { ip netns exec "$(ns "$1")" nc -lk "$2" >/dev/null 2>&1 & }
serve backend 8080
serve backend 9090
serve db 5432
serve frontend 8080
for _ in $(seq 50); do
  ip netns exec "$(ns backend)" nc -z 127.0.0.1 8080 2>/dev/null &&
    ip netns exec "$(ns backend)" nc -z 127.0.0.1 9090 2>/dev/null &&
    ip netns exec "$(ns db)" nc -z 127.0.0.1 5432 2>/dev/null &&
    ip netns exec "$(ns frontend)" nc -z 127.0.0.1 8080 2>/dev/null && break
  sleep 0.1
done

# probe FROM TO PROTO PORT: exit status 0 when the exchange completes.
probe() {
  local from=$1 to=$2 proto=$3 port=$4
  if [[ $proto == icmp ]]; then
    ip netns exec "$(ns "$from")" ping -n -c1 -W1 "${ADDR[$to]}" >/dev/null 2>&1
  else
    ip netns exec "$(ns "$from")" nc -z -w 1 "${ADDR[$to]}" "$port" >/dev/null 2>&1
  fi
}

step "connections, probed with real packets"
failures=0
printf '  %-9s %-9s %-9s %-9s %-9s %s\n' FROM TO WHAT EXPECTED OBSERVED ""
while read -r from to proto port want; do
  got=deny
  # An allowed flow gets a second chance (a lost first ARP); a denied one
  # must fail every time.
  for _ in 1 2; do
    if probe "$from" "$to" "$proto" "$port"; then got=allow; break; fi
    [[ $want == deny ]] && break
  done
  what=$proto
  [[ $proto == tcp ]] && what=tcp/$port
  mark=ok
  if [[ $got != "$want" ]]; then mark=MISMATCH; failures=$((failures + 1)); fi
  printf '  %-9s %-9s %-9s %-9s %-9s %s\n' "$from" "$to" "$what" "$want" "$got" "$mark"
done <<'EOF'
frontend backend tcp 8080 allow
frontend backend tcp 9090 deny
frontend backend icmp - deny
frontend db tcp 5432 deny
backend db tcp 5432 allow
backend frontend tcp 8080 deny
db backend tcp 8080 deny
db frontend icmp - deny
EOF

step "endpoints, as dpd reports them (bin/dpdctl endpoints)"
"$BIN/dpdctl" --socket "$SOCK" endpoints

if [[ $failures != 0 ]]; then
  echo
  echo "demo: $failures verdict(s) differ from the expected ones" >&2
  exit 1
fi
echo
echo "demo: every verdict is as expected; cleaning up"
