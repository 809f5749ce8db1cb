#!/usr/bin/env bash
# Install the Debian/Ubuntu packages agglab needs, only if something is missing.
# Idempotent: a second run makes no network request. Needs root (make calls it via sudo).
set -euo pipefail
pkgs=(mininet python3-venv python3-dev iproute2 ethtool tcpdump procps tshark openssh-server openssh-client sudo)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages: all present (${pkgs[*]})"
  exit 0
fi
echo "system packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
