#!/bin/sh
# The project's test command: installs what the tests need on a fresh
# Debian machine (headless Chromium for the viewer's page test), then runs
# every Go test. Extra arguments go to `go test` (for example -short).
set -eu
cd "$(dirname "$0")/.."
if [ -z "${HEADROOM_CHROMIUM:-}" ] && [ "${HEADROOM_SKIP_BROWSER:-}" != 1 ] &&
	! command -v chromium >/dev/null 2>&1; then
	if command -v apt-get >/dev/null 2>&1; then
		SUDO=
		if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; fi
		echo "scripts/test.sh: installing Debian's chromium for the viewer's browser test" >&2
		$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null ||
			echo "scripts/test.sh: could not install chromium; the browser test will fail and say so" >&2
	else
		echo "scripts/test.sh: no chromium and no apt-get; the browser test will fail (set HEADROOM_SKIP_BROWSER=1 to skip it)" >&2
	fi
fi
exec go test -timeout 60m "$@" ./...
