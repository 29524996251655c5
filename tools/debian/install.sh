#!/usr/bin/env bash
# Installs the Debian packages the tests need (tools/debian/packages.txt), those missing only.
#
# None of them is started as a service: the tests start what they need themselves, on
# loopback and in network namespaces of their own (Squid's and containerd's package services
# are stopped where the system started them; docker.io's, when this installs it, is disabled).
# Without root and sudo, it says what is missing and exits 0: the tests that need a package
# then skip, saying why (or fail where PANDO_REAL_NODES=1 demands the real node, or
# PANDO_DOCKER=1 the Docker Engine).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mapfile -t wanted < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$here/packages.txt" | grep -v '^$')
missing=()
for pkg in "${wanted[@]}"; do
    status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
    [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
if ((${#missing[@]} == 0)); then
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
        echo "debian/install.sh: not root: install these for every test to run: ${missing[*]}" >&2
        exit 0
    fi
    sudo="sudo"
fi
echo "debian/install.sh: installing ${missing[*]}" >&2
# Services must not start on install (the tests run these programs themselves).
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod +x "$policy"
    trap '$sudo rm -f "$policy"' EXIT
fi
$sudo apt-get update -qq
# busybox (the dynamic one) replaces busybox-static: the images need its shell to find /bin/wget.
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
if command -v systemctl >/dev/null; then
    for service in squid containerd; do
        if systemctl is-active --quiet "$service" 2>/dev/null; then
            $sudo systemctl disable --now "$service"
        fi
    done
fi
# docker.io's postinst enables its service for the next boot (update-rc.d; on systemd, the
# service and docker.socket): the tests start their own engine, the host never runs one. Only
# when this run installed it: a Docker the machine's owner already runs is left alone.
if [[ " ${missing[*]} " == *" docker.io "* ]]; then
    if [ -d /run/systemd/system ]; then
        $sudo systemctl disable --now docker.socket docker.service >/dev/null 2>&1 || true
    elif command -v update-rc.d >/dev/null && [ -x /etc/init.d/docker ]; then
        $sudo update-rc.d docker disable >/dev/null 2>&1 || true
    fi
fi
# openssh-server's postinst enables sshd for the next boot: the tests start their own sshd (in
# an engine's namespace, on a port of their own). Only when this run installed it.
if [[ " ${missing[*]} " == *" openssh-server "* ]]; then
    if [ -d /run/systemd/system ]; then
        $sudo systemctl disable --now ssh.socket ssh.service >/dev/null 2>&1 || true
    elif command -v update-rc.d >/dev/null && [ -x /etc/init.d/ssh ]; then
        $sudo update-rc.d ssh disable >/dev/null 2>&1 || true
    fi
fi
