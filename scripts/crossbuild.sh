#!/bin/sh
# crossbuild.sh builds and vets headroom for every platform it supports:
# linux, darwin and windows on amd64 and arm64 (windows/arm64 included).
# CGO_ENABLED=0, as the default build. Usage: scripts/crossbuild.sh
# [GOOS/GOARCH ...]; with no argument, every target. Exits non-zero on the
# first failure, naming the target.
set -eu
cd "$(dirname "$0")/.."
targets=${*:-"linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64"}
for t in $targets; do
	goos=${t%/*}
	goarch=${t#*/}
	echo "== $goos/$goarch"
	if ! CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build ./... ||
		! CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go vet ./...; then
		echo "crossbuild: $goos/$goarch failed" >&2
		exit 1
	fi
done
echo "crossbuild: all targets build and vet clean"
