//! Integration tests for the outbox workspace.
