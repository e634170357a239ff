#!/usr/bin/env bash
# The Debian packages the test suite needs, installed when missing: redis-server (the tenancy tests start their own
# servers on free ports and stop them by pid; nothing runs as a service), Chromium and ChromeDriver (the playground
# and /docs browser tests drive them headless) and npm (the OpenAI Node SDK check). As root this installs them with
# apt-get; otherwise it stops at once with one line saying what to install.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
[[ -x /usr/bin/chromedriver ]] || missing+=(chromium-driver)
command -v npm >/dev/null 2>&1 || missing+=(npm)
((${#missing[@]})) || exit 0

if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "make test needs these Debian packages: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
