//! The expansion of an input with errors.

use crate::ast::{Input, Shape, call_site_ident};
use proc_macro2::TokenStream;
use quote::quote;

/// The errors, plus a placeholder `Job` impl when the type is a non-generic struct (where such an impl
/// compiles), so that the user sees the real errors instead of "`T` is not an outbox job kind" wherever the
/// type is used.
pub(crate) fn expand(input: &Input, error: syn::Error) -> TokenStream {
    let error = error.to_compile_error();
    let node = input.original;
    if !matches!(input.shape, Shape::Struct { .. }) || !node.generics.params.is_empty() {
        return error;
    }
    let ty = call_site_ident(&node.ident);
    let where_clause = &node.generics.where_clause;
    quote! {
        #error

        const _: () = {
            #[automatically_derived]
            impl ::outbox::Job for #ty #where_clause {
                const KIND: &'static str = "";
            }
        };
    }
}
