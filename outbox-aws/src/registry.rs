//! The providers by `resourceType`: the built-ins, and those the application registers at startup.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock, RwLock};

use crate::error::{Error, Result};
use crate::provider::Provider;

static PROVIDERS: LazyLock<RwLock<BTreeMap<&'static str, Arc<dyn Provider>>>> = LazyLock::new(|| {
    let builtins: [Arc<dyn Provider>; 3] = [
        Arc::new(crate::s3_bucket::S3Bucket::new()),
        Arc::new(crate::s3_object::S3Object::new()),
        Arc::new(crate::sqs_queue::SqsQueue::new()),
    ];
    RwLock::new(builtins.into_iter().map(|p| (p.resource_type(), p)).collect())
});

/// Registers a provider for its resource type, process-wide, beside the built-ins (`s3_bucket`,
/// `s3_object`, `sqs_queue`). Register before enqueueing or working jobs of that type.
pub fn register_provider(provider: impl Provider) -> Result<()> {
    let mut providers = PROVIDERS.write().unwrap_or_else(|e| e.into_inner());
    let name = provider.resource_type();
    if providers.contains_key(name) {
        return Err(Error::DuplicateProvider(name.to_owned()));
    }
    providers.insert(name, Arc::new(provider));
    Ok(())
}

/// The provider registered for `resource_type`.
pub fn provider(resource_type: &str) -> Result<Arc<dyn Provider>> {
    let providers = PROVIDERS.read().unwrap_or_else(|e| e.into_inner());
    providers
        .get(resource_type)
        .cloned()
        .ok_or_else(|| Error::UnknownResourceType { resource_type: resource_type.to_owned(), known: known(&providers) })
}

/// The registered resource types, sorted.
pub fn resource_types() -> Vec<&'static str> {
    PROVIDERS.read().unwrap_or_else(|e| e.into_inner()).keys().copied().collect()
}

fn known(providers: &BTreeMap<&'static str, Arc<dyn Provider>>) -> String {
    providers.keys().copied().collect::<Vec<_>>().join(", ")
}
