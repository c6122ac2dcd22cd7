//! Compile-time behaviour of `#[delayed_job]`: the one clear, well-placed error it gives for each
//! mistake a user will make (`ui/fail`, with `.stderr`). What it accepts is run as ordinary
//! tests of `dq` (`tests/macro_accepts_*.rs`).
//!
//! Regenerate the expected output with `TRYBUILD=overwrite cargo test -p dq-macros --test ui`,
//! then read it. The cases live in `dq-macros` so that trybuild, which compiles every
//! dev-dependency of the crate under test, compiles only `dq`, `serde` and itself; and they are
//! compile-fail cases only, so trybuild runs `cargo check` (no code generation, no linking).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
}
