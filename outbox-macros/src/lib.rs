//! `#[derive(Job)]` for outbox job kinds; use it through its re-export `outbox::Job`.
//!
//! The derive implements `outbox::Job` for a payload struct. The type's `#[job(...)]` attribute names
//! the kind and sets its defaults; `#[job(key)]` on fields picks the fields that form the idempotency key.
//!
//! ```
//! use outbox::Job;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Job, Serialize, Deserialize, JsonSchema)]
//! #[serde(rename_all = "camelCase")]
//! #[job(kind = "send_welcome", queue = "mail", priority = 5, max_attempts = 10)]
//! struct SendWelcome {
//!     #[job(key)]
//!     user_id: i64,
//!     template: String,
//! }
//!
//! assert_eq!(SendWelcome::KIND, "send_welcome");
//! assert_eq!(SendWelcome::OPTS.queue, "mail");
//! assert_eq!(SendWelcome::OPTS.key_fields, ["userId"]);
//! ```
//!
//! # Type attribute
//!
//! | option               | meaning                                                            | default     |
//! |----------------------|--------------------------------------------------------------------|-------------|
//! | `kind = "name"`      | stable kind name stored with every job; required                   |             |
//! | `queue = "name"`     | queue the kind's jobs go to                                        | `"default"` |
//! | `priority = 5`       | higher runs first; any `i32`                                       | `0`         |
//! | `max_attempts = 10`  | attempts before a job fails for good; at least 1                   | `3`         |
//! | `unique = false`     | whether enqueues collapse onto an active job with the same key     | `true`      |
//! | `validate = f`       | `fn(&Self) -> Result<(), Vec<Violation>>`: rules beyond the schema | none        |
//! | `rate = "50/1m"`     | fleet-wide rate of claims (`"20/s burst 5"`), counted in cost       | none        |
//! | `rate_key = "{t}"`   | the rate applies to each key of this template apart                | none        |
//! | `fair = "{t}"`       | claims share out between the keys of this template by weight       | none        |
//! | `cost = 10`          | what one job counts against the rate, or a field: `"{tokens}"`     | `1`         |
//! | `subject = "o:{id}"` | the domain row each job is about (`order:{orderId}`), indexed      | none        |
//! | `output = T`         | the type of the handler's output; one that breaks its schema fails | none        |
//!
//! The options may be split over several `#[job(...)]` attributes, each given at most once. A kind name is
//! non-empty and uses only ASCII letters, digits and `_` `.` `:` `/` `-`. It must stay the same when the Rust
//! type is renamed.
//!
//! # Field attribute
//!
//! `#[job(key)]` marks a field as part of the idempotency key. `OPTS.key_fields` lists the marked fields by
//! their serialized name, in declaration order, following serde's `#[serde(rename = "...")]` on the field and
//! `#[serde(rename_all = "...")]` on the struct. Key fields need names, so they are only allowed in structs
//! with named fields, and they contradict `unique = false`.
//!
//! # What the derive rejects
//!
//! Enums, unions and generic structs (a kind is one concrete, owned payload type), a missing or malformed
//! `kind`, unknown or repeated options, values of the wrong type or out of range, and the contradictions
//! above. All problems are reported at once, each at the tokens at fault.

mod ast;
mod attr;
mod ctxt;
mod expand;
mod fallback;
mod rename;
mod valid;

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

/// Implements `outbox::Job` for a payload struct; see the [crate documentation](crate) for the
/// attribute syntax.
#[proc_macro_derive(Job, attributes(job))]
pub fn derive_job(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::derive(&input).into()
}
