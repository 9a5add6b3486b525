//! The kinds built into this binary. Resolving a name against them and the kinds recorded in the database
//! is [`outbox_server::KnownKinds`]'s, which `outbox serve` uses too.

use std::sync::Arc;

use outbox::Kind;
use outbox_aws::SyncAws;
use outbox_fs::{ClaudeExtraction, CreateFile, DeleteFile};
use outbox_server::KnownKinds;

use crate::fail::Result;

/// The kinds of the built-in handlers, with their own rules.
pub(crate) fn built_in() -> Result<Vec<Arc<Kind>>> {
    Ok(vec![
        Kind::of::<CreateFile>()?,
        Kind::of::<DeleteFile>()?,
        Kind::of::<ClaudeExtraction>()?,
        Kind::of::<SyncAws>()?,
    ])
}

/// The built-in kinds and whatever the database records.
pub(crate) fn known() -> Result<KnownKinds> {
    Ok(KnownKinds::new(built_in()?))
}
