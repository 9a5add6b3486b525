//! The API against a real server on a loopback port, with a real HTTP client, on every backend.

mod auth;
mod browser;
mod dashboard;
mod flow;
mod harness;
mod jobs;
mod limits;
mod malformed;
mod observe;
mod openapi;
mod overview;
mod workflows;
