#!/bin/sh
# Installs what rolter's build and tests need on Debian/Ubuntu when it is
# missing: libzmq3-dev + pkg-config (the sidecar's ZMQ subscriber is cgo) and
# chromium (the dashboard's browser tests drive it headless).
# Elsewhere it says what to install and fails.
set -eu

need=""
pkg-config --exists libzmq 2>/dev/null || need="$need libzmq3-dev pkg-config"
command -v gcc >/dev/null 2>&1 || need="$need gcc"
command -v chromium >/dev/null 2>&1 || [ -n "${ROLTER_SKIP_CHROMIUM:-}" ] || need="$need chromium"

[ -z "$need" ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
	echo "rolter needs:$need (ZeroMQ development files, pkg-config, a C compiler, Chromium)." >&2
	echo "This is not a Debian/Ubuntu machine: install them with your package manager and re-run." >&2
	exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "rolter needs:$need, and installing them needs root (no sudo found)." >&2
		exit 1
	fi
	SUDO=sudo
fi
echo "installing:$need" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $need >/dev/null
