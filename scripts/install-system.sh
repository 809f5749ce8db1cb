#!/usr/bin/env bash
# Install the Debian/Ubuntu packages agglab needs, only if something is missing.
# Idempotent: a second run makes no network request. Needs root (make calls it via sudo).
set -euo pipefail
# Everything agglab and its tests run: Mininet and its tools; cpp (tests/test_p4gen.py
# preprocesses the P4 constants); shellcheck (tests/test_scripts.py); tshark (the Wireshark
# dissector's tests); iputils-ping (Mininet's ping in the lab); graphviz (topology and tree
# drawings); chromium + chromium-driver (browser tests of the web view); openssh-server and
# tmux (cluster and lab session tests); openssh-client and sudo (cluster mode: Mininet's
# RemoteMixin runs `sudo -E ssh ... sudo -E mnexec`); build-essential (gcc: `pip install` builds the
# switch's C fast path, softswitch/fastdense.c, with it and python3-dev's headers; without a
# compiler the install goes on and the switch runs its Python path). --no-install-recommends pulls in none of these by
# itself, so each is named here; tests/test_scripts.py checks the list against the tests.
pkgs=(mininet python3-venv python3-dev iproute2 ethtool tcpdump procps tshark
      make cpp shellcheck iputils-ping graphviz chromium chromium-driver openssh-server tmux
      openssh-client sudo build-essential)
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
