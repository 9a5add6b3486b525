//! A real headless Chromium driven through chromedriver (Debian's `chromium` and `chromium-driver`), one
//! browser at a time, with screenshots saved under `target/screenshots` (or `OUTBOX_SCREENSHOTS`).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use outbox_tests::ChildProcess;
use serde_json::{Value, json};
use tokio::sync::{Mutex, MutexGuard};

/// Browsers run one at a time: two at once on two cores make every wait a race.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// How long a page gets to show what a test waits for.
const PATIENCE: Duration = Duration::from_secs(20);

pub(crate) struct Browser {
    pub(crate) client: Client,
    /// chromedriver's port and the WebDriver session it runs for this browser.
    port: u16,
    session: String,
    /// chromedriver, leading a process group of its own that the browser it starts joins: dropped after the
    /// session is ended, it SIGKILLs whatever of the group is left.
    _driver: ChildProcess,
    _turn: MutexGuard<'static, ()>,
}

impl Drop for Browser {
    /// Ends the WebDriver session first, so chromedriver closes the browser it started; killing chromedriver
    /// alone would leave the browser running, re-parented to init. This runs while a failing test unwinds
    /// too, where nothing can be awaited, so it speaks HTTP/1.1 over a blocking socket (holding the test's
    /// thread for as long as chromedriver takes to close the browser).
    fn drop(&mut self) {
        if let Err(e) = end_session(self.port, &self.session) {
            eprintln!("could not end the WebDriver session {}: {e}; killing its process group", self.session);
        }
    }
}

/// `DELETE /session/{id}` on chromedriver, waiting for its answer (it answers once the browser is closed).
/// chromedriver keeps the connection open after answering, so the answer is read up to its status line.
fn end_session(port: u16, session: &str) -> std::io::Result<()> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(PATIENCE))?;
    write!(stream, "DELETE /session/{session} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\r\n")?;
    let mut answer = Vec::new();
    let mut chunk = [0; 512];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        match stream.read(&mut chunk)? {
            0 => break,
            n => answer.extend_from_slice(&chunk[..n]),
        }
    }
    let status = String::from_utf8_lossy(&answer).lines().next().unwrap_or_default().to_owned();
    if status.starts_with("HTTP/1.1 200") {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("chromedriver answered {status:?}")))
    }
}

/// The browser's console log since it was last read (chromedriver's log endpoint).
#[derive(Debug)]
struct ConsoleLog;

impl WebDriverCompatibleCommand for ConsoleLog {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(json!({ "type": "browser" }).to_string()))
    }
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|dir| PathBuf::from(dir).join(program)).find(|p| p.is_file())
}

impl Browser {
    /// A headless Chromium 1280 px wide, or `None` (a `SKIPPED` line; a failure in CI) without chromedriver.
    pub(crate) async fn start(test: &str) -> Option<Browser> {
        let Some(chromedriver) = on_path("chromedriver") else {
            outbox_tests::unavailable(test, "chromedriver is not installed (apt-get install chromium chromium-driver)");
            return None;
        };
        let turn = ONE_AT_A_TIME.lock().await;
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
        let driver = ChildProcess::spawn(
            Command::new(chromedriver).arg(format!("--port={port}")).stdout(Stdio::null()).stderr(Stdio::null()),
        );
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({ "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", "--force-device-scale-factor=1", "--no-first-run",
            ] }),
        );
        capabilities.insert("goog:loggingPrefs".into(), json!({ "browser": "ALL" }));
        let deadline = Instant::now() + PATIENCE;
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(client) => break client,
                Err(e) if Instant::now() > deadline => panic!("chromedriver on port {port} did not start: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        };
        let session = client.session_id().await.expect("session id").expect("a WebDriver session");
        Some(Browser { client, port, session, _driver: driver, _turn: turn })
    }

    /// Waits until `css` matches an element whose text satisfies `ok`; returns that text.
    #[track_caller]
    pub(crate) fn text_of<'a>(
        &'a self,
        css: &'a str,
        ok: impl Fn(&str) -> bool + 'a,
    ) -> impl Future<Output = String> + 'a {
        let caller = std::panic::Location::caller();
        async move {
            let deadline = Instant::now() + PATIENCE;
            let mut last = None;
            loop {
                if let Ok(element) = self.client.find(Locator::Css(css)).await
                    && let Ok(text) = element.text().await
                {
                    if ok(&text) {
                        return text;
                    }
                    last = Some(text);
                }
                assert!(Instant::now() < deadline, "{caller}: `{css}` never showed what was expected; last: {last:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Waits until `css` matches at least one element.
    pub(crate) async fn shown(&self, css: &str) {
        self.text_of(css, |_| true).await;
    }

    /// Waits until `script` (a function body returning a value) returns something other than `false` or
    /// `null`, and returns it.
    pub(crate) async fn until(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let value = self.client.execute(script, vec![]).await.expect("script");
            if !matches!(value, Value::Bool(false) | Value::Null) {
                return value;
            }
            assert!(Instant::now() < deadline, "never happened: {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// How many elements match `css` now.
    pub(crate) async fn count(&self, css: &str) -> usize {
        self.client.find_all(Locator::Css(css)).await.expect("find").len()
    }

    /// Clicks the element `css` matches once it is shown.
    pub(crate) async fn click(&self, css: &str) {
        self.shown(css).await;
        self.client.find(Locator::Css(css)).await.expect("find").click().await.expect("click");
    }

    /// The console's errors (level `SEVERE`) since the last call.
    pub(crate) async fn console_errors(&self) -> Vec<String> {
        let entries = self.client.issue_cmd(ConsoleLog).await.expect("console log");
        entries
            .as_array()
            .map(|list| {
                list.iter()
                    .filter(|e| e["level"] == "SEVERE")
                    .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Saves a screenshot of the window as `<name>.png`; returns its path.
    pub(crate) async fn screenshot(&self, name: &str) -> PathBuf {
        let dir = std::env::var_os("OUTBOX_SCREENSHOTS")
            .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots"), PathBuf::from);
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        let png = self.client.screenshot().await.expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a screenshot is a PNG");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }
}
