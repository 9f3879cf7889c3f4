#!/usr/bin/env bash
# System packages the tests need: a C compiler for the fake NVML driver, Debian's
# chromium for the browser tests (Playwright's own browser download cannot work here),
# and Slurm with munge for the cluster the slurm backend's tests start (tests/slurm_cluster.py;
# Debian's prometheus for the test that scrapes /metrics (tests/metrics); the packages' own
# services are not used: no systemd runs here).
set -euo pipefail

missing=()
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
command -v node >/dev/null || missing+=(nodejs npm)
[ -x /usr/bin/chromium ] || missing+=(chromium)
fc-list 2>/dev/null | grep -qi dejavu || missing+=(fonts-dejavu-core)
command -v slurmctld >/dev/null || missing+=(slurm-wlm)
command -v munged >/dev/null || missing+=(munge)
command -v prometheus >/dev/null || missing+=(prometheus)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "Installing system packages: ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
