//! Driver-level conformance: each storage operation called directly on every backend.
