#!/usr/bin/env bash
# Runs every check dq's CI runs: installs what is missing (redis-server, redis-cli, redis-sentinel,
# chromium, chromedriver, cargo-deny), then fmt,
# clippy, rustdoc with warnings as errors, cargo-deny (licenses, bans, sources), `cargo package`
# of every published crate, the whole test suite (each test binary starts its own redis-server
# on a free port; nothing uses 6379), every example, the TLS build, and a smoke run of the
# benchmark. Usage: ./scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# What the tests start as real processes, by the command they run and Debian's package for it:
# redis-server; redis-cli (creates the test clusters); redis-sentinel (the Sentinel tests);
# chromium and chromedriver (the dashboard's browser test).
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
missing=()
for pair in redis-server:redis-server redis-cli:redis-tools redis-sentinel:redis-sentinel \
  chromium:chromium chromedriver:chromium-driver; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair##*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing what the tests need: apt-get install -y ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y "${missing[@]}" || { $SUDO apt-get update && $SUDO apt-get install -y "${missing[@]}"; }
fi
redis-server --version
redis-cli --version
if ! command -v cargo-deny >/dev/null 2>&1; then
  echo "cargo-deny not found; installing it from crates.io (cargo install --locked cargo-deny)"
  cargo install --locked --quiet cargo-deny
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy -p dq --features otel --all-targets -- -D warnings
cargo check -p dq-core --features tls
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
cargo deny --log-level error check licenses bans sources
# The published crates, packaged and built from their packages as crates.io would build them.
# Cargo verifies them through a local registry, and takes a registry crate of a version it has
# seen as unchanged: it would reuse what it extracted and compiled of our crates on an earlier
# run. So the verification builds in a target dir of its own, whose dq crates are cleared, and
# the sources extracted from earlier packages are removed.
verify=target/package-verify
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/dq-{syntax,macros,core,worker,dashboard,cli}-[0-9]* \
  "$verify"/debug/.fingerprint/dq* "$verify"/debug/deps/*dq*
CARGO_TARGET_DIR="$verify" cargo package --quiet --allow-dirty \
  -p dq-syntax -p dq-macros -p dq-core -p dq-worker -p dq -p dq-dashboard -p dq-cli
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace 2>&1 | tee "$log"
# The otel feature's trace test (compiled only with the feature).
cargo test -p dq --features otel --test otel_trace 2>&1 | tee -a "$log"
for example in $(ls examples/*.rs 2>/dev/null | xargs -r -n1 basename | sed 's/\.rs$//'); do
  echo "== example: $example"
  cargo run --quiet --example "$example"
done
echo "== benchmark smoke run (dq-bench all --quick; figures are not asserted)"
cargo run --quiet -p dq-bench -- all --quick

# The closing line: every cargo test result above, summed.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "cargo test: %d passed, %d failed\n", p, f }' "$log"
