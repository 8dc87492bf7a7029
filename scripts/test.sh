#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine as root: installs what the tests need if it is
# missing (nftables, iptables, docker.io, busybox-static, iproute2, systemd and dbus for the units'
# tests, openssh-server and -client for the fleet's, zsh, fish and groff for the completions and
# man pages, docker-registry for the pull and images tests, apache2-utils (htpasswd) for
# a registry with basic auth, docker-compose for a real compose project to import, firewalld and
# ufw for the found firewalls on the systemd node (never started on this machine), and nix-bin
# to parse flake.nix), and mdbook (with cargo, pinned) to build the manual, starts dockerd if none
# runs, builds the manual, then runs every test (the manual's links and its guide among them). A
# test that needs root, namespaces or nft fails — never skips — when CI=true and they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v nft >/dev/null || need+=(nftables)
command -v ip >/dev/null || need+=(iproute2)
command -v iptables-legacy >/dev/null || need+=(iptables)
command -v dockerd >/dev/null || need+=(docker.io)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v nix-instantiate >/dev/null || need+=(nix-bin)
# A real systemd as PID 1 in a container (its /usr is this machine's): systemd and D-Bus.
[ -x /usr/lib/systemd/systemd ] || need+=(systemd)
command -v dbus-daemon >/dev/null || need+=(dbus)
# Real OpenSSH servers, one per network namespace, for the fleet's tests.
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh >/dev/null || need+=(openssh-client)
# Each node's sshd runs in a mount namespace of its own (unshare, mount).
command -v unshare >/dev/null || need+=(util-linux)
command -v mount >/dev/null || need+=(mount)
# The completion scripts are parsed by their shells, the man pages rendered by groff.
command -v zsh >/dev/null || need+=(zsh)
command -v fish >/dev/null || need+=(fish)
command -v groff >/dev/null || need+=(groff-base)
# The Distribution registry, for the pull tests (each test starts its own, on a namespace's
# address, plain HTTP, with a temporary storage folder).
[ -x /usr/bin/docker-registry ] || need+=(docker-registry)
# Compose (Debian has version 1, docker-compose), for the import's test of a real compose project.
command -v docker-compose >/dev/null || need+=(docker-compose)
# htpasswd, for the images' tests of a registry with basic auth.
command -v htpasswd >/dev/null || need+=(apache2-utils)
command -v curl >/dev/null || need+=(curl)
# firewalld and ufw, run only inside the systemd test node (its /usr is this machine's): the
# found firewalls of Fedora's and Ubuntu's kind.
[ -x /usr/sbin/firewalld ] || need+=(firewalld)
[ -x /usr/sbin/ufw ] || need+=(ufw)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing: ${need[*]}"
    apt-get update -qq
    # Nothing installed starts here (firewalld would take this machine's ruleset over): a
    # policy-rc.d that refuses every start while installing, and no unit left enabled after.
    had_policy=0
    [ -e /usr/sbin/policy-rc.d ] && had_policy=1
    [ $had_policy = 1 ] || printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    [ $had_policy = 1 ] || rm -f /usr/sbin/policy-rc.d
    rm -f /etc/systemd/system/multi-user.target.wants/firewalld.service \
      /etc/systemd/system/multi-user.target.wants/ufw.service \
      /etc/systemd/system/dbus-org.fedoraproject.FirewallD1.service
  else
    echo "missing (install as root): ${need[*]}" >&2
  fi
fi

if [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1; then
  echo "starting dockerd"
  (dockerd >/tmp/mesh-test-dockerd.log 2>&1 &)
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
fi

echo "checking flake.nix parses"
nix-instantiate --parse flake.nix >/dev/null

# The manual (docs/). When no mdbook is on PATH, cargo installs the pinned version, its HTML
# renderer and search only (no server, no file watcher: less to compile). mdBook does not fail on
# a broken link; the test `book::every_link_in_the_book_resolves` does.
mdbook_version=0.5.4
mdbook=$(command -v mdbook || echo "${CARGO_HOME:-$HOME/.cargo}/bin/mdbook")
if [ ! -x "$mdbook" ]; then
  echo "installing mdbook $mdbook_version"
  cargo install mdbook --locked --version "$mdbook_version" --no-default-features --features search
  mdbook="${CARGO_HOME:-$HOME/.cargo}/bin/mdbook"
fi
echo "building the manual"
"$mdbook" build docs

cargo fmt --check
cargo clippy --workspace --all-targets --locked --features crash-points -- -D warnings
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --locked --features crash-points 2>&1 | tee "$log"

echo "checking the CI example: every example node builds to its committed id"
examples/ci/check-ids.sh target/debug/mesh
echo "checking the CI example as a fleet: the same ids, every node built in parallel"
target/debug/mesh --state-dir "$(mktemp -d)" fleet build --fleet examples/fleet.ncl --check examples/ci/ids.txt

# One closing line for the whole suite, summed over every test binary.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
