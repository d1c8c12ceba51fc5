#!/usr/bin/env bash
# Install the tools Tandem's system tests and benchmarks need, when missing.
#
#   command   Debian package
#   sipp      sip-tester
#   sipsak    sipsak
#   ip        iproute2
#   python3   python3
#   dot       graphviz (contract diagrams as SVG)
#   psql      postgresql-client (B2BUA 1T against PostgreSQL, when a server runs)
#   kamailio  kamailio, kamailio-tls-modules (the TLS peer of tests/system/test_tls.py;
#             Debian's sipp is built without TLS)
#   dnsmasq   dnsmasq (the local DNS server of crates/sip-resolver/tests/dnsmasq.rs:
#             NAPTR/SRV/A/AAAA records for RFC 3263 resolution)
#
# Idempotent: does nothing when every command is already on PATH (or in /usr/sbin, /sbin).
# Needs root (or passwordless apt-get as root) only when something is missing.
set -euo pipefail

declare -A PKG_FOR=(
  [sipp]=sip-tester
  [sipsak]=sipsak
  [ip]=iproute2
  [python3]=python3
  [dot]=graphviz
  [psql]=postgresql-client
  [kamailio]=kamailio
  [dnsmasq]=dnsmasq
)
KAMAILIO_TLS_MODULE='/usr/lib/*/kamailio/modules/tls.so'

missing_cmds=()
missing_pkgs=()
for cmd in sipp sipsak ip python3 dot psql kamailio dnsmasq; do
  if ! PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1; then
    missing_cmds+=("$cmd")
    missing_pkgs+=("${PKG_FOR[$cmd]}")
  fi
done
if ! compgen -G "$KAMAILIO_TLS_MODULE" >/dev/null; then
  missing_pkgs+=(kamailio-tls-modules)
fi

if [ "${#missing_pkgs[@]}" -eq 0 ]; then
  echo "install-test-deps: all present (sipp, sipsak, ip, python3, dot, psql, kamailio with TLS, dnsmasq)"
  exit 0
fi

echo "install-test-deps: missing commands: ${missing_cmds[*]} (packages: ${missing_pkgs[*]})"

if [ "$(id -u)" -ne 0 ]; then
  echo "install-test-deps: ERROR: not running as root, cannot install ${missing_pkgs[*]}." >&2
  echo "install-test-deps: run as root, or: sudo apt-get update && sudo apt-get install -y ${missing_pkgs[*]}" >&2
  exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-test-deps: ERROR: apt-get not found; install ${missing_pkgs[*]} by hand." >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${missing_pkgs[@]}"

still_missing=()
for cmd in "${missing_cmds[@]}"; do
  PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1 || still_missing+=("$cmd")
done
compgen -G "$KAMAILIO_TLS_MODULE" >/dev/null || still_missing+=("kamailio-tls-modules ($KAMAILIO_TLS_MODULE)")
if [ "${#still_missing[@]}" -ne 0 ]; then
  echo "install-test-deps: ERROR: still missing after install: ${still_missing[*]}" >&2
  exit 1
fi
echo "install-test-deps: installed ${missing_pkgs[*]}"
