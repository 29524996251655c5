#!/usr/bin/env bash
# Installs Squid from Debian's archive for the egress gateway's proxy test (skipped when present).
# The test runs it on loopback with the configuration the Kubernetes adapter writes.
set -euo pipefail
if command -v squid >/dev/null || [ -x /usr/sbin/squid ]; then
    exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
# The package's own service is never started: the test runs squid in the foreground itself.
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends squid
# Where the system started the package's service, stop it: nothing may listen beyond loopback.
if command -v systemctl >/dev/null && systemctl is-active --quiet squid 2>/dev/null; then
    $sudo systemctl disable --now squid
fi
