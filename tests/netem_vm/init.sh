#!/bin/busybox sh
# /init of the netem VM's initramfs (built by tests/netem_vm/build.sh): loads the kernel modules, mounts the
# host's root filesystem read-only (9p tag hostroot) and the results directory writable (9p tag results), runs
# the repository's tests/netem_vm/guest_check.py with the repository's venv python in a chroot of the host's
# root, then powers the VM off. Parameters come on the kernel command line: splitlab.repo=DIR
# splitlab.python=PATH. Every line it prints starts with "splitlab-guest:"; the last one is "exit CODE".
/bin/busybox mkdir -p /proc /sys /dev /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1

say() { echo "splitlab-guest: $*"; }
finish() {
  say "exit $1"
  sync
  poweroff -f
  echo o > /proc/sysrq-trigger  # poweroff did not work: the kernel powers off itself
  sleep 5
}

say "init on $(uname -r)"
repo=
python=
for word in $(cat /proc/cmdline); do
  case "$word" in
    splitlab.repo=*) repo=${word#*=} ;;
    splitlab.python=*) python=${word#*=} ;;
  esac
done
if [ -z "$repo" ] || [ -z "$python" ]; then
  say "error: the kernel command line lacks splitlab.repo= or splitlab.python=: $(cat /proc/cmdline)"
  finish 2
fi

while read -r module; do
  insmod "/lib/modules/$module" || { say "error: insmod $module failed"; finish 3; }
done < /lib/modules/load.order
say "modules loaded: $(tr '\n' ' ' < /lib/modules/load.order)"

host=/host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose hostroot "$host" \
  || { say "error: mounting the host's root (9p tag hostroot) on $host failed"; finish 4; }
case "$repo/" in  # a repository under /tmp or /run would vanish below the tmpfs: keep it aside, put it back
  /tmp/*|/run/*)
    mkdir -p /keep && mount --bind "$host$repo" /keep || { say "error: bind-mounting $repo failed"; finish 4; } ;;
esac
for fs in "tmpfs /tmp" "tmpfs /run" "proc /proc" "sysfs /sys" "devtmpfs /dev"; do
  set -- $fs
  mount -t "$1" "$1" "$host$2" || { say "error: mounting $1 on $host$2 failed"; finish 4; }
done
if [ -d /keep ]; then
  mkdir -p "$host$repo" && mount --move /keep "$host$repo" || { say "error: putting $repo back failed"; finish 4; }
fi
chmod 1777 "$host/tmp"
mkdir -p "$host/run/results"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 results "$host/run/results" \
  || { say "error: mounting the results share (9p tag results) on $host/run/results failed"; finish 4; }
chroot "$host" /bin/sh -c 'test -x "$1"' sh "$python" \
  || { say "error: no python at $python on the host's root"; finish 5; }
say "host root mounted; running $repo/tests/netem_vm/guest_check.py with $python"

chroot "$host" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PYTHONPATH="$repo" SPLITLAB_NETEM_VM=1 \
  /bin/sh -c 'cd "$1" && exec "$2" tests/netem_vm/guest_check.py --results /run/results' sh "$repo" "$python"
code=$?
umount "$host/run/results"
finish "$code"
