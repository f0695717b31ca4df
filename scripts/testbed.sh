#!/usr/bin/env bash
# The multi-host testbed: N "hosts" as network namespaces on one machine, joined by a bridge
# through veth links whose egress is rate-limited (and optionally delayed) with tc. UCX over TCP
# between these namespaces runs the same code path as between real hosts.
#
#   scripts/testbed.sh up   <bed> <hosts> [--rate 2gbit] [--delay 0ms] [--net 10.77.0]
#   scripts/testbed.sh down <bed>
#   scripts/testbed.sh list <bed>                  # one line per host: <netns> <address>
#   scripts/testbed.sh link <bed> <host> up|down   # take one host's link down mid-test
#
# <bed> is a short name (letters/digits, <= 6 chars) so that interface names fit in 15 bytes.
# Host i (1-based) is namespace lmr-<bed>-<i> with address <net>.<i>/24 on its eth0.
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
    rate=2gbit delay=0ms net=10.77.0
    while [ $# -gt 0 ]; do
      case "$1" in
        --rate) rate=$2; shift 2 ;;
        --delay) delay=$2; shift 2 ;;
        --net) net=$2; shift 2 ;;
        *) die "unknown option $1" ;;
      esac
    done
    [[ $hosts =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le 64 ] || die "hosts must be 1-64"
    [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
    down
    trap 'down; exit 1' ERR
    ip link add "$bridge" type bridge
    ip link set "$bridge" up
    for i in $(seq 1 "$hosts"); do
      ns="lmr-$bed-$i" root_if="lmr$bed$i" host_if="lmr$bed${i}h"
      ip netns add "$ns"
      ip link add "$root_if" type veth peer name "$host_if"
      ip link set "$host_if" netns "$ns"
      ip link set "$root_if" master "$bridge" up
      ip -n "$ns" link set lo up
      ip -n "$ns" link set "$host_if" name eth0
      ip -n "$ns" addr add "$net.$i/24" dev eth0
      ip -n "$ns" link set eth0 up
      # Egress shaping on the host side: each host sends at most <rate>, like a NIC.
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
  *)
    die "unknown command $cmd"
    ;;
esac
