#!/bin/sh
# Starts FRR inside a lab pod: forwarding on, zebra, then staticd, bfdd, ospfd and
# isisd, then the integrated configuration (/etc/frr/frr.conf) loaded into them by
# vtysh; and lldpd, where it is installed, on every Ethernet port. The daemons stay
# children of this script, so their output is the pod's log and the script runs as
# long as they do.
set -eu
sysctl -qw net.ipv4.ip_forward=1
install -d -o frr -g frr -m 0755 /var/run/frr
wait_for() {
  tries=600
  until [ -S "$1" ]; do
    tries=$((tries - 1))
    [ "$tries" -gt 0 ] || { echo "start-frr: no $1 after 60s" >&2; exit 1; }
    sleep 0.1
  done
}
/usr/lib/frr/zebra -A 127.0.0.1 &
wait_for /var/run/frr/zserv.api
for daemon in staticd bfdd ospfd isisd; do
  /usr/lib/frr/$daemon -A 127.0.0.1 &
done
for daemon in zebra staticd bfdd ospfd isisd; do
  wait_for /var/run/frr/$daemon.vty
done
vtysh -b
echo "start-frr: zebra, staticd, bfdd, ospfd and isisd configured from /etc/frr/frr.conf"
if command -v lldpd >/dev/null; then
  # Its privilege-separated half chroots into /run/lldpd: the pod's own /run.
  install -d -m 0755 /run/lldpd
  lldpd -d &
  echo "start-frr: lldpd on every Ethernet port"
fi
wait
