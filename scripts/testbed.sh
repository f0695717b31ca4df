#!/usr/bin/env bash
# The multi-host testbed: N "hosts" as network namespaces on one machine, joined by a bridge
# through veth links whose egress is rate-limited (and optionally delayed) with tc. UCX over TCP
# between these namespaces runs the same code path as between real hosts.
#
#   scripts/testbed.sh up   <bed> <hosts> [--rate 2gbit] [--delay 0ms] [--net 10.77.0] [--mtu 1500]
#   scripts/testbed.sh down <bed>
#   scripts/testbed.sh list <bed>                  # one line per host: <netns> <address>
#   scripts/testbed.sh link <bed> <host> up|down   # take one host's link down mid-test
#   scripts/testbed.sh stall <bed> <host> <port>[/<mask>] on|off [--rate R]
#                                                  # starve one host's TCP traffic to/from <port>
#                                                  # (a block of ports with a mask, e.g. 13312/0xffc0)
#                                                  # (a link that stops carrying one service while
#                                                  # the host's other traffic flows)
#
# <bed> is a short name (letters/digits, <= 6 chars) so that interface names fit in 15 bytes.
# Host i (1-based) is namespace lmr-<bed>-<i> with address <net>.<i>/24 on its eth0. The bridge
# itself has <net>.254: services of the root namespace (nats-server, the manager) are reached there.
# Needs root (CAP_NET_ADMIN). `down` is idempotent and removes everything `up` made.
set -euo pipefail

die() { echo "testbed: $*" >&2; exit 2; }
[ $# -ge 2 ] || die "usage: $0 up|down|list|link <bed> ..."
cmd=$1 bed=$2
shift 2
[[ $bed =~ ^[a-z0-9]{1,6}$ ]] || die "bed name must be 1-6 lowercase letters or digits"
bridge="lmrb-$bed"

down() {
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^lmr-$bed-[0-9]+$" || true); do
    # Whatever still runs in a host (daemons of a run that was killed before it could stop them)
    # would keep its memory and retry a network that is gone: it goes with the host.
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  # Namespaces are torn down asynchronously by the kernel: remove our root-side veth ends
  # ourselves and wait until they are gone, so that an immediate `up` can reuse the names.
  for _ in $(seq 1 50); do
    left=$(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^lmr$bed[0-9]+h?$" || true)
    [ -z "$left" ] && break
    for ifname in $left; do ip link del "$ifname" 2>/dev/null || true; done
    sleep 0.1
  done
}

case "$cmd" in
  up)
    hosts=${1:?number of hosts}
    shift
    rate=2gbit delay=0ms net=10.77.0 mtu=1500
    while [ $# -gt 0 ]; do
      case "$1" in
        --rate) rate=$2; shift 2 ;;
        --delay) delay=$2; shift 2 ;;
        --net) net=$2; shift 2 ;;
        --mtu) mtu=$2; shift 2 ;;
        *) die "unknown option $1" ;;
      esac
    done
    [[ $hosts =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le 64 ] || die "hosts must be 1-64"
    [[ $mtu =~ ^[0-9]+$ ]] && [ "$mtu" -ge 576 ] && [ "$mtu" -le 65535 ] || die "mtu must be 576-65535"
    [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
    down
    trap 'down; exit 1' ERR
    ip link add "$bridge" type bridge
    ip addr add "$net.254/24" dev "$bridge"
    ip link set "$bridge" up
    for i in $(seq 1 "$hosts"); do
      ns="lmr-$bed-$i" root_if="lmr$bed$i" host_if="lmr$bed${i}h"
      ip netns add "$ns"
      ip link add "$root_if" mtu "$mtu" type veth peer name "$host_if" mtu "$mtu"
      ip link set "$host_if" netns "$ns"
      ip link set "$root_if" master "$bridge" up
      ip -n "$ns" link set lo up
      ip -n "$ns" link set "$host_if" name eth0
      ip -n "$ns" addr add "$net.$i/24" dev eth0
      ip -n "$ns" link set eth0 up
      # Both directions shaped, like a full-duplex NIC: the host side limits what the host sends,
      # the bridge side what it receives (from the root namespace too).
      tc qdisc add dev "$root_if" root tbf rate "$rate" burst 1mb latency 100ms
      if [ "$delay" != "0ms" ]; then
        ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: netem delay "$delay"
        ip netns exec "$ns" tc qdisc add dev eth0 parent 1: handle 2: tbf rate "$rate" burst 1mb latency 100ms
      else
        ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 1mb latency 100ms
      fi
    done
    trap - ERR
    ;;
  down)
    down
    ;;
  list)
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^lmr-$bed-[0-9]+$" | sort -t- -k3 -n || true); do
      addr=$(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1)
      echo "$ns $addr"
    done
    ;;
  link)
    host=${1:?host number} state=${2:?up or down}
    ip -n "lmr-$bed-$host" link set eth0 "$state"
    ;;
  stall)
    host=${1:?host number} spec=${2:?port} state=${3:?on or off}
    port=${spec%%/*} mask=0xffff
    [[ $spec == */* ]] && mask=${spec#*/}
    shift 3
    rate=2gbit
    [ "${1:-}" = "--rate" ] && rate=$2
    ns="lmr-$bed-$host"
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
    if [ "$state" = on ]; then
      # htb: class 1:10 (8 bit/s) takes the port's packets, 1:20 everything else at <rate>. Its
      # bucket holds 1 byte, not htb's default (225 bytes at this rate), which it starts full:
      # enough for a connection's first packets, so a peer that connected before anything else
      # of this port's traffic had drained it got its handshake through the black hole.
      ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: htb default 20 r2q 1000
      ip netns exec "$ns" tc class add dev eth0 parent 1: classid 1:10 htb rate 8bit ceil 8bit burst 1 cburst 1 2>/dev/null
      ip netns exec "$ns" tc class add dev eth0 parent 1: classid 1:20 htb rate "$rate"
      for dir in dport sport; do
        ip netns exec "$ns" tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip "$dir" "$port" "$mask" flowid 1:10
      done
    else
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 1mb latency 100ms
    fi
    ;;
  *)
    die "unknown command $cmd"
    ;;
esac
