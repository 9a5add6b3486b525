//! outbox-fs leaves an application's TLS alone: depending on it turns on no reqwest feature that makes the
//! application's own clients panic for want of a rustls crypto provider, and building the API backend installs
//! no process-wide provider. Each check runs alone in a child process, where nothing else has installed one.

use std::panic::{AssertUnwindSafe, catch_unwind};

use outbox_fs::extract::{AnthropicApi, ApiKey, ApiOpts};

/// Set in the child processes of [`run_child`]; the `_child` tests do nothing without it.
const CHILD: &str = "OUTBOX_TEST_FS_TLS_PROVIDER_CHILD";

/// Runs the ignored test `name` alone in a child process of this test binary.
fn run_child(name: &str) {
    outbox_tests::run_child(name, CHILD, |_| {}).assert_passed();
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("a panic without a message")
}

/// An application beside outbox-fs uses reqwest without a TLS feature of its own (`reqwest` here is a
/// dev-dependency with `default-features = false`, as such an application would have it).
#[test]
fn reqwest_clients_build_in_a_crate_that_depends_on_outbox_fs() {
    run_child("reqwest_clients_build_in_a_crate_that_depends_on_outbox_fs_child");
}

#[test]
#[ignore = "half of reqwest_clients_build_in_a_crate_that_depends_on_outbox_fs, which runs it alone in a process"]
fn reqwest_clients_build_in_a_crate_that_depends_on_outbox_fs_child() {
    outbox_tests::child_half(CHILD, "reqwest_clients_build_in_a_crate_that_depends_on_outbox_fs");
    assert!(rustls::crypto::CryptoProvider::get_default().is_none(), "nothing installed a provider before the test");

    let built = catch_unwind(reqwest::Client::new);
    if let Err(payload) = built {
        panic!(
            "a reqwest client could not be built in a crate that depends on outbox-fs: {}",
            panic_message(&*payload)
        );
    }
    let built = catch_unwind(|| reqwest::Client::builder().build());
    match built {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("a reqwest client could not be built in a crate that depends on outbox-fs: {e}"),
        Err(payload) => panic!(
            "a reqwest client builder panicked in a crate that depends on outbox-fs: {}",
            panic_message(&*payload)
        ),
    }
}

/// The API backend carries its own provider (ring) instead of installing one for the whole process.
#[test]
fn the_api_backend_installs_no_process_wide_tls_provider() {
    run_child("the_api_backend_installs_no_process_wide_tls_provider_child");
}

#[test]
#[ignore = "half of the_api_backend_installs_no_process_wide_tls_provider, which runs it alone in a process"]
fn the_api_backend_installs_no_process_wide_tls_provider_child() {
    outbox_tests::child_half(CHILD, "the_api_backend_installs_no_process_wide_tls_provider");
    assert!(rustls::crypto::CryptoProvider::get_default().is_none(), "nothing installed a provider before the test");

    let opts = ApiOpts::new("claude-sonnet-4-5").with_key(ApiKey::new("sk-ant-test"));
    let built = catch_unwind(AssertUnwindSafe(|| AnthropicApi::new(opts)));
    match built {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => panic!("the api backend could not be built: {e}"),
        Err(payload) => panic!("building the api backend panicked: {}", panic_message(&*payload)),
    }

    assert!(
        rustls::crypto::CryptoProvider::get_default().is_none(),
        "building the api backend installed a process-wide rustls crypto provider"
    );
}
