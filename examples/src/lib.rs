//! Runnable examples live in this package: see `quickstart.rs`.
