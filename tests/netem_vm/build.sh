#!/usr/bin/env bash
# Builds the boot files of the netem VM (tests/cluster/test_netem_vm.py): Debian's kernel, the package behind
# linux-image-amd64 (it has sch_netem, which this machine's kernel lacks), and a gzipped initramfs holding
# busybox-static, the kernel modules the guest needs (load order resolved here with the package's own
# depmod/modprobe data) and tests/netem_vm/init.sh as /init.
#
# Usage: build.sh [OUT_DIR]   (default: .build/netem-vm in the repository)
# The kernel is downloaded once per package version (and module list), the initramfs rebuilt when init.sh,
# busybox or the modules change: a second run downloads nothing. Prints "vmlinuz PATH" and "initramfs PATH" on
# stdout; progress and errors go to stderr. Needs apt (as root when the package lists must be updated), kmod,
# cpio and busybox-static (images/host-deps.sh installs them).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:-$repo/.build/netem-vm}
meta_pkg=linux-image-amd64
# what the guest loads before it mounts the host's root: virtio-9p for the shares, veth and bridge for the
# namespaces' links, htb + netem + u32 for chaos.net.netem (dependencies are added by modprobe below)
modules=(virtio_pci 9pnet_virtio 9p veth bridge sch_htb sch_netem cls_u32)

fail() { echo "netem-vm build: $*" >&2; exit 1; }
say() { echo "netem-vm build: $*" >&2; }

for cmd in apt-get apt-cache dpkg-deb depmod modprobe cpio gzip sha256sum; do
  command -v "$cmd" >/dev/null 2>&1 || fail "'$cmd' is not installed (images/host-deps.sh installs it; run it as root)"
done
[ -x /bin/busybox ] || fail "/bin/busybox is missing: apt-get install busybox-static"
if ldd /bin/busybox >/dev/null 2>&1; then
  fail "/bin/busybox is dynamically linked and cannot run in the initramfs: apt-get install busybox-static"
fi

# --- which kernel: the concrete package behind the meta package, and its version -------------------------------
concrete() {
  apt-cache depends "$meta_pkg" 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | awk 'NR == 1'
}
pkg=$(concrete)
if [ -z "$pkg" ]; then
  say "apt knows no package behind $meta_pkg yet: apt-get update"
  apt-get update -qq || fail "apt-get update failed (is a Debian mirror reachable?)"
  pkg=$(concrete)
fi
[ -n "$pkg" ] || fail "apt knows no package behind $meta_pkg (no Debian mirror in the apt sources?)"
ver=$(apt-cache show --no-all-versions "$pkg" | sed -n 's/^Version: //p' | awk 'NR == 1')
[ -n "$ver" ] || fail "apt-cache shows no version of $pkg"
kver=${pkg#linux-image-}
mods_key=$(echo "${modules[*]}" | sha256sum | cut -c1-8)
kdir=$out/${pkg}_${ver}-m$mods_key  # the kernel and the modules the guest loads, in load order
mkdir -p "$out"
tmp=$(mktemp -d "$out/.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# --- the kernel: downloaded and unpacked once per package version ------------------------------------------------
if [ -f "$kdir/complete" ]; then
  say "cached kernel: $kdir"
else
  say "downloading $pkg=$ver"
  if ! (cd "$tmp" && apt-get download -q "$pkg=$ver" >/dev/null 2>"$tmp/download.err"); then
    say "download failed ($(tail -1 "$tmp/download.err")): apt-get update and again"
    apt-get update -qq || fail "apt-get update failed (is a Debian mirror reachable?)"
    (cd "$tmp" && apt-get download -q "$pkg=$ver" >/dev/null 2>"$tmp/download.err") \
      || fail "apt-get download $pkg=$ver failed: $(tail -1 "$tmp/download.err")"
  fi
  deb=$(ls "$tmp"/*.deb)
  mkdir "$tmp/x"
  dpkg-deb -x "$deb" "$tmp/x" || fail "dpkg-deb -x $deb failed"
  rm -f "$deb"
  if [ ! -d "$tmp/x/lib/modules/$kver" ] && [ -d "$tmp/x/usr/lib/modules/$kver" ]; then
    ln -s usr/lib "$tmp/x/lib"  # a merged-/usr package: depmod -b looks in BASE/lib/modules
  fi
  [ -d "$tmp/x/lib/modules/$kver" ] || fail "$pkg holds no lib/modules/$kver"
  [ -f "$tmp/x/boot/vmlinuz-$kver" ] || fail "$pkg holds no boot/vmlinuz-$kver"
  depmod -b "$tmp/x" "$kver" || fail "depmod -b $tmp/x $kver failed"
  mkdir -p "$tmp/k/modules"
  for m in "${modules[@]}"; do
    modprobe -d "$tmp/x" -S "$kver" --show-depends "$m" || fail "modprobe finds no module '$m' in $pkg"
  done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' > "$tmp/paths"
  while read -r path; do
    case "$path" in
      *.ko) cp "$path" "$tmp/k/modules/" && basename "$path" >> "$tmp/k/modules/load.order" ;;
      *) fail "module $path is compressed; busybox insmod in the initramfs takes plain .ko files only" ;;
    esac
  done < "$tmp/paths"
  cp "$tmp/x/boot/vmlinuz-$kver" "$tmp/k/vmlinuz"
  echo "$pkg $ver: $(tr '\n' ' ' < "$tmp/k/modules/load.order")" > "$tmp/k/complete"
  rm -rf "$tmp/x" "$kdir"
  mv "$tmp/k" "$kdir"
  for old in "$out"/linux-image-*; do  # another kernel version or module list: only the current one is kept
    [ "$old" = "$kdir" ] || rm -rf "$old"
  done
  say "kernel $(cat "$kdir/complete")"
fi

# --- the initramfs: busybox, the modules, /init; rebuilt when one of them changes -----------------------------------
inputs=$( { cat "$here/init.sh" "$kdir/complete"; /bin/busybox 2>&1 | awk 'NR == 1'; } | sha256sum | cut -c1-12)
initramfs=$kdir/initramfs-$inputs.cpio.gz
if [ -f "$initramfs" ]; then
  say "cached initramfs: $initramfs"
else
  root=$tmp/root
  mkdir -p "$root"/{bin,dev,proc,sys,host,lib}
  cp -r "$kdir/modules" "$root/lib/modules"
  cp /bin/busybox "$root/bin/busybox"
  install -m 0755 "$here/init.sh" "$root/init"
  (cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -6 > "$tmp/initramfs.cpio.gz" \
    || fail "packing the initramfs failed"
  rm -f "$kdir"/initramfs-*.cpio.gz
  mv "$tmp/initramfs.cpio.gz" "$initramfs"
  say "built $initramfs ($(du -h "$initramfs" | cut -f1))"
fi
echo "vmlinuz $kdir/vmlinuz"
echo "initramfs $initramfs"
