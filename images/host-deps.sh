#!/usr/bin/env bash
# Installs the host packages splitlab needs when they are missing (Debian/Ubuntu, as root): mmdebstrap (base image),
# iptables and iproute2 (faults), util-linux (nsenter/unshare), a Java runtime for Spark and a JDK for the JGroups
# image's trace protocol, python3-venv; gcc and python3-dev for the node's compiled build (mypyc); qemu-system-x86,
# busybox-static, kmod and cpio for the netem VM test (tests/netem_vm: Debian's kernel with sch_netem, booted in
# qemu); tcpdump, the outside reader of the pcap files that `splitlab capture` writes
# (tests/unit/test_chaos_capture.py); tshark, which decodes them with the generated dissector
# (tests/unit/test_wireshark.py); chromium, the headless browser that renders the report's message sequence diagram
# (tests/unit/test_sequence_browser.py).
set -euo pipefail
need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
have_cmd mmdebstrap || need+=(mmdebstrap)
have_cmd iptables || need+=(iptables)
have_cmd ip || need+=(iproute2)
have_cmd tc || need+=(iproute2)
have_cmd nsenter || need+=(util-linux)
have_cmd java || need+=(default-jre-headless)
have_cmd javac || need+=(default-jdk-headless)  # compiles the JGroups image's trace protocol (images/jgroups/java)
have_pkg libjgroups-java || need+=(libjgroups-java)  # the real jar on the host: the codec test feeds it forged frames
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
have_cmd gcc || need+=(gcc)  # mypyc's C: the node image's compiled build (chaos/cluster/compiled.py)
# the headers mypyc's C is compiled against
headers='import os, sysconfig; raise SystemExit(not os.path.isfile(sysconfig.get_paths()["include"] + "/Python.h"))'
python3 -c "$headers" || need+=(python3-dev)
have_cmd qemu-system-x86_64 || need+=(qemu-system-x86)
have_pkg busybox-static || need+=(busybox-static)  # the initramfs needs the static build at /bin/busybox
have_pkg kmod || need+=(kmod)  # depmod/modprobe resolve the guest's module load order
have_cmd cpio || need+=(cpio)
have_cmd tcpdump || need+=(tcpdump)  # the capture test: tcpdump reads our pcap files and we read its
have_cmd tshark || need+=(tshark)  # the dissector test: tshark decodes captures with `splitlab wireshark lua`
have_cmd chromium || need+=(chromium)  # the report test: headless Chromium runs the diagram's script
if ! have_cmd docker-compose && ! docker compose version >/dev/null 2>&1; then need+=(docker-compose); fi
if [ ${#need[@]} -eq 0 ]; then
  echo "host packages: all present"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "host packages missing: ${need[*]}; run as root (sudo make ...) or install them" >&2
  exit 1
fi
echo "host packages: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
