//! Generates the `Job` impl.

use crate::ast::{Input, call_site_ident};
use crate::ctxt::Errors;
use crate::fallback;
use crate::valid;
use proc_macro2::TokenStream;
use quote::quote;
use syn::DeriveInput;

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
    if let Some(queue) = &attrs.queue {
        let queue = &queue.value;
        opts.push(quote!(queue: #queue));
    }
    if let Some(priority) = &attrs.priority {
        let priority = priority.value;
        opts.push(quote!(priority: #priority));
    }
    if let Some(max_attempts) = &attrs.max_attempts {
        let max_attempts = max_attempts.value;
        opts.push(quote!(max_attempts: #max_attempts));
    }
    if let Some(unique) = &attrs.unique {
        let unique = unique.value;
        opts.push(quote!(unique: #unique));
    }
    if let Some(sequence) = &attrs.sequence {
        let sequence = &sequence.value;
        opts.push(quote!(sequence: ::core::option::Option::Some(#sequence)));
    }
    match &attrs.on_sequence_failure {
        Some(setting) if setting.value => {
            opts.push(quote!(on_sequence_failure: ::outbox::SequenceFailure::Continue));
        }
        Some(_) => opts.push(quote!(on_sequence_failure: ::outbox::SequenceFailure::Hold)),
        None => {}
    }
    if let Some(concurrency) = &attrs.concurrency {
        let concurrency = u32::try_from(concurrency.value).unwrap_or(1);
        opts.push(quote!(concurrency: ::core::option::Option::Some(#concurrency)));
    }
    if let Some(timeout) = &attrs.timeout {
        let ms = timeout.value;
        opts.push(quote!(timeout: ::core::option::Option::Some(::core::time::Duration::from_millis(#ms))));
    }
    if let Some(rate) = &attrs.rate {
        let (amount, window_ms, burst) = rate.value;
        let burst = burst.map(|b| quote!(.with_burst(#b)));
        opts.push(quote!(rate: ::core::option::Option::Some(
            ::outbox::flow::Rate::per(#amount, ::core::time::Duration::from_millis(#window_ms))#burst
        )));
    }
    if let Some(key) = &attrs.rate_key {
        let key = &key.value;
        opts.push(quote!(rate_key: ::core::option::Option::Some(#key)));
    }
    if let Some(fair) = &attrs.fair {
        let fair = &fair.value;
        opts.push(quote!(fair: ::core::option::Option::Some(#fair)));
    }
    if let Some(cost) = &attrs.cost {
        let text = match &cost.value {
            crate::attr::Cost::Fixed(n) => n.to_string(),
            crate::attr::Cost::Field(f) => format!("{{{f}}}"),
        };
        opts.push(quote!(cost: ::core::option::Option::Some(#text)));
    }
    if let Some(subject) = &attrs.subject {
        let subject = &subject.value;
        opts.push(quote!(subject: ::core::option::Option::Some(#subject)));
    }
    let key_fields = input.key_fields();
    if !key_fields.is_empty() {
        opts.push(quote!(key_fields: &[#(#key_fields),*]));
    }

    // Options are pushed only when set; the struct always ends with the defaults for the others.
    let opts = if opts.is_empty() {
        quote!(::outbox::KindOpts::DEFAULT)
    } else {
        quote!(::outbox::KindOpts { #(#opts,)* ..::outbox::KindOpts::DEFAULT })
    };

    let validate = attrs.validate.as_ref().map(|setting| {
        let path = &setting.value;
        quote! {
            fn validate(&self) -> ::core::result::Result<(), ::std::vec::Vec<::outbox::Violation>> {
                #path(self)
            }
        }
    });

    let output = attrs.output.as_ref().map(|setting| {
        let output = &setting.value;
        quote! {
            fn output_schema() -> ::core::option::Option<::outbox::serde_json::Value> {
                ::core::option::Option::Some(
                    ::outbox::schemars::SchemaGenerator::default().into_root_schema_for::<#output>().to_value(),
                )
            }
        }
    });

    quote! {
        const _: () = {
            #[automatically_derived]
            impl ::outbox::Job for #ty #where_clause {
                const KIND: &'static str = #kind;
                const OPTS: ::outbox::KindOpts = #opts;
                #validate
                #output
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::derive;
    use quote::quote;
    use syn::{DeriveInput, parse_quote};

    #[test]
    fn all_options() {
        let input: DeriveInput = parse_quote! {
            #[serde(rename_all = "camelCase")]
            #[job(kind = "send_welcome", queue = "mail", priority = -5, max_attempts = 10, unique = true)]
            #[job(sequence = "user:{userId}", on_sequence_failure = "continue", concurrency = 3, timeout = "2m")]
            struct SendWelcome {
                #[job(key)]
                user_id: i64,
                template: String,
                #[job(key)]
                #[serde(rename = "org")]
                org_id: i64,
            }
        };
        let expected = quote! {
            const _: () = {
                #[automatically_derived]
                impl ::outbox::Job for SendWelcome {
                    const KIND: &'static str = "send_welcome";
                    const OPTS: ::outbox::KindOpts = ::outbox::KindOpts {
                        queue: "mail",
                        priority: -5i32,
                        max_attempts: 10i32,
                        unique: true,
                        sequence: ::core::option::Option::Some("user:{userId}"),
                        on_sequence_failure: ::outbox::SequenceFailure::Continue,
                        concurrency: ::core::option::Option::Some(3u32),
                        timeout: ::core::option::Option::Some(::core::time::Duration::from_millis(120000u64)),
                        key_fields: &["userId", "org"],
                        ..::outbox::KindOpts::DEFAULT
                    };
                }
            };
        };
        assert_eq!(derive(&input).to_string(), expected.to_string());
    }

    #[test]
    fn missing_options_take_the_defaults() {
        let input: DeriveInput = parse_quote! {
            #[job(kind = "k", queue = "q")]
            struct S {
                a: i64,
            }
        };
        let expected = quote! {
            const _: () = {
                #[automatically_derived]
                impl ::outbox::Job for S {
                    const KIND: &'static str = "k";
                    const OPTS: ::outbox::KindOpts = ::outbox::KindOpts {
                        queue: "q",
                        ..::outbox::KindOpts::DEFAULT
                    };
                }
            };
        };
        assert_eq!(derive(&input).to_string(), expected.to_string());

        let input: DeriveInput = parse_quote! {
            #[job(kind = "k")]
            struct S;
        };
        let expected = quote! {
            const _: () = {
                #[automatically_derived]
                impl ::outbox::Job for S {
                    const KIND: &'static str = "k";
                    const OPTS: ::outbox::KindOpts = ::outbox::KindOpts::DEFAULT;
                }
            };
        };
        assert_eq!(derive(&input).to_string(), expected.to_string());
    }

    #[test]
    fn errors_come_with_a_placeholder_impl_for_plain_structs() {
        let input: DeriveInput = parse_quote! {
            #[job(queue = "q")]
            struct S {}
        };
        let expanded = derive(&input).to_string();
        assert!(expanded.contains("compile_error"), "{expanded}");
        assert!(expanded.contains("missing #[job(kind = \\\"...\\\")]"), "{expanded}");
        let fallback = quote! {
            const _: () = {
                #[automatically_derived]
                impl ::outbox::Job for S {
                    const KIND: &'static str = "";
                }
            };
        };
        assert!(expanded.ends_with(&fallback.to_string()), "{expanded}");

        for input in [
            parse_quote! {
                #[job(queue = "q")]
                struct S<T> { t: T }
            },
            parse_quote! {
                #[job(kind = "k")]
                enum E { A }
            },
        ] {
            let expanded = derive(&input).to_string();
            assert!(expanded.contains("compile_error"), "{expanded}");
            assert!(!expanded.contains("impl"), "{expanded}");
        }
    }
}
