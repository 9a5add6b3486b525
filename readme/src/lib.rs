//! Every Rust block of the workspace's README.md, compiled as a doctest of a crate whose only dependencies
//! are `outbox-core`, `serde` and `tokio`, so the README cannot drift from the API.

#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
