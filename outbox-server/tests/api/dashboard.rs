//! The dashboard in a real headless Chromium against a real server and database: what it shows equals the
//! database, it changes live, its actions act, a read token sees no action, and no page logs an error.

use outbox::{EnqueueOpts, JobError, JobStatus, Kind, Worker, ops};
use outbox_tests::{Backend, Keyed, Probe, TestDb, sqlite_only};
use reqwest::Method;
use serde_json::{Value, json};

use crate::browser::Browser;
use crate::harness::{self, OPERATE, READ, Server};

/// A server with `probe` and `keyed` built in, a browser signed in with `token`, on the overview.
struct Dash {
    server: Server,
    browser: Browser,
    backend: Backend,
}

impl Dash {
    async fn open(t: &TestDb, test: &str, token: &str) -> Option<Dash> {
        let opts = harness::opts().kind(Kind::of::<Keyed>().expect("keyed kind"));
        let server = Server::with(t, opts).await;
        let browser = Browser::start(test).await?;
        let dash = Dash { server, browser, backend: t.backend };
        dash.browser.client.goto(&format!("{}/", dash.server.base)).await.expect("goto");
        // The token is asked for once and kept for the tab; it never reaches the address bar.
        dash.browser.shown("#login #token").await;
        let field = dash.browser.client.find(fantoccini::Locator::Css("#token")).await.expect("field");
        field.send_keys(token).await.expect("type");
        dash.browser.click("#login button[type=submit]").await;
        dash.browser.shown("#nav:not([hidden])").await;
        let url = dash.browser.client.current_url().await.expect("url");
        assert!(!url.as_str().contains(token), "the token is in the address: {url}");
        Some(dash)
    }

    /// Goes to the page at `hash` (`#/jobs`) and waits for its heading.
    async fn visit(&self, hash: &str, heading: &str) {
        self.browser.client.goto(&format!("{}/{hash}", self.server.base)).await.expect("goto");
        self.browser.text_of("#view h1", |h| h.contains(heading)).await;
    }

    /// A screenshot named after the test's backend (docs/guides/operating.md shows SQLite's).
    async fn screenshot(&self, name: &str) {
        let backend = match self.backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::MySql => "mysql",
        };
        self.browser.screenshot(&format!("{name}-{backend}")).await;
    }

    /// Marks the page so that a reload (which would clear the mark) is noticed.
    async fn mark(&self) {
        self.browser.client.execute("window.outboxMark = 1; return true;", vec![]).await.expect("mark");
    }

    async fn still_marked(&self) {
        let mark = self.browser.client.execute("return window.outboxMark === 1;", vec![]).await.expect("mark");
        assert_eq!(mark, Value::Bool(true), "the page reloaded");
    }

    /// Clicks the failures page's one group retry, once there is one group left.
    async fn click_when_one_group(&self) {
        self.browser.until("one group", "return document.querySelectorAll('button.retry-group').length === 1;").await;
        self.browser.click("button.retry-group").await;
    }

    async fn no_console_errors(&self, page: &str) {
        let errors = self.browser.console_errors().await;
        assert!(errors.is_empty(), "{page} logged errors: {errors:#?}");
    }
}

/// Jobs 1 and 2 complete, 3 and 4 fail for good with two errors, 5 to 7 stay pending, 8 is cancelled.
async fn some_of_everything(t: &TestDb) -> Vec<String> {
    let mut ids = Vec::new();
    for n in 1..=4 {
        ids.push(outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new()).await.expect("enqueue").id().to_owned());
    }
    let worker = Worker::builder(&t.db)
        .register(|p: Probe, _| async move {
            match p.n {
                3 => Err(JobError::permanent("disk full")),
                4 => Err(JobError::permanent("no such bucket")),
                _ => Ok(()),
            }
        })
        .build()
        .await
        .expect("worker");
    worker.drain().await.expect("drain");
    for n in 5..=8 {
        let opts = if n == 7 { EnqueueOpts::new().queue("slow") } else { EnqueueOpts::new() };
        ids.push(outbox::enqueue(&t.db, &Probe { n }, opts).await.expect("enqueue").id().to_owned());
    }
    ops::cancel(&t.db, &ids[7]).await.expect("cancel");
    ids
}

sqlite_only!(the_overview_counts_what_the_database_holds);
async fn the_overview_counts_what_the_database_holds(t: TestDb) {
    some_of_everything(&t).await;
    let Some(dash) = Dash::open(&t, "the_overview_counts_what_the_database_holds", READ).await else { return };
    dash.browser.shown("[data-count=pending]").await;
    let counts = ops::counts(&t.db).await.expect("counts");
    for status in ["pending", "claimed", "completed", "failed", "cancelled"] {
        let want: u64 = counts.iter().filter(|c| c.status.as_str() == status).map(|c| c.count).sum();
        let shown = dash.browser.text_of(&format!("[data-count={status}]"), |_| true).await;
        assert_eq!(shown, want.to_string(), "{status}");
    }
    for queue in ops::queues(&t.db).await.expect("queues") {
        let row = dash.browser.text_of(&format!("tr[data-queue={}]", queue.queue), |_| true).await;
        let cells: Vec<&str> = row.split_whitespace().collect();
        let want = [queue.available, queue.scheduled, queue.waiting, queue.claimed, queue.stuck, queue.completed]
            .iter()
            .chain(&[queue.failed, queue.cancelled])
            .map(u64::to_string)
            .collect::<Vec<_>>();
        assert_eq!(cells[1..], want, "queue {}", queue.queue);
    }
    // The chart counts the last hour's outcomes.
    let caption = dash.browser.text_of("figure.chart-wrap figcaption", |_| true).await;
    assert!(caption.contains("2 completed") && caption.contains("2 failed"), "{caption}");
    dash.screenshot("overview").await;

    // A job enqueued elsewhere shows in the counts without a reload.
    dash.mark().await;
    outbox::enqueue(&t.db, &Probe { n: 100 }, EnqueueOpts::new()).await.expect("enqueue");
    dash.browser.text_of("[data-count=pending]", |n| n == "4").await;
    dash.still_marked().await;
    dash.no_console_errors("the overview").await;
}

sqlite_only!(the_jobs_page_is_live_and_its_filters_narrow_it);
async fn the_jobs_page_is_live_and_its_filters_narrow_it(t: TestDb) {
    let ids = some_of_everything(&t).await;
    outbox::enqueue(&t.db, &Keyed { user_id: 1, note: "a".into() }, EnqueueOpts::new()).await.expect("enqueue");
    outbox::enqueue(&t.db, &Keyed { user_id: 2, note: "b".into() }, EnqueueOpts::new()).await.expect("enqueue");
    let Some(dash) = Dash::open(&t, "the_jobs_page_is_live_and_its_filters_narrow_it", OPERATE).await else { return };
    dash.visit("#/jobs", "Jobs").await;
    dash.browser.until("10 rows", "return document.querySelectorAll('tr[data-job-id]').length === 10;").await;

    // Enqueued through the API while the page is open: it appears without a reload.
    dash.mark().await;
    let created = dash.server.enqueue(json!({"kind": "probe", "payload": {"n": 42}})).await;
    let id = created.ok(201)["id"].as_str().expect("id").to_owned();
    dash.browser.shown(&format!("tr[data-job-id='{id}']")).await;
    dash.still_marked().await;
    dash.screenshot("jobs").await;

    // Filters narrow the table: by kind, then also by status.
    dash.browser.click("#f-kind option[value=keyed]").await;
    let only_keyed = "const rows = [...document.querySelectorAll('tr[data-job-id]')]; \
                      return rows.length === 2 && rows.every((r) => r.dataset.kind === 'keyed');";
    dash.browser.until("only the two keyed jobs", only_keyed).await;
    let url = dash.browser.client.current_url().await.expect("url");
    assert!(url.fragment().is_some_and(|f| f.contains("kind=keyed")), "{url}");
    dash.browser.click("#f-kind option[value='']").await;
    dash.browser.click("#f-status option[value=failed]").await;
    let only_failed = "const rows = [...document.querySelectorAll('tr[data-job-id]')]; \
                       return rows.length === 2 && rows.every((r) => r.dataset.status === 'failed');";
    dash.browser.until("only the two failed jobs", only_failed).await;
    dash.browser.click("#f-status option[value='']").await;

    // A job's page shows its history.
    dash.browser.click(&format!("tr[data-job-id='{}'] a", ids[0])).await;
    dash.browser.text_of("#view h1", |h| h.contains(&ids[0])).await;
    let events = dash
        .browser
        .until("the history", "const e = [...document.querySelectorAll('#history li')].map((li) => li.dataset.event); return e.length ? e : null;")
        .await;
    assert_eq!(events, json!(["enqueued", "claimed", "completed"]));
    let payload = dash.browser.text_of("pre.json", |_| true).await;
    assert_eq!(serde_json::from_str::<Value>(&payload).expect("payload is formatted JSON"), json!({"n": 1}));
    dash.screenshot("job").await;
    dash.no_console_errors("the jobs and job pages").await;
}

sqlite_only!(a_subject_s_jobs_are_listed_cancelled_and_retried_together);
/// The jobs page filtered by subject lists that subject's jobs alone; its buttons cancel what has not started and
/// put it back, and a job's page links to its subject.
async fn a_subject_s_jobs_are_listed_cancelled_and_retried_together(t: TestDb) {
    for (n, subject) in [(1, "order:42"), (2, "order:42"), (3, "order:7")] {
        outbox::enqueue(&t.db, &Probe { n }, EnqueueOpts::new().subject(subject)).await.expect("enqueue");
    }
    let name = "a_subject_s_jobs_are_listed_cancelled_and_retried_together";
    let Some(dash) = Dash::open(&t, name, OPERATE).await else { return };
    dash.visit("#/jobs?subject=order%3A42", "Jobs").await;
    dash.browser
        .until("the subject's two jobs", "return document.querySelectorAll('tr[data-job-id]').length === 2;")
        .await;
    let status = |s: &'static str| {
        format!(
            "const rows = [...document.querySelectorAll('tr[data-job-id]')]; \
             return rows.length === 2 && rows.every((r) => r.dataset.status === '{s}');"
        )
    };
    dash.browser.click("#cancel-subject").await;
    dash.browser.text_of("#status", |s| s.contains("Cancelled 2 jobs of order:42")).await;
    dash.browser.until("both cancelled", &status("cancelled")).await;
    let other = ops::by_subject(&t.db, "order:7", 10).await.expect("by subject");
    assert_eq!(other[0].status, JobStatus::Pending, "another subject's job is untouched");
    dash.browser.click("#retry-subject").await;
    dash.browser.text_of("#status", |s| s.contains("Retried 2 jobs of order:42")).await;
    dash.browser.until("both pending again", &status("pending")).await;
    // A job's page shows its subject, linking to the subject's jobs.
    let id = ops::by_subject(&t.db, "order:7", 10).await.expect("by subject")[0].id.clone();
    dash.visit(&format!("#/jobs/{id}"), &id).await;
    dash.browser.click("a[href='#/jobs?subject=order%3A7']").await;
    dash.browser
        .until("the other subject's job", "return document.querySelectorAll('tr[data-job-id]').length === 1;")
        .await;
    dash.no_console_errors("the jobs page by subject").await;
}

sqlite_only!(retry_on_a_failed_job_makes_it_pending);
async fn retry_on_a_failed_job_makes_it_pending(t: TestDb) {
    let ids = some_of_everything(&t).await;
    let failed = &ids[2];
    let Some(dash) = Dash::open(&t, "retry_on_a_failed_job_makes_it_pending", OPERATE).await else { return };

    dash.visit("#/failures", "Failures").await;
    dash.browser.until("two groups", "return document.querySelectorAll('button.retry-group').length === 2;").await;
    let groups = dash.browser.text_of("section.failure-kind[data-kind=probe]", |_| true).await;
    assert!(groups.contains("disk full") && groups.contains("no such bucket"), "{groups}");
    dash.screenshot("failures").await;

    dash.visit(&format!("#/jobs/{failed}"), failed).await;
    dash.browser.text_of(".job-status .badge", |s| s == "failed").await;
    dash.browser.click("#retry").await;
    dash.browser.text_of(".job-status .badge", |s| s == "pending").await;
    assert_eq!(ops::get(&t.db, failed).await.expect("job").status, JobStatus::Pending);
    dash.browser.text_of("#history li:last-child", |e| e.contains("retried by operator")).await;
    dash.screenshot("job-retried").await;

    // The failures page's bulk retry puts the other group back too.
    dash.visit("#/failures", "Failures").await;
    dash.click_when_one_group().await;
    dash.browser.text_of("#status", |s| s.contains("Retried 1 job of probe")).await;
    assert_eq!(ops::get(&t.db, &ids[3]).await.expect("job").status, JobStatus::Pending);
    dash.browser.text_of("#view", |v| v.contains("No failed jobs.")).await;
    dash.no_console_errors("the failures and job pages").await;
}

sqlite_only!(the_flow_page_pauses_and_resumes_and_shows_rates);
async fn the_flow_page_pauses_and_resumes_and_shows_rates(t: TestDb) {
    outbox::flow::define_rate(&t.db, "probe", "50/1m burst 5".parse().expect("rate")).await.expect("rate");
    let Some(dash) = Dash::open(&t, "the_flow_page_pauses_and_resumes_and_shows_rates", OPERATE).await else { return };
    dash.visit("#/flow", "Flow").await;
    dash.browser.text_of("#rates", |r| r.contains("probe") && r.contains("50/1m burst 5") && r.contains("of 5")).await;
    dash.browser.text_of("#paused", |p| p.contains("Nothing is paused.")).await;

    // Pause a queue from the form: the database holds it, and the page lists it with its reason.
    for (css, text) in [("#pause-name", "mail"), ("#pause-reason", "provider down")] {
        let field = dash.browser.client.find(fantoccini::Locator::Css(css)).await.expect("field");
        field.send_keys(text).await.expect("type");
    }
    dash.browser.click("#pause-form button[type=submit]").await;
    dash.browser.text_of("#status", |s| s.contains("Paused queue mail")).await;
    dash.browser.text_of("#paused", |p| p.contains("queue mail") && p.contains("provider down")).await;
    let paused = outbox::flow::paused(&t.db).await.expect("paused");
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0].target, outbox::flow::Target::queue("mail"));
    dash.screenshot("flow").await;

    dash.browser.click("#paused button.resume").await;
    dash.browser.text_of("#status", |s| s.contains("Resumed queue mail")).await;
    dash.browser.text_of("#paused", |p| p.contains("Nothing is paused.")).await;
    assert!(outbox::flow::paused(&t.db).await.expect("paused").is_empty());
    dash.no_console_errors("the flow page").await;
}

sqlite_only!(a_read_token_sees_no_action_and_cannot_forge_one);
async fn a_read_token_sees_no_action_and_cannot_forge_one(t: TestDb) {
    let ids = some_of_everything(&t).await;
    let failed = &ids[2];
    let Some(dash) = Dash::open(&t, "a_read_token_sees_no_action_and_cannot_forge_one", READ).await else { return };
    dash.browser.text_of("#role", |r| r == "read token").await;
    dash.visit(&format!("#/jobs/{failed}"), failed).await;
    dash.browser.shown("#history li").await;
    assert_eq!(dash.browser.count("#retry, #cancel, .actions button").await, 0);
    dash.visit("#/failures", "Failures").await;
    dash.browser.shown("section.failure-kind").await;
    assert_eq!(dash.browser.count("button.retry-group, button.retry-kind").await, 0);

    // The request the retry button would send, forged with the read token, is refused and changes nothing.
    let forged =
        dash.server.send(dash.server.request(Method::POST, &format!("/api/jobs/{failed}/retry"), Some(READ))).await;
    forged.error(403, "forbidden");
    let bulk = dash.server.request(Method::POST, "/api/jobs/retry-failed", Some(READ)).json(&json!({}));
    dash.server.send(bulk).await.error(403, "forbidden");
    assert_eq!(ops::get(&t.db, failed).await.expect("job").status, JobStatus::Failed);
    dash.screenshot("read-only").await;
    dash.no_console_errors("the read-only pages").await;
}

sqlite_only!(every_page_shows_without_console_errors_at_both_widths);
async fn every_page_shows_without_console_errors_at_both_widths(t: TestDb) {
    let ids = some_of_everything(&t).await;
    let Some(dash) = Dash::open(&t, "every_page_shows_without_console_errors_at_both_widths", OPERATE).await else {
        return;
    };
    let job = format!("#/jobs/{}", ids[2]);
    let pages = [
        ("overview", "#/", "Overview"),
        ("jobs", "#/jobs", "Jobs"),
        ("job-failed", job.as_str(), ids[2].as_str()),
        ("failures", "#/failures", "Failures"),
        ("flow", "#/flow", "Flow"),
        ("kinds", "#/kinds", "Kinds"),
    ];
    for (width, height) in [(1280, 900), (390, 844)] {
        dash.browser.client.set_window_size(width, height).await.expect("resize");
        for (name, hash, heading) in pages {
            dash.visit(hash, heading).await;
            // Wait for the page's data, not just its heading.
            dash.browser
                .until(
                    "data",
                    "return document.querySelectorAll('#view table, #view pre, #view .card, #pause-form').length > 0;",
                )
                .await;
            if width < 1000 {
                // Nothing but a table (which scrolls in its own box) is wider than the window.
                let wide = "return [...document.querySelectorAll('body *')].filter((e) => !e.closest('.table-wrap') \
                            && e.getBoundingClientRect().right > document.documentElement.clientWidth + 1).map((e) => e.tagName + '.' + e.className);";
                let overflow = dash.browser.client.execute(wide, vec![]).await.expect("layout");
                assert_eq!(overflow, json!([]), "{name} at {width} px");
            }
            dash.screenshot(&format!("{name}-{width}")).await;
            dash.no_console_errors(&format!("{name} at {width} px")).await;
        }
    }
    // The kinds page tells each kind's failure rate.
    let probe = dash.browser.text_of("section.kind[data-kind=probe]", |_| true).await;
    assert!(probe.contains("50.0% (2 of 4 finished)"), "{probe}");
    // Keyboard: the navigation is reachable with Tab and follows with Enter.
    dash.visit("#/", "Overview").await;
    let focused = dash
        .browser
        .until(
            "a link in the navigation takes focus",
            "document.querySelector('#nav a[data-page=kinds]').focus(); return document.activeElement.textContent;",
        )
        .await;
    assert_eq!(focused, json!("Kinds"));
    dash.browser.client.active_element().await.expect("focus").send_keys("\u{E007}").await.expect("enter");
    dash.browser.text_of("#view h1", |h| h == "Kinds").await;
    dash.no_console_errors("the keyboard walk").await;
}

sqlite_only!(a_workflow_is_drawn_live_and_cancelled_from_its_page);
/// A diamond's page draws its four steps in three columns with their four edges; a step's page links to its parents
/// and to its workflow; the steps follow the workers live; cancelling from the page cancels what has not started.
async fn a_workflow_is_drawn_live_and_cancelled_from_its_page(t: TestDb) {
    let diamond = |first: u64| {
        let mut wf = outbox::Workflow::new("diamond");
        wf.step("a", &Probe { n: first });
        wf.step("b", &Probe { n: first + 1 }).after(["a"]);
        wf.step("c", &Probe { n: first + 2 }).after(["a"]);
        wf.step("d", &Probe { n: first + 3 }).after(["b", "c"]);
        wf
    };
    let enqueue = |wf: outbox::Workflow| {
        let db = t.db.clone();
        async move {
            let txn = outbox::begin(&db).await.expect("begin");
            let enqueued = outbox::enqueue_workflow(&txn, &wf).await.expect("enqueue");
            txn.commit().await.expect("commit");
            enqueued
        }
    };
    let first = enqueue(diamond(1)).await;
    let name = "a_workflow_is_drawn_live_and_cancelled_from_its_page";
    let Some(dash) = Dash::open(&t, name, OPERATE).await else { return };
    dash.visit(&format!("#/workflows/{}", first.id()), "Workflow diamond").await;
    dash.browser
        .until("four steps", "return document.querySelectorAll('#workflow-graph g[data-step]').length === 4;")
        .await;
    dash.browser
        .until("four edges", "return document.querySelectorAll('#workflow-graph line.edge').length === 4;")
        .await;
    let columns = dash
        .browser
        .client
        .execute(
            "const x = (s) => Number(document.querySelector(`#workflow-graph g[data-step='${s}'] rect`).getAttribute('x')); \
             return [x('a'), x('b'), x('c'), x('d')];",
            vec![],
        )
        .await
        .expect("columns");
    let columns: Vec<f64> = columns.as_array().expect("xs").iter().map(|v| v.as_f64().expect("x")).collect();
    assert!(columns[0] < columns[1] && columns[1] == columns[2] && columns[2] < columns[3], "{columns:?}");
    let state = |step: &str, s: &str| {
        format!("return document.querySelector(\"#workflow-graph g[data-step='{step}']\")?.dataset.state === '{s}';")
    };
    dash.browser.until("a pending", &state("a", "pending")).await;
    dash.browser.until("d waiting", &state("d", "waiting")).await;
    dash.screenshot("workflow").await;

    // A step's page: its workflow and its parents.
    let d = first.step("d").expect("d").to_owned();
    dash.visit(&format!("#/jobs/{d}"), &d).await;
    dash.browser
        .until("d's two parents", "return document.querySelectorAll(\"[data-links='Waits for'] li\").length === 2;")
        .await;
    dash.browser.click(&format!("#workflow-links a[href='#/workflows/{}']", first.id())).await;
    dash.browser.text_of("#view h1", |h| h.contains("Workflow diamond")).await;

    // Live: a worker runs the steps, and the page follows without a reload.
    dash.mark().await;
    let worker = Worker::builder(&t.db)
        .register(|_: Probe, _: outbox::JobContext| async { Ok::<_, JobError>(()) })
        .build()
        .await
        .expect("build")
        .start();
    dash.browser.until("d completed", &state("d", "completed")).await;
    dash.still_marked().await;
    worker.shutdown().await.expect("shutdown");

    // Cancelled from its page: every step of a second diamond, none of which started.
    let second = enqueue(diamond(11)).await;
    dash.visit(&format!("#/workflows/{}", second.id()), "Workflow diamond").await;
    dash.browser.click("#cancel-workflow").await;
    dash.browser.text_of("#status", |s| s.contains("Cancelled 4 steps of diamond")).await;
    dash.browser.until("d cancelled", &state("d", "cancelled")).await;
    dash.no_console_errors("the workflow page").await;
}
