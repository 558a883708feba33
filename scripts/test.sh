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
# The MPI transport (comm, build tag mpi) needs cgo and Open MPI; its
# tests run the ranks under mpirun. Installed here when missing.
if ! command -v mpirun >/dev/null 2>&1 || ! pkg-config --exists ompi-c 2>/dev/null; then
	if command -v apt-get >/dev/null 2>&1; then
		SUDO=
		if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; fi
		echo "scripts/test.sh: installing Debian's Open MPI for the MPI transport's tests" >&2
		$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev pkg-config >/dev/null ||
			echo "scripts/test.sh: could not install Open MPI; the MPI tests will be skipped or fail and say so" >&2
	fi
fi
go test -timeout 60m "$@" ./...
# On an AVX-512 machine the kernels' AVX2 paths (what AVX2-only machines
# run) are tested natively too, with every kernel limited to AVX2.
# -count=1: the variable is read at start-up, before go test watches the
# environment, so its cache would hand back the run above.
if grep -q avx512f /proc/cpuinfo 2>/dev/null; then
	HEADROOM_MAX_ISA=avx2 go test -count=1 -timeout 20m "$@" ./cpu/... ./internal/cpuid/
fi
# Only the packages with MPI code are tested with the tag (cgo), so this
# adds well under a minute, not a second full run: the collectives on 2
# and 3 ranks, data parallelism and ZeRO over MPI, and
# `mpirun -np 2 headroom train` against one process.
if pkg-config --exists ompi-c 2>/dev/null; then
	CGO_ENABLED=1 go vet -tags mpi ./comm/ ./dist/ ./pipeline/
	CGO_ENABLED=1 go test -timeout 10m -tags mpi "$@" ./comm/ ./dist/ ./pipeline/
else
	echo "scripts/test.sh: no Open MPI (pkg-config ompi-c): the MPI transport is not tested" >&2
fi
