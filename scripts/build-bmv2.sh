#!/usr/bin/env bash
# Build BMv2 (simple_switch) from source in one of three variants and install it under PREFIX.
#
#   scripts/build-bmv2.sh [--perf|--reference|--debug] [--switch-only] [--src TARBALL|DIR] PREFIX
#
#   --perf       (default) BMv2's docs/performance.md build: --disable-logging-macros
#                --disable-elogger, -O3. The fastest simple_switch; its --log-console,
#                --log-file and -L debug/trace print nothing per packet (the macros are gone).
#   --reference  the p4kit's build: -O2, logging macros and event logger on.
#   --debug      -O0 -g, logging macros on, BMv2's remote debugger (--enable-debugger).
#   --switch-only  build only simple_switch, statically linked against BMv2's own libraries
#                (--disable-shared), and install only PREFIX/bin/simple_switch: a second
#                simple_switch beside a full install (e.g. /opt/p4kit), whose simple_switch_CLI
#                and Python Thrift bindings stay in use. Without it: a full `make install`.
#   --src        BMv2's source: a tarball (e.g. ../shared/p4kit/behavioral-model-1.15.5-src.tar.xz)
#                or an unpacked tree; default: a clone of p4lang/behavioral-model at $BMV2_TAG.
#
# Build dependencies: the Debian/Ubuntu packages scripts/provision-vm.sh installs (build_bmv2).
# The build happens in a scratch directory ($AGGLAB_BMV2_BUILD_DIR, default a mktemp -d under
# /tmp), never in the repository; it runs at nice 19 with make -j$(nproc). Writes PREFIX (root
# for /opt or /usr/local).
set -euo pipefail

BMV2_TAG=${BMV2_TAG:-1.15.5}
variant=perf
switch_only=no
src=
prefix=

die() { printf 'build-bmv2: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --perf) variant=perf ;;
    --reference) variant=reference ;;
    --debug) variant=debug ;;
    --switch-only) switch_only=yes ;;
    --src) [ $# -ge 2 ] || die "--src needs a tarball or directory"; src=$2; shift ;;
    -h|--help) usage 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$prefix" ] || die "one PREFIX only"; prefix=$1 ;;
  esac
  shift
done
[ -n "$prefix" ] || usage 2
case "$prefix" in /*) ;; *) prefix=$(pwd)/$prefix ;; esac

configure_args=(--prefix="$prefix" --with-thrift --with-nanomsg)  # not --without-pi: BMv2 1.15.5 reads any --with(out)-pi as yes
case "$variant" in
  perf)      configure_args+=(--disable-logging-macros --disable-elogger "CXXFLAGS=-O3 -g0" "CFLAGS=-O3 -g0") ;;
  reference) configure_args+=("CXXFLAGS=-O2") ;;
  debug)     configure_args+=(--enable-debugger "CXXFLAGS=-O0 -g" "CFLAGS=-O0 -g") ;;
esac
[ "$switch_only" = yes ] && configure_args+=(--disable-shared)

work=${AGGLAB_BMV2_BUILD_DIR:-$(mktemp -d /tmp/agglab-bmv2-build.XXXXXX)}
mkdir -p "$work"
if [ -z "$src" ]; then
  tree=$work/behavioral-model
  [ -d "$tree/.git" ] || git clone --depth 1 --branch "$BMV2_TAG" --recurse-submodules --shallow-submodules \
    https://github.com/p4lang/behavioral-model.git "$tree"
elif [ -d "$src" ]; then
  tree=$(cd "$src" && pwd)
elif [ -f "$src" ]; then
  tar -C "$work" -xf "$src"
  tree=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'behavioral-model*' | head -n 1)
  [ -n "$tree" ] || die "$src holds no behavioral-model* directory"
else
  die "--src $src: no such file or directory"
fi

jobs=$(nproc 2>/dev/null || echo 2)
start=$(date +%s)
printf 'build-bmv2: %s build of %s into %s (switch only: %s)\n' "$variant" "$tree" "$prefix" "$switch_only"
cd "$tree"
[ -x configure ] || nice -n 19 ./autogen.sh
nice -n 19 ./configure "${configure_args[@]}"
if [ "$switch_only" = yes ]; then
  # simple_switch's own prerequisites, in the order the top-level SUBDIRS builds them.
  for dir in thrift_src third_party proto src targets/simple_switch; do
    nice -n 19 make -j"$jobs" -C "$dir"
  done
  install -D -m 0755 targets/simple_switch/simple_switch "$prefix/bin/simple_switch"
else
  nice -n 19 make -j"$jobs"
  make install
  if [ "$(id -u)" -eq 0 ]; then ldconfig; fi
fi
printf 'build-bmv2: done in %d s: %s\n' "$(($(date +%s) - start))" "$prefix/bin/simple_switch"
"$prefix/bin/simple_switch" --version
