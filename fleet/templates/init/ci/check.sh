#!/bin/sh
# The CI gate: every node of the fleet builds, with its record from records/, to the generation
# id committed in ci/ids.txt — a change of what a node would run is a change someone reviews.
# It needs only the mesh binary: run it in any CI, and before a commit.
#
# Usage: ci/check.sh            exit 2 naming each node whose id differs (1: one does not build)
#        ci/check.sh --update   write the ids the nodes build now into ci/ids.txt, to commit
# MESH: the mesh binary (default: `mesh` on PATH).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
mesh=${MESH:-mesh}
state=$(mktemp -d)
trap 'rm -rf "$state" "$here/ids.txt.new"' EXIT
case ${1:-} in
  '')
    "$mesh" --state-dir "$state" fleet build --fleet "$here/../fleet.ncl" --check "$here/ids.txt"
    ;;
  --update)
    { grep '^#' "$here/ids.txt" || true
      "$mesh" --state-dir "$state" fleet build --fleet "$here/../fleet.ncl"
    } > "$here/ids.txt.new"
    mv "$here/ids.txt.new" "$here/ids.txt"
    echo "wrote $here/ids.txt"
    ;;
  *)
    echo "usage: $0 [--update]" >&2
    exit 1
    ;;
esac
