//! The standard chain: a process configured only by its environment (`AWS_ENDPOINT_URL`, `AWS_REGION`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`) reaches the server with path-style addressing, and one
//! without credentials or region fails to connect with a clear error. Each case runs in a child process
//! so the environment is its own.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use outbox_aws::{Aws, AwsOpts, SyncAws};
use outbox_tests::ChildProcess;
use serde_json::json;

/// Set in the children's environment: run without it, a child half fails instead of passing unrun.
const CHILD: &str = "OUTBOX_CHAIN_CHILD";

/// Runs the ignored helper `name` of this test binary with exactly `env` (plus PATH and HOME pointing
/// at an empty directory, so no shared config file is read). One still running after two minutes fails the
/// test and is killed with its process group.
fn child(name: &str, env: &[(&str, &str)]) -> Output {
    let home = tempfile::tempdir().expect("home");
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--ignored", "--exact", name, "--nocapture", "--test-threads=1"]).env_clear();
    cmd.env("HOME", home.path()).env("PATH", std::env::var_os("PATH").unwrap_or_default());
    // Keep the instance-metadata lookup of the chain off the network.
    cmd.env("AWS_EC2_METADATA_DISABLED", "true");
    cmd.env(CHILD, "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    ChildProcess::spawn(&mut cmd).output_within(Duration::from_secs(120))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_alone_configures_region_credentials_and_endpoint() {
    let Some(endpoint) = common::endpoint("the_environment_alone_configures") else { return };
    let bucket = common::unique("fromenv");
    let out = child(
        "env_child_syncs_a_bucket",
        &[
            ("AWS_ENDPOINT_URL", &endpoint),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "AKIDFROMENV"),
            ("AWS_SECRET_ACCESS_KEY", "from-env-secret"),
            ("OUTBOX_CHILD_BUCKET", &bucket),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("CHILD-OK"), "{stdout}");
    let aws = common::aws(&endpoint).await;
    assert!(aws.s3().head_bucket().bucket(&bucket).send().await.is_ok(), "the child's bucket exists");
}

#[test]
fn without_credentials_or_region_connecting_fails_with_a_clear_error() {
    let out = child("env_child_connects", &[("AWS_REGION", "us-east-1"), ("AWS_ENDPOINT_URL", "http://127.0.0.1:9")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("CONNECT-ERR aws configuration: no usable credentials"), "{stdout}");
    let out = child("env_child_connects", &[("AWS_ACCESS_KEY_ID", "a"), ("AWS_SECRET_ACCESS_KEY", "b")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("CONNECT-ERR aws configuration: no region configured"), "{stdout}");
    let out = child("env_child_connects", &[("AWS_REGION", "us-east-1"), ("AWS_ENDPOINT_URL", "ftp://x")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("CONNECT-ERR"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run as a child process by the chain tests"]
async fn env_child_syncs_a_bucket() {
    outbox_tests::child_half(CHILD, "the chain tests");
    let bucket = std::env::var("OUTBOX_CHILD_BUCKET").expect("bucket");
    let t = outbox_tests::fresh_db().await;
    let aws = Aws::connect(AwsOpts::new()).await.expect("connect from the environment");
    let row = common::sync(&t.db, &aws, &SyncAws::upsert("s3_bucket", &bucket, json!({}))).await;
    common::completed(&row);
    println!("CHILD-OK {}", row.output.map(|o| o.to_string()).unwrap_or_default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run as a child process by the chain tests"]
async fn env_child_connects() {
    outbox_tests::child_half(CHILD, "the chain tests");
    match Aws::connect(AwsOpts::new()).await {
        Ok(_) => println!("CONNECT-OK"),
        Err(e) => println!("CONNECT-ERR {e}"),
    }
}
