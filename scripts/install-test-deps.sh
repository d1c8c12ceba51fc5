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
#             Debian's sipp is built without TLS), kamailio-websocket-modules (the
#             stand-in WSS server of tests/system/test_browser.py)
#   chromium  chromium (the headless browser of tests/system/test_browser.py)
#   node/npm  nodejs, npm; then `npm ci` in tests/system/browser installs the pinned
#             JsSIP (node_modules/, not committed) that the browser test's page loads
#   dnsmasq   dnsmasq (the local DNS server of crates/sip-resolver/tests/dnsmasq.rs:
#             NAPTR/SRV/A/AAAA records for RFC 3263 resolution)
#
# Idempotent: does nothing when every command is already on PATH (or in /usr/sbin, /sbin)
# and the page's node_modules matches its package-lock.json.
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
  [chromium]=chromium
  [node]=nodejs
  [npm]=npm
  [dnsmasq]=dnsmasq
)
KAMAILIO_TLS_MODULE='/usr/lib/*/kamailio/modules/tls.so'
KAMAILIO_WS_MODULE='/usr/lib/*/kamailio/modules/websocket.so'
BROWSER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/system/browser"
JSSIP_BUNDLE="$BROWSER_DIR/node_modules/jssip/dist/jssip.min.js"

# The browser test's page: JsSIP as pinned in package-lock.json (needs npm; no root).
install_page_modules() {
  if [ -f "$JSSIP_BUNDLE" ] && [ "$BROWSER_DIR/node_modules/.package-lock.json" -nt "$BROWSER_DIR/package-lock.json" ]; then
    return 0
  fi
  echo "install-test-deps: npm ci in $BROWSER_DIR"
  (cd "$BROWSER_DIR" && npm ci --no-audit --no-fund)
  if [ ! -f "$JSSIP_BUNDLE" ]; then
    echo "install-test-deps: ERROR: npm ci did not provide $JSSIP_BUNDLE" >&2
    exit 1
  fi
}

missing_cmds=()
missing_pkgs=()
for cmd in sipp sipsak ip python3 dot psql kamailio chromium node npm dnsmasq; do
  if ! PATH="$PATH:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1; then
    missing_cmds+=("$cmd")
    missing_pkgs+=("${PKG_FOR[$cmd]}")
  fi
done
if ! compgen -G "$KAMAILIO_TLS_MODULE" >/dev/null; then
  missing_pkgs+=(kamailio-tls-modules)
fi
if ! compgen -G "$KAMAILIO_WS_MODULE" >/dev/null; then
  missing_pkgs+=(kamailio-websocket-modules)
fi

if [ "${#missing_pkgs[@]}" -eq 0 ]; then
  install_page_modules
  echo "install-test-deps: all present (sipp, sipsak, ip, python3, dot, psql, kamailio with TLS and WebSocket," \
       "chromium, node, npm, dnsmasq, JsSIP in tests/system/browser/node_modules)"
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
compgen -G "$KAMAILIO_WS_MODULE" >/dev/null || still_missing+=("kamailio-websocket-modules ($KAMAILIO_WS_MODULE)")
if [ "${#still_missing[@]}" -ne 0 ]; then
  echo "install-test-deps: ERROR: still missing after install: ${still_missing[*]}" >&2
  exit 1
fi
echo "install-test-deps: installed ${missing_pkgs[*]}"
install_page_modules
