//! Compile-time behaviour of `#[delayed_job]`: what it accepts (`ui/pass`), and the one clear,
//! well-placed error it gives for each mistake a user will make (`ui/fail`, with `.stderr`).
//!
//! Regenerate the expected output with `TRYBUILD=overwrite cargo test -p dq-macros --test ui`,
//! then read it. The cases live in `dq-macros` so that trybuild, which compiles every
//! dev-dependency of the crate under test, compiles only `dq`, `serde` and itself.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
