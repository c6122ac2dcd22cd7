#!/usr/bin/env bash
# Runs every check dq's CI runs: installs what is missing (redis-server, redis-cli, redis-sentinel,
# chromium, chromedriver, python3-venv, nodejs, cargo-deny), then fmt,
# clippy, rustdoc with warnings as errors, cargo-deny (licenses, bans, sources), `cargo package`
# of every published crate, the whole test suite (each test binary starts its own redis-server
# on a free port; nothing uses 6379), the TLS tests, every example, and a smoke run of the
# benchmark. Usage: ./scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# What the tests start as real processes, by the command they run and Debian's package for it:
# redis-server; redis-cli (creates the test clusters); redis-sentinel (the Sentinel tests);
# chromium and chromedriver (the dashboard's browser test); python3 with venv and ensurepip
# (python3-venv) and node (nodejs), the HTTP API's real clients (dq-http's `clients` test makes
# a venv and pip-installs clients/python/requirements.txt from PyPI).
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
missing=()
for pair in redis-server:redis-server redis-cli:redis-tools redis-sentinel:redis-sentinel \
  chromium:chromium chromedriver:chromium-driver; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair##*:}")
done
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing what the tests need: apt-get install -y ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y "${missing[@]}" || { $SUDO apt-get update && $SUDO apt-get install -y "${missing[@]}"; }
fi
redis-server --version
redis-cli --version
if ! command -v cargo-deny >/dev/null 2>&1; then
  # A debug build: cargo-deny's checks take seconds either way, and a release build of it
  # would take minutes of CI's time on every fresh machine.
  echo "cargo-deny not found; installing it from crates.io (cargo install --locked --debug cargo-deny)"
  cargo install --locked --debug --quiet cargo-deny
fi

# Every step's wall time is printed when the run ends, passed or failed, so a slow or broken
# CI run shows where its minutes went.
timings=()
log=""
current=""
current_started=0
step() {
  local name=$1
  shift
  echo "== $name"
  current=$name
  current_started=$SECONDS
  "$@"
  timings+=("$(printf '%5ds  %s' $((SECONDS - current_started)) "$name")")
  current=""
}
finish() {
  local status=$?
  echo "== wall time per step"
  if [ ${#timings[@]} -gt 0 ]; then printf '%s\n' "${timings[@]}"; fi
  if [ -n "$current" ]; then
    printf '%5ds  %s (failed, exit %d)\n' $((SECONDS - current_started)) "$current" "$status"
  fi
  if [ -n "$log" ]; then rm -f "$log"; fi
}
trap finish EXIT

# Where cargo builds (target/, or CARGO_TARGET_DIR when set): the packages, examples and the
# benchmark binary are taken from there.
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target" ] || { echo "cargo metadata named no target directory" >&2; exit 1; }

# Cargo picks the features of a shared dependency (tokio, redis, hyper…) from the packages a
# command selects, and builds it again for every distinct pick. Every build below therefore
# selects the whole workspace with its dev-dependencies (tests, examples), so one build of the
# dependencies serves them all; the examples and the benchmark run from what the tests built.
step fmt cargo fmt --all -- --check
step clippy cargo clippy --workspace --all-targets -- -D warnings
# The optional features (otel, tls) with the same selection: only dq's crates are checked again.
step "clippy (otel, tls)" cargo clippy --workspace --all-targets --features dq/otel,dq/tls,dq-cli/tls -- -D warnings
step rustdoc env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
step cargo-deny cargo deny --log-level error check licenses bans sources
# The published crates, packaged as crates.io would receive them, then checked from their
# packages: a workspace of the unpacked packages, each depending on the others' packaged sources
# (not on this tree), checked in one `cargo check`. That fails on a file a package leaves out
# or a dependency it does not declare, as `cargo package`'s own verification would, without
# that verification's full debug build of every crate's dependencies, once per crate.
published=(dq-syntax dq-macros dq-core dq-worker dq dq-dashboard dq-http dq-cli)
unpacked=$target/package-check
check_packages() {
  rm -rf "$target/package" "$unpacked"
  cargo package --quiet --no-verify --allow-dirty "${published[@]/#/-p}"
  mkdir -p "$unpacked"
  local members=() patches=() name dir
  for name in "${published[@]}"; do
    # The only package of that name: `$target/package` was emptied above.
    dir=$(basename "$target/package/$name"-[0-9]*.crate .crate)
    tar -xzf "$target/package/$dir.crate" -C "$unpacked"
    members+=("\"$dir\"")
    patches+=("$name = { path = \"$dir\" }")
  done
  {
    echo "[workspace]"
    echo "members = [$(IFS=,; echo "${members[*]}")]"
    echo 'resolver = "3"'
    echo "[patch.crates-io]"
    printf '%s\n' "${patches[@]}"
  } > "$unpacked/Cargo.toml"
  cp Cargo.lock "$unpacked/"
  # The sources keep the times they had in the tree; a check of an earlier run in the same
  # target directory may be newer than them, and cargo would take its stale output as fresh.
  find "$unpacked" -type f -exec touch {} +
  (cd "$unpacked" && CARGO_TARGET_DIR="$target" cargo check --quiet --workspace)
}
step "cargo package" check_packages
log=$(mktemp)
run_tests() { "$@" 2>&1 | tee -a "$log"; }
step "cargo test" run_tests cargo test --workspace
# The otel feature's trace test (compiled only with the feature).
step "cargo test (otel)" run_tests cargo test --workspace --features dq/otel --test otel_trace
# The TLS tests (compiled only with the `tls` feature): one node, a cluster and Sentinel over
# TLS on certificates made at test time, and the `dq` binary and its dashboard.
step "cargo test (tls)" run_tests cargo test --workspace --features dq/tls,dq-cli/tls --test tls_redis --test cli_tls
# Built by `cargo test` above with the same selection; this only confirms they are fresh.
step "build examples and bins" cargo build --quiet --workspace --bins --examples
for example in $(ls examples/*.rs 2>/dev/null | xargs -r -n1 basename | sed 's/\.rs$//'); do
  step "example: $example" "$target/debug/examples/$example"
done
# A smoke run of the benchmark; figures are not asserted.
step "dq-bench all --quick" "$target/debug/dq-bench" all --quick

# The closing line: every cargo test result above, summed.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "cargo test: %d passed, %d failed\n", p, f }' "$log"
