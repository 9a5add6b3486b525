//! The error collector every stage of the derive reports into, so that one build shows every mistake.

use syn::Error;

/// Collects every error found in the input so that all of them are reported in one build.
#[derive(Default)]
pub(crate) struct Errors(Option<Error>);

impl Errors {
    /// Adds `error` to those reported.
    pub(crate) fn push(&mut self, error: Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// All the errors pushed, combined into one, or `Ok` if there were none.
    pub(crate) fn finish(self) -> Result<(), Error> {
        self.0.map_or(Ok(()), Err)
    }
}
