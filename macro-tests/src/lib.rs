//! The tests of `#[derive(Job)]` are in `tests/`: `derive.rs` checks what the derive generates against what serde
//! and schemars produce, `ui.rs` each compile error against its snapshot in `tests/ui/`. The derive's own
//! documentation is compiled here too, as a doctest.

#[doc = include_str!("../../outbox-macros/docs/crate.md")]
#[cfg(doctest)]
pub struct MacroDocs;
