#!/usr/bin/env bash
# The CI reproducibility gate: every example node must build to its committed id. A change of id
# is a change of what a node would run; commit the new id in ids.txt only when it is deliberate.
#
# Usage: examples/ci/check-ids.sh [MESH]     (MESH defaults to `mesh` on PATH)
set -euo pipefail
mesh=${1:-mesh}
here=$(cd "$(dirname "$0")" && pwd)
nodes=$here/../nodes
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
failed=0
while read -r node record id; do
  case $node in ''|'#'*) continue ;; esac
  args=(build "$nodes/$node.ncl" --check "$id" --state-dir "$state")
  [ "$record" = - ] || args+=(--record "$nodes/$record")
  if "$mesh" "${args[@]}" >/dev/null; then echo "ok      $node $id"; else echo "CHANGED $node"; failed=1; fi
done < "$here/ids.txt"
exit $failed
