#!/usr/bin/env bash
# Provision a machine for agglab's BMv2 backend: Mininet, BMv2 (simple_switch), p4c, p4-utils,
# the project's .venv; then compile p4src/ and run the BMv2 conformance vectors as the proof.
#
#   sudo scripts/provision-vm.sh            # on a bare Ubuntu 22.04 (the Vagrant VM) or 24.04
#
# Where BMv2 and p4c come from (AGGLAB_P4_SOURCE=auto|packages|source, default auto):
#   packages  the p4lang packages on the openSUSE Build Service, project home:p4lang,
#             xUbuntu_<release>: p4lang-bmv2 and p4lang-p4c. Published for Ubuntu 20.04/22.04;
#             p4c's maintainers state there is no p4lang-bmv2 for 24.04 (p4lang/p4c#5047).
#   source    BMv2 tag $BMV2_TAG and p4c tag $P4C_TAG built from p4lang's GitHub repositories
#             into $P4_PREFIX (about an hour on 2 cores), as p4lang/tutorials' VM scripts do.
#   auto      packages where they are published, else (or if apt cannot install them) source.
# Built from source, BMv2 is the performance build (AGGLAB_BMV2_BUILD=perf|reference|debug, default
# perf: -O3, no logging macros, no event logger, so no per-packet log lines; `debug` keeps the
# logs and adds -O0 -g and BMv2's debugger; `reference` is the p4kit's -O2 build), see
# scripts/build-bmv2.sh. The packages are whatever p4lang built.
# p4-utils (nsg-ethz, not on PyPI) is installed from git at the pinned $P4UTILS_COMMIT.
#
# Idempotent: tools already present are kept. Everything is downloaded here, inside the VM;
# nothing of it is part of the repository. Needs root.
set -euo pipefail

BMV2_TAG=${BMV2_TAG:-1.15.5}
P4C_TAG=${P4C_TAG:-v1.2.4.8}
P4UTILS_COMMIT=${P4UTILS_COMMIT:-83b118bbae530b31cc74e7fa32f9174f7c0a1184}
P4_PREFIX=${P4_PREFIX:-/usr/local}
P4_SOURCE=${AGGLAB_P4_SOURCE:-auto}
BMV2_BUILD=${AGGLAB_BMV2_BUILD:-perf}
SRC_DIR=${AGGLAB_SRC_DIR:-/usr/local/src/agglab-p4}
OBS=https://download.opensuse.org/repositories/home:/p4lang
REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROJECT_USER=${AGGLAB_USER:-${SUDO_USER:-root}}
JOBS=$(nproc 2>/dev/null || echo 2)
export DEBIAN_FRONTEND=noninteractive

say() { printf '\n=== provision-vm: %s\n' "$*"; }
die() { printf 'provision-vm: %s\n' "$*" >&2; exit 2; }

have_p4_tools() {
  command -v simple_switch >/dev/null && command -v simple_switch_CLI >/dev/null && command -v p4c >/dev/null
}

os_release() {
  # shellcheck disable=SC1091  # present on every systemd distribution
  . /etc/os-release
  OS_ID=$ID
  OS_VERSION=$VERSION_ID
}

install_base() {
  say "Debian/Ubuntu packages (Mininet, Python, git, build basics)"
  apt-get update -q
  apt-get install -y -q --no-install-recommends ca-certificates curl gnupg git make sudo \
    python3-venv python3-dev python3-pip python3-thrift python3-networkx python3-psutil
  bash "$REPO_DIR/scripts/install-system.sh"
}

# -- BMv2 and p4c from the p4lang packages ------------------------------------------------
install_from_packages() {
  [ "$OS_ID" = ubuntu ] || { echo "no p4lang packages for $OS_ID"; return 1; }
  case "$OS_VERSION" in
    20.04|22.04) ;;
    *) echo "no p4lang-bmv2 package is published for Ubuntu $OS_VERSION (p4lang/p4c#5047)"; return 1 ;;
  esac
  say "p4lang-bmv2 and p4lang-p4c from OBS home:p4lang (xUbuntu_$OS_VERSION)"
  install -d -m 0755 /etc/apt/keyrings
  curl -fsSL "$OBS/xUbuntu_$OS_VERSION/Release.key" | gpg --dearmor --yes -o /etc/apt/keyrings/home_p4lang.gpg
  echo "deb [signed-by=/etc/apt/keyrings/home_p4lang.gpg] $OBS/xUbuntu_$OS_VERSION/ /" \
    > /etc/apt/sources.list.d/home_p4lang.list
  apt-get update -q
  apt-get install -y -q p4lang-bmv2 p4lang-p4c
}

# -- BMv2 and p4c from pinned upstream tags ------------------------------------------------
clone_tag() {  # url tag dir
  if [ ! -d "$3/.git" ]; then
    git clone --depth 1 --branch "$2" --recurse-submodules --shallow-submodules "$1" "$3"
  fi
  [ "$(git -C "$3" describe --tags --exact-match)" = "$2" ] || die "$3 is not at tag $2"
}

build_bmv2() {
  say "BMv2 $BMV2_TAG from source into $P4_PREFIX ($BMV2_BUILD build, scripts/build-bmv2.sh)"
  # protobuf: BMv2's packet tracing (configure's --with-packet-trace, on by default) needs protoc
  apt-get install -y -q --no-install-recommends build-essential autoconf automake libtool libtool-bin \
    pkg-config bison flex g++ libgmp-dev libpcap-dev libboost-dev libboost-program-options-dev \
    libboost-system-dev libboost-filesystem-dev libboost-thread-dev libboost-test-dev libevent-dev \
    libssl-dev libffi-dev libreadline-dev libjsoncpp-dev libnanomsg-dev libxxhash-dev thrift-compiler \
    libthrift-dev python3-thrift python3-six protobuf-compiler libprotobuf-dev
  clone_tag https://github.com/p4lang/behavioral-model.git "$BMV2_TAG" "$SRC_DIR/behavioral-model"
  bash "$REPO_DIR/scripts/build-bmv2.sh" "--$BMV2_BUILD" --src "$SRC_DIR/behavioral-model" "$P4_PREFIX"
}

build_p4c() {
  say "p4c $P4C_TAG from source into $P4_PREFIX (BMv2 back end only)"
  apt-get install -y -q --no-install-recommends cmake g++ bison flex libfl-dev libgc-dev libgmp-dev \
    libboost-dev libboost-iostreams-dev libboost-graph-dev llvm pkg-config protobuf-compiler \
    libprotobuf-dev libprotoc-dev python3
  clone_tag https://github.com/p4lang/p4c.git "$P4C_TAG" "$SRC_DIR/p4c"
  mkdir -p "$SRC_DIR/p4c/build"
  (cd "$SRC_DIR/p4c/build" \
     && cmake .. -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$P4_PREFIX" -DENABLE_BMV2=ON \
          -DENABLE_EBPF=OFF -DENABLE_UBPF=OFF -DENABLE_DPDK=OFF -DENABLE_P4TC=OFF -DENABLE_P4TEST=OFF \
          -DENABLE_P4C_GRAPHS=OFF -DENABLE_GTESTS=OFF -DENABLE_PROTOBUF_STATIC=OFF \
     && make -j"$JOBS" && make install)
}

install_from_source() {
  mkdir -p "$SRC_DIR"
  command -v simple_switch >/dev/null || build_bmv2
  command -v p4c >/dev/null || build_p4c
}

# BMv2's Python runtime (runtime_CLI, bm_runtime, sswitch_runtime) lands in
# PREFIX/lib/python3.X/site-packages, which Debian's python3 does not search: a .pth file fixes it
# for simple_switch_CLI's users, p4-utils and agglab's .venv (built with --system-site-packages).
link_bmv2_python() {
  local purelib site
  purelib=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  for site in "$P4_PREFIX"/lib/python3*/site-packages; do
    [ -d "$site/bm_runtime" ] || continue
    mkdir -p "$purelib"
    echo "$site" > "$purelib/agglab-bmv2.pth"
  done
}

install_p4utils() {
  say "p4-utils at $P4UTILS_COMMIT (SimpleSwitchThriftAPI)"
  # --no-deps: its pins (grpcio 1.44, protobuf 3.20.3) are for its P4Runtime half, which agglab
  # does not use; its Thrift API needs thrift, networkx and psutil, installed above from apt.
  local pipflags=(--no-deps)
  if python3 -m pip install --help | grep -q -- --break-system-packages; then
    pipflags+=(--break-system-packages)
  fi
  python3 -m pip install "${pipflags[@]}" "git+https://github.com/nsg-ethz/p4-utils.git@$P4UTILS_COMMIT"
  python3 -c 'from p4utils.utils.sswitch_thrift_API import SimpleSwitchThriftAPI' \
    || die "p4-utils' SimpleSwitchThriftAPI does not import (BMv2's Python modules missing?)"
}

as_project_user() {
  if [ "$PROJECT_USER" = root ]; then "$@"; else sudo -u "$PROJECT_USER" -H "$@"; fi
}

check_p4() {
  say "compile p4src/ and run the BMv2 conformance vectors"
  simple_switch --version
  p4c --version
  as_project_user make -C "$REPO_DIR" setup
  as_project_user make -C "$REPO_DIR" p4
  local log k
  for k in 64 256; do            # both program variants (constants.p4 AGG_K, AGG_K_WIDE)
    log=/tmp/agglab-provision-conformance-k$k.log
    (cd "$REPO_DIR" && AGGLAB_K=$k .venv/bin/python -m pytest -q -rs -m bmv2 tests/conformance) | tee "$log"
    if grep -q 'skipped' "$log" || ! grep -q ' passed' "$log"; then
      die "the BMv2 conformance vectors (K=$k) did not all run (see $log)"
    fi
  done
}

main() {
  [ "$(id -u)" -eq 0 ] || die "needs root: sudo $0"
  [ -r /etc/os-release ] || die "cannot tell the distribution (/etc/os-release missing)"
  os_release
  case "$P4_SOURCE" in auto|packages|source) ;; *) die "AGGLAB_P4_SOURCE must be auto, packages or source" ;; esac
  case "$BMV2_BUILD" in perf|reference|debug) ;; *) die "AGGLAB_BMV2_BUILD must be perf, reference or debug" ;; esac
  install_base
  if have_p4_tools; then
    say "BMv2 and p4c already installed: $(command -v simple_switch), $(command -v p4c)"
  elif [ "$P4_SOURCE" = packages ]; then
    install_from_packages || die "the p4lang packages did not install"
  elif [ "$P4_SOURCE" = source ] || ! install_from_packages; then
    install_from_source
  fi
  link_bmv2_python
  have_p4_tools || die "simple_switch, simple_switch_CLI or p4c still missing"
  install_p4utils
  check_p4
  say "done: try  sudo .venv/bin/python -m agglab allreduce --backend bmv2 --topology fattree --k 4 --workers 8"
}

main "$@"
