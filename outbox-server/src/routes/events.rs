//! `GET /api/events`: the event feed as Server-Sent Events. Each event's `id` is its feed position, so a
//! client that reconnects with `Last-Event-ID` (or `?after=`) gets exactly what it missed; without either,
//! the stream starts with what is committed from now on.

use std::collections::VecDeque;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use outbox::{FeedEvent, JobEventKind, ops};
use serde::Deserialize;
use utoipa::IntoParams;

use super::doc::ErrorBody;
use super::{AppState, Reply, given, param_error};
use crate::api_error::ApiError;
use crate::extract::Query;
use crate::feed::Tail;

#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct EventParams {
    /// Only this kind.
    kind: Option<String>,
    /// Only this queue.
    queue: Option<String>,
    /// Only this job.
    job: Option<String>,
    /// Only these events, comma-separated (`completed,failed`).
    event: Option<String>,
    /// Start after this event id, for clients that cannot send `Last-Event-ID`.
    after: Option<String>,
}

/// Which events a stream sends.
#[derive(Clone, Default)]
struct Filter {
    kind: Option<String>,
    queue: Option<String>,
    job: Option<String>,
    events: Option<Vec<JobEventKind>>,
}

impl Filter {
    fn matches(&self, e: &FeedEvent) -> bool {
        self.kind.as_ref().is_none_or(|k| *k == e.kind)
            && self.queue.as_ref().is_none_or(|q| *q == e.queue)
            && self.job.as_ref().is_none_or(|j| *j == e.job_id)
            && self.events.as_ref().is_none_or(|es| es.contains(&e.event))
    }
}

/// The event feed as Server-Sent Events: each event's `id` is its feed position, its `event` the transition
/// and its `data` a JSON `FeedEvent`. Reconnect with `Last-Event-ID` (or `after`) to get exactly what was
/// missed; without either the stream starts with what is committed from now on.
#[utoipa::path(get, path = "/api/events", tag = "events", params(EventParams,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id")),
    security(("token" = [])),
    responses((status = 200, description = "Server-Sent Events: `id` the feed position, `event` the transition, `data` one JSON `FeedEvent`", body = String, content_type = "text/event-stream"),
        (status = 400, description = "A filter or resume position is invalid", body = ErrorBody)))]
pub(super) async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(params): Query<EventParams>,
) -> Reply {
    let events = given(params.event)
        .map(|list| {
            list.split(',')
                .map(|name| name.trim().parse::<JobEventKind>().map_err(|e| param_error("event", &e)))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?;
    let filter = Filter { kind: given(params.kind), queue: given(params.queue), job: given(params.job), events };
    let resume = match headers.get("last-event-id") {
        Some(value) => Some(
            value
                .to_str()
                .map_err(|_| ApiError::invalid("header `Last-Event-ID`: not visible ASCII"))?
                .trim()
                .to_owned(),
        ),
        None => given(params.after),
    };
    let db = state.db.clone();
    let poll = state.events_poll;
    let tail = match resume.filter(|id| !id.is_empty()) {
        Some(id) => {
            // A position this database cannot have written is refused now, not after the stream began.
            ops::feed(&db, &id, 1).await.map_err(|e| match e {
                outbox::Error::Invalid(m) => {
                    ApiError::invalid(format!("header `Last-Event-ID` or parameter `after`: {m}"))
                }
                e => e.into(),
            })?;
            Tail::after(db, id, poll)
        }
        None => Tail::after(db.clone(), ops::feed_head(&db).await?, poll),
    };
    let stream =
        futures_util::stream::unfold((tail, VecDeque::new(), filter), |(mut tail, mut buf, filter)| async move {
            loop {
                while let Some(e) = buf.pop_front() {
                    if filter.matches(&e) {
                        let event = Event::default().id(e.id.clone()).event(e.event.as_str()).json_data(&e);
                        return Some((event, (tail, buf, filter)));
                    }
                }
                buf.extend(tail.next_page().await);
            }
        });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}
