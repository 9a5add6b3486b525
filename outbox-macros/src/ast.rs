//! The derive input, reduced to what `#[derive(Job)]` needs: the type's options and, for each field, its
//! `#[job(...)]` options and serialized name.

use crate::attr::{self, ContainerAttrs, FieldAttrs};
use crate::ctxt::Errors;
use crate::rename::RenameRule;
use proc_macro2::Span;
use syn::ext::IdentExt as _;
use syn::{Data, DataEnum, DataUnion, DeriveInput, Fields, Ident};

/// A `#[derive(Job)]` input with its attributes parsed.
pub(crate) struct Input<'a> {
    /// The input as written.
    pub(crate) original: &'a DeriveInput,
    /// The `#[job(...)]` options of the type.
    pub(crate) attrs: ContainerAttrs,
    /// Whether it is a struct, and its fields if so.
    pub(crate) shape: Shape<'a>,
}

/// What kind of type the derive is on.
pub(crate) enum Shape<'a> {
    /// A struct, the only kind of type that can be a job payload.
    Struct {
        /// Named, tuple or unit.
        style: Style,
        /// The fields in declaration order.
        fields: Vec<Field<'a>>,
    },
    /// An enum, rejected.
    Enum(&'a DataEnum),
    /// A union, rejected.
    Union(&'a DataUnion),
}

/// The style of a struct's fields.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Style {
    /// `struct S { a: A }`
    Named,
    /// `struct S(A);`
    Tuple,
    /// `struct S;`
    Unit,
}

/// One field of a struct.
pub(crate) struct Field<'a> {
    /// The `#[job(...)]` options of the field.
    pub(crate) attrs: FieldAttrs<'a>,
    /// The field's name in the serialized JSON object, after serde's renames; `None` for a tuple field.
    pub(crate) serialized_name: Option<String>,
}

impl<'a> Input<'a> {
    /// Parses the attributes of `node`, reporting their problems into `errors`.
    pub(crate) fn from_syn(node: &'a DeriveInput, errors: &mut Errors) -> Self {
        let attrs = attr::container(&node.attrs, errors);
        let shape = match &node.data {
            Data::Struct(data) => {
                let rename_all = attr::serde_container(&node.attrs).rename_all.unwrap_or(RenameRule::None);
                let style = match &data.fields {
                    Fields::Named(_) => Style::Named,
                    Fields::Unnamed(_) => Style::Tuple,
                    Fields::Unit => Style::Unit,
                };
                let fields = data.fields.iter().map(|field| Field::from_syn(field, rename_all, errors)).collect();
                Shape::Struct { style, fields }
            }
            Data::Enum(data) => Shape::Enum(data),
            Data::Union(data) => Shape::Union(data),
        };
        Input { original: node, attrs, shape }
    }

    /// The serialized names of the fields marked `#[job(key)]`, in declaration order.
    pub(crate) fn key_fields(&self) -> Vec<&str> {
        match &self.shape {
            Shape::Struct { fields, .. } => fields
                .iter()
                .filter(|field| field.attrs.key.is_some())
                .filter_map(|field| field.serialized_name.as_deref())
                .collect(),
            Shape::Enum(_) | Shape::Union(_) => Vec::new(),
        }
    }
}

impl<'a> Field<'a> {
    fn from_syn(field: &'a syn::Field, rename_all: RenameRule, errors: &mut Errors) -> Self {
        let attrs = attr::field(&field.attrs, errors);
        let serialized_name = field.ident.as_ref().map(|ident| {
            attr::serde_field(&field.attrs)
                .rename
                .unwrap_or_else(|| rename_all.apply_to_field(&ident.unraw().to_string()))
        });
        Field { attrs, serialized_name }
    }
}

/// The type's name with the span of the derive, so that a missing supertrait such as `Serialize` is
/// reported at `#[derive(Job)]`.
pub(crate) fn call_site_ident(ident: &Ident) -> Ident {
    let mut ident = ident.clone();
    ident.set_span(Span::call_site());
    ident
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::parse_quote;

    fn keys(node: &DeriveInput) -> Vec<String> {
        let mut errors = Errors::default();
        let input = Input::from_syn(node, &mut errors);
        assert!(errors.finish().is_ok());
        input.key_fields().into_iter().map(str::to_owned).collect()
    }

    #[test]
    fn key_fields_use_serialized_names_in_order() {
        let node: DeriveInput = parse_quote! {
            #[serde(rename_all = "camelCase")]
            struct S {
                #[job(key)]
                tenant_id: i64,
                body: String,
                #[job(key)]
                #[serde(rename = "UID")]
                user_id: i64,
                #[job(key)]
                r#type: String,
                #[job(key)]
                r#long_name: String,
            }
        };
        assert_eq!(keys(&node), ["tenantId", "UID", "type", "longName"]);
    }

    #[test]
    fn key_fields_without_rename_all() {
        let node: DeriveInput = parse_quote! {
            struct S {
                #[job(key)]
                tenant_id: i64,
            }
        };
        assert_eq!(keys(&node), ["tenant_id"]);
    }

    #[test]
    fn key_fields_screaming_kebab() {
        let node: DeriveInput = parse_quote! {
            #[serde(rename_all = "SCREAMING-KEBAB-CASE")]
            struct S {
                #[job(key)]
                tenant_id: i64,
            }
        };
        assert_eq!(keys(&node), ["TENANT-ID"]);
    }
}
