//! 10,000 malformed requests against a real server on a loopback port, sent as raw bytes over TCP (so
//! nothing a client library would refuse to send is out of reach): random bodies, wrong types, huge
//! numbers, bad UTF-8, bad query strings, oversized bodies. No answer may be a 5xx, the server must stay
//! up, and no job may be written.

use std::time::Duration;

use outbox_server::{Role, ServerOpts, Token};
use outbox_tests::{Served, TestDb, conformance, scalar};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const REQUESTS: usize = 10_000;
const OPERATE: &str = "operate-token-for-the-fuzzer";
const WORK: &str = "work-token-for-the-fuzzer";

const ROUTES: &[(&str, &str)] = &[
    ("GET", "/api/health"),
    ("GET", "/api/stats"),
    ("GET", "/api/queues"),
    ("GET", "/api/kinds"),
    ("GET", "/api/kinds/"),
    ("GET", "/api/workers"),
    ("GET", "/api/jobs"),
    ("GET", "/api/jobs/"),
    ("GET", "/api/events"),
    ("GET", "/metrics"),
    ("POST", "/api/jobs"),
    ("POST", "/api/jobs/retry-failed"),
    ("POST", "/api/jobs/x/retry"),
    ("POST", "/api/jobs/x/cancel"),
    ("DELETE", "/api/jobs/"),
    ("POST", "/api/work/claim"),
    ("POST", "/api/work/jobs/x/heartbeat"),
    ("POST", "/api/work/jobs/x/complete"),
    ("POST", "/api/work/jobs/x/fail"),
    ("POST", "/api/work/jobs/x/snooze"),
    ("PUT", "/api/jobs"),
    ("PATCH", "/api/work/claim"),
];

const PARAMS: &[&str] =
    &["status", "kind", "queue", "since", "key", "before", "limit", "window", "event", "job", "after"];

/// A piece of text that tends to break parsers.
fn nasty(rng: &mut fastrand::Rng) -> Vec<u8> {
    let picks: &[&[u8]] = &[
        b"",
        b"-1",
        b"0",
        b"1e400",
        b"99999999999999999999999",
        b"-9223372036854775809",
        b"NaN",
        b"null",
        b"\xff\xfe",
        b"%FF%FE",
        b"%00",
        b"%",
        b"%ZZ",
        b"\xc3\x28",
        b"1h1h",
        b"9999999w",
        b"\"",
        b"{",
        b"[]",
        b"pending,completed",
        b"failed",
        b"0-0",
        b"18446744073709551616-1",
        b"\\u0000",
        b"../../etc/passwd",
    ];
    match rng.usize(..4) {
        0 => picks[rng.usize(..picks.len())].to_vec(),
        1 => (0..rng.usize(..40)).map(|_| rng.u8(..)).collect(),
        2 => "x".repeat(rng.usize(..5000)).into_bytes(),
        _ => rng.u64(..).to_string().into_bytes(),
    }
}

/// A random JSON-ish body: valid JSON of the wrong shape, JSON with wrong types, or garbage.
fn body(rng: &mut fastrand::Rng) -> Vec<u8> {
    let fields = [
        "kind",
        "payload",
        "queue",
        "priority",
        "delay",
        "run_at",
        "key",
        "worker",
        "kinds",
        "queues",
        "limit",
        "lease",
        "run",
        "output",
        "error",
        "retryable",
        "retry_in",
        "max_attempts",
        "sequence",
    ];
    let value = |rng: &mut fastrand::Rng| -> String {
        match rng.usize(..10) {
            0 => "1e400".into(),
            1 => "-99999999999999999999999".into(),
            2 => format!("\"{}\"", String::from_utf8_lossy(&nasty(rng)).replace(['"', '\\'], "")),
            3 => "[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]".into(),
            4 => "{\"n\": {\"n\": 1}}".into(),
            5 => "true".into(),
            6 => "null".into(),
            7 => rng.i64(..).to_string(),
            8 => "[\"a\", 1, null]".into(),
            _ => format!("{}", rng.f64() * 1e300),
        }
    };
    match rng.usize(..6) {
        0 => nasty(rng),
        1 => "[".repeat(rng.usize(1..3000)).into_bytes(),
        2 => {
            let n = rng.usize(..6);
            let parts: Vec<String> =
                (0..n).map(|_| format!("\"{}\": {}", fields[rng.usize(..fields.len())], value(rng))).collect();
            format!("{{{}}}", parts.join(", ")).into_bytes()
        }
        3 => {
            // Well-formed but for one field: an unknown kind, a bad delay, an empty worker.
            let kind = format!("no-such-kind-{}", rng.u32(..));
            format!(r#"{{"kind": "{kind}", "payload": {{"n": {}}}, "delay": {}}}"#, value(rng), value(rng)).into_bytes()
        }
        4 => {
            let mut b = br#"{"worker": "w", "kinds": ["#.to_vec();
            b.extend(nasty(rng));
            b.extend(br#"], "run": "#);
            b.extend(value(rng).into_bytes());
            b.push(b'}');
            b
        }
        _ => value(rng).into_bytes(),
    }
}

fn request(rng: &mut fastrand::Rng, oversized: bool) -> Vec<u8> {
    let (method, path) = ROUTES[rng.usize(..ROUTES.len())];
    let mut target = path.as_bytes().to_vec();
    if path.ends_with('/') {
        target.extend(nasty(rng).into_iter().filter(|b| !b" \r\n?#".contains(b)));
    }
    if rng.bool() {
        target.push(b'?');
        for i in 0..rng.usize(1..4) {
            if i > 0 {
                target.push(b'&');
            }
            target.extend(PARAMS[rng.usize(..PARAMS.len())].as_bytes());
            target.push(b'=');
            target.extend(nasty(rng).into_iter().filter(|b| !b" \r\n#".contains(b)));
        }
    }
    let body = if oversized { vec![b'{'; 3 * 1024 * 1024] } else { body(rng) };
    let token = if path.starts_with("/api/work") { WORK } else { OPERATE };
    let content_type: &[u8] = match rng.usize(..5) {
        0 => b"text/plain",
        1 => b"application/json; charset=\xff",
        _ => b"application/json",
    };
    let mut req = Vec::with_capacity(body.len() + 256);
    req.extend(method.as_bytes());
    req.push(b' ');
    req.extend(target);
    req.extend(b" HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\nauthorization: Bearer ");
    req.extend(token.as_bytes());
    req.extend(b"\r\ncontent-type: ");
    req.extend(content_type);
    if rng.usize(..20) == 0 {
        req.extend(b"\r\nlast-event-id: ");
        req.extend(nasty(rng).into_iter().filter(|b| !b"\r\n".contains(b)));
    }
    req.extend(format!("\r\ncontent-length: {}\r\n\r\n", body.len()).as_bytes());
    req.extend(body);
    req
}

/// Sends one raw request and returns the status code (0 when the server closed without answering, which
/// hyper does for requests it cannot parse as HTTP at all).
async fn send(addr: std::net::SocketAddr, raw: &[u8]) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    // The server may answer (413) and close before reading the whole body.
    let _ = stream.write_all(raw).await;
    let mut head = [0u8; 12];
    let mut read = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while read < head.len() {
        match tokio::time::timeout_at(deadline, stream.read(&mut head[read..])).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => read += n,
            Err(_) => panic!("no answer within 20 s to {:?}", String::from_utf8_lossy(&raw[..raw.len().min(200)])),
        }
    }
    if read < 12 {
        return 0;
    }
    std::str::from_utf8(&head[9..12]).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

conformance!(ten_thousand_malformed_requests_get_no_5xx_and_write_nothing, mysql);
async fn ten_thousand_malformed_requests_get_no_5xx_and_write_nothing(t: TestDb) {
    let opts = ServerOpts::new()
        .token(Token::new(Role::Operate, OPERATE).expect("token"))
        .token(Token::new(Role::Work, WORK).expect("token"))
        .request_timeout(Duration::from_secs(10));
    let served = Served::start(&t.db, opts).await;
    let jobs_before = scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await;
    let mut rng = fastrand::Rng::with_seed(0x00B0_C5E5);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for i in 0..REQUESTS {
        let raw = request(&mut rng, i % 1000 == 999);
        let status = send(served.addr, &raw).await;
        assert!(status < 500, "status {status} for {:?}", String::from_utf8_lossy(&raw[..raw.len().min(300)]));
        *statuses.entry(status).or_default() += 1;
    }
    println!("statuses: {statuses:?}");
    assert!(statuses.get(&0).copied().unwrap_or(0) < REQUESTS / 10, "most requests were answered: {statuses:?}");
    assert_eq!(scalar(&t.db, "SELECT COUNT(*) FROM outbox_jobs").await, jobs_before, "no job written");
    let health = outbox_tests::http_client().get(served.url("/api/health")).send().await.expect("health");
    assert_eq!(health.status(), 200, "the server is still up");
}
