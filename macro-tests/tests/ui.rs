//! Compile-fail tests: each file in `tests/ui` must fail with exactly the error in its `.stderr` snapshot.
//! Regenerate the snapshots with `TRYBUILD=overwrite cargo test -p outbox-macro-tests --test ui`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
