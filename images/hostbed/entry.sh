#!/bin/bash
# The test-bed host's init: cgroup v1 hierarchies for the nested engine, the authorised key, sshd, dockerd.
# Written to /var/log/splitlab-bed.log; the container stops when dockerd or sshd ends.
set -euo pipefail
exec >>/var/log/splitlab-bed.log 2>&1
echo "bed host $(hostname) starting"
# Docker mounts the cgroups read-only: replace them with writable v1 hierarchies of our private cgroup namespace.
umount -R /sys/fs/cgroup 2>/dev/null || true
mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
for h in blkio cpu cpuacct cpuset devices freezer memory pids; do
  mkdir -p "/sys/fs/cgroup/$h"
  mount -t cgroup -o "$h" cgroup "/sys/fs/cgroup/$h"
done
mkdir -p /sys/fs/cgroup/systemd
mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
install -m 600 /dev/stdin /root/.ssh/authorized_keys <<<"${SPLITLAB_BED_PUBKEY:?no SPLITLAB_BED_PUBKEY}"
ssh-keygen -A >/dev/null
/usr/sbin/sshd -D -e -o PasswordAuthentication=no -o PermitRootLogin=prohibit-password &
sshd_pid=$!
dockerd --host=unix:///var/run/docker.sock --storage-driver=overlay2 --iptables=true --userland-proxy=false \
  >/var/log/dockerd.log 2>&1 &
dockerd_pid=$!
wait -n "$sshd_pid" "$dockerd_pid"
echo "bed host $(hostname): sshd or dockerd ended"
