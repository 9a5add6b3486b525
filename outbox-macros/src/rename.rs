//! Serde's field rename rules, so `key_fields` holds the names fields really have in the JSON payload.
//!
//! Mirrors `serde_derive::internals::case`: a container's `#[serde(rename_all = "...")]` maps each field name
//! through one of these rules, and a field's own `#[serde(rename = "...")]` wins over it.

use self::RenameRule::*;

/// One of the case conventions accepted by `#[serde(rename_all = "...")]`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum RenameRule {
    /// No `rename_all`: the field keeps its Rust name.
    None,
    /// `"lowercase"`
    LowerCase,
    /// `"UPPERCASE"`
    UpperCase,
    /// `"PascalCase"`
    PascalCase,
    /// `"camelCase"`
    CamelCase,
    /// `"snake_case"`
    SnakeCase,
    /// `"SCREAMING_SNAKE_CASE"`
    ScreamingSnakeCase,
    /// `"kebab-case"`
    KebabCase,
    /// `"SCREAMING-KEBAB-CASE"`
    ScreamingKebabCase,
}

/// The spelling serde accepts for each rule.
const RENAME_RULES: &[(&str, RenameRule)] = &[
    ("lowercase", LowerCase),
    ("UPPERCASE", UpperCase),
    ("PascalCase", PascalCase),
    ("camelCase", CamelCase),
    ("snake_case", SnakeCase),
    ("SCREAMING_SNAKE_CASE", ScreamingSnakeCase),
    ("kebab-case", KebabCase),
    ("SCREAMING-KEBAB-CASE", ScreamingKebabCase),
];

impl RenameRule {
    /// The rule spelled `name` in `rename_all = "name"`, or `None` for a spelling serde does not know (serde
    /// reports that itself).
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        RENAME_RULES.iter().find(|(spelling, _)| *spelling == name).map(|(_, rule)| *rule)
    }

    /// The serialized name of a struct field called `field` (already without any `r#`).
    pub(crate) fn apply_to_field(self, field: &str) -> String {
        match self {
            None | LowerCase | SnakeCase => field.to_owned(),
            UpperCase | ScreamingSnakeCase => field.to_ascii_uppercase(),
            PascalCase => {
                let mut pascal = String::with_capacity(field.len());
                let mut capitalize = true;
                for ch in field.chars() {
                    if ch == '_' {
                        capitalize = true;
                    } else if capitalize {
                        pascal.push(ch.to_ascii_uppercase());
                        capitalize = false;
                    } else {
                        pascal.push(ch);
                    }
                }
                pascal
            }
            CamelCase => {
                let pascal = PascalCase.apply_to_field(field);
                let mut chars = pascal.chars();
                match chars.next() {
                    Some(first) => first.to_ascii_lowercase().to_string() + chars.as_str(),
                    Option::None => pascal,
                }
            }
            KebabCase => field.replace('_', "-"),
            ScreamingKebabCase => field.to_ascii_uppercase().replace('_', "-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RenameRule::{self, *};

    #[test]
    fn parses_every_serde_spelling() {
        assert_eq!(RenameRule::from_name("lowercase"), Some(LowerCase));
        assert_eq!(RenameRule::from_name("UPPERCASE"), Some(UpperCase));
        assert_eq!(RenameRule::from_name("PascalCase"), Some(PascalCase));
        assert_eq!(RenameRule::from_name("camelCase"), Some(CamelCase));
        assert_eq!(RenameRule::from_name("snake_case"), Some(SnakeCase));
        assert_eq!(RenameRule::from_name("SCREAMING_SNAKE_CASE"), Some(ScreamingSnakeCase));
        assert_eq!(RenameRule::from_name("kebab-case"), Some(KebabCase));
        assert_eq!(RenameRule::from_name("SCREAMING-KEBAB-CASE"), Some(ScreamingKebabCase));
        assert_eq!(RenameRule::from_name("camelcase"), Option::None);
        assert_eq!(RenameRule::from_name(""), Option::None);
    }

    // Same table as serde_derive's own `rename_fields` test.
    #[test]
    fn renames_fields_like_serde() {
        for &(original, upper, pascal, camel, screaming, kebab, screaming_kebab) in &[
            ("outcome", "OUTCOME", "Outcome", "outcome", "OUTCOME", "outcome", "OUTCOME"),
            ("very_tasty", "VERY_TASTY", "VeryTasty", "veryTasty", "VERY_TASTY", "very-tasty", "VERY-TASTY"),
            ("a", "A", "A", "a", "A", "a", "A"),
            ("z42", "Z42", "Z42", "z42", "Z42", "z42", "Z42"),
        ] {
            assert_eq!(None.apply_to_field(original), original);
            assert_eq!(LowerCase.apply_to_field(original), original);
            assert_eq!(UpperCase.apply_to_field(original), upper);
            assert_eq!(PascalCase.apply_to_field(original), pascal);
            assert_eq!(CamelCase.apply_to_field(original), camel);
            assert_eq!(SnakeCase.apply_to_field(original), original);
            assert_eq!(ScreamingSnakeCase.apply_to_field(original), screaming);
            assert_eq!(KebabCase.apply_to_field(original), kebab);
            assert_eq!(ScreamingKebabCase.apply_to_field(original), screaming_kebab);
        }
    }

    #[test]
    fn odd_field_names_do_not_panic() {
        assert_eq!(CamelCase.apply_to_field("_"), "");
        assert_eq!(CamelCase.apply_to_field("_private_id"), "privateId");
        assert_eq!(PascalCase.apply_to_field("user__id"), "UserId");
        assert_eq!(CamelCase.apply_to_field("user_id2"), "userId2");
        assert_eq!(KebabCase.apply_to_field("_x"), "-x");
    }
}
