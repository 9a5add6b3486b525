#![doc = include_str!("../docs/crate.md")]

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
