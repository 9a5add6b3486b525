//! Generates the `Job` impl.

use crate::ast::Input;
use crate::fallback;
use crate::valid::{self, Errors};
use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{DeriveInput, Ident};

/// Expands `#[derive(Job)]` on `node`: the impl, or every error found plus a placeholder impl.
pub(crate) fn derive(node: &DeriveInput) -> TokenStream {
    let mut errors = Errors::default();
    let input = Input::from_syn(node, &mut errors);
    input.validate(&mut errors);
    match (errors.finish(), &input.attrs.kind) {
        (Ok(()), Some(kind)) => impl_job(&input, &kind.value),
        // If there are invalid attributes, expand to a placeholder impl anyway so that code using the type as
        // a job does not pile more errors onto the real one.
        (Err(error), _) => fallback::expand(&input, error),
        // `validate` reports a missing kind; this keeps the expansion total without unwrapping.
        (Ok(()), None) => fallback::expand(&input, valid::missing_kind(&node.ident)),
    }
}

/// The `Job` impl of a valid input.
fn impl_job(input: &Input, kind: &str) -> TokenStream {
    let ty = call_site_ident(&input.original.ident);
    let where_clause = &input.original.generics.where_clause;
    let attrs = &input.attrs;

    let mut opts = Vec::new();
    let mut all_set = true;
    match &attrs.queue {
        Some(queue) => {
            let queue = &queue.value;
            opts.push(quote!(queue: #queue));
        }
        None => all_set = false,
    }
    match &attrs.priority {
        Some(priority) => {
            let priority = priority.value;
            opts.push(quote!(priority: #priority));
        }
        None => all_set = false,
    }
    match &attrs.max_attempts {
        Some(max_attempts) => {
            let max_attempts = max_attempts.value;
            opts.push(quote!(max_attempts: #max_attempts));
        }
        None => all_set = false,
    }
    match &attrs.unique {
        Some(unique) => {
            let unique = unique.value;
            opts.push(quote!(unique: #unique));
        }
        None => all_set = false,
    }
    let key_fields = input.key_fields();
    if key_fields.is_empty() {
        all_set = false;
    } else {
        opts.push(quote!(key_fields: &[#(#key_fields),*]));
    }

    let opts = if opts.is_empty() {
        quote!(::outbox_core::KindOpts::DEFAULT)
    } else if all_set {
        quote!(::outbox_core::KindOpts { #(#opts,)* })
    } else {
        quote!(::outbox_core::KindOpts { #(#opts,)* ..::outbox_core::KindOpts::DEFAULT })
    };

    quote! {
        const _: () = {
            #[automatically_derived]
            impl ::outbox_core::Job for #ty #where_clause {
                const KIND: &'static str = #kind;
                const OPTS: ::outbox_core::KindOpts = #opts;
            }
        };
    }
}

/// The type's name with the span of the derive, so that a missing supertrait such as `Serialize` is
/// reported at `#[derive(Job)]`.
pub(crate) fn call_site_ident(ident: &Ident) -> Ident {
    let mut ident = ident.clone();
    ident.set_span(Span::call_site());
    ident
}
