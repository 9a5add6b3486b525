//! What a claim of a flow-controlled kind takes: written once, for every engine. The engine reads the kind's flow
//! state and its candidate jobs inside the claim's transaction (where no other claimer of the kind can act), asks
//! [`plan`] which to take, claims them and writes back the state the plan returns.
//!
//! - A **rate** is a token bucket (`rate.rs`): a job is taken while its bucket covers its cost, the kind's bucket or,
//!   for a kind limited per key, its key's. A job that does not fit stops its key (or the kind): what follows
//!   waits its turn, so a costly job is never overtaken for good by cheap ones.
//! - **Fair share** is stride scheduling: each key has a pass (virtual time) that a claim advances by
//!   `1 / weight`, and the next job comes from the key whose pass is lowest. A key with no row, or idle while the
//!   others ran, starts at the kind's clock (the pass of the last job taken), so it is served from its first claim
//!   without being owed the time it was away; a lone key takes every slot.
//! - A **pause or hold** of a key leaves its jobs where they are; the kind's and its queues' are applied before.

use std::collections::HashMap;

use super::rate::{Bucket, Rate};

/// How a kind's claims are controlled.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FlowKind {
    pub(crate) kind: String,
    /// Running jobs at most, fleet-wide.
    pub(crate) concurrency: Option<u32>,
    pub(crate) rate: Option<Rate>,
    /// The rate applies to each key apart (`rate_key`), not to the kind as a whole.
    pub(crate) rate_per_key: bool,
    /// Claims share out between keys by weight.
    pub(crate) fair: bool,
}

impl FlowKind {
    /// Whether claims read the kind's jobs key by key.
    pub(crate) fn keyed(&self) -> bool {
        self.fair || (self.rate_per_key && self.rate.is_some())
    }

    /// Whether fair share is all that orders the kind's jobs (no rate): when one key has jobs (it is "lone"),
    /// the claim asks whether a second one has.
    pub(crate) fn may_be_lone(&self) -> bool {
        self.fair && self.rate.is_none()
    }

    /// Whether the kind needs the chosen claim (a rate, fair share between keys, a paused key) rather than the
    /// plain claim of its kind (under its limit when it has one). Fair share orders nothing when one key has
    /// jobs (`lone`): its jobs are claimed as a plain kind's are, and its pass is left as it was (a key that
    /// comes later starts level with it, as a pass behind the kind's clock counts from the clock).
    pub(crate) fn chosen(&self, pauses: &Pauses, lone: bool) -> bool {
        self.rate.is_some() || (self.keyed() && !lone) || pauses.keys.contains_key(&self.kind)
    }
}

/// The flow state of one kind as its claim reads it.
#[derive(Debug, Clone, Default)]
pub(crate) struct FlowState {
    /// Keys paused or held, with the end of a hold (`None`: until resumed).
    pub(crate) paused_keys: HashMap<String, Option<i64>>,
    /// Stored buckets: the kind's under the empty key, or one per key.
    pub(crate) buckets: HashMap<String, Bucket>,
    /// Fair share: each key's weight and pass.
    pub(crate) fair: HashMap<String, (u32, f64)>,
    /// The kind's fair-share clock.
    pub(crate) clock: f64,
}

/// The pauses and holds in force, as a claim applies them; each engine reads the rows and adds them here.
#[derive(Debug, Default)]
pub(crate) struct Pauses {
    /// Paused queues.
    pub(crate) queues: Vec<String>,
    /// Paused or held kinds (all of them).
    pub(crate) kinds: Vec<String>,
    /// Paused or held keys, by kind, with the end of a hold.
    pub(crate) keys: HashMap<String, HashMap<String, Option<i64>>>,
    /// The earliest end of a hold: the worker claims again then.
    pub(crate) wake_at: Option<i64>,
}

impl Pauses {
    /// Adds the row `scope`, `name`, `key` (empty: all of it), ending at `ends_at` (`None`: until resumed).
    pub(crate) fn add(&mut self, scope: &str, name: String, key: String, ends_at: Option<i64>) {
        if let Some(at) = ends_at {
            self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
        }
        match (scope, key.is_empty()) {
            ("queue", _) => self.queues.push(name),
            (_, true) => self.kinds.push(name),
            (_, false) => {
                self.keys.entry(name).or_default().insert(key, ends_at);
            }
        }
    }
}

/// A job the claim may take: its key (for a keyed kind) and its cost. Candidates come in claim order, each key's
/// in its own order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) key: Option<String>,
    pub(crate) cost: u64,
}

/// What a claim takes, and what it leaves written.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Plan {
    /// Indexes into the candidates, in the order taken.
    pub(crate) take: Vec<usize>,
    /// Buckets drawn from, by key (empty: the kind's).
    pub(crate) buckets: Vec<(String, Bucket)>,
    /// Fair-share passes moved, by key.
    pub(crate) passes: Vec<(String, f64)>,
    /// The fair-share clock after the claim.
    pub(crate) clock: f64,
    /// When a job left behind by a rate or a hold may be taken, at the earliest: the worker claims again then.
    pub(crate) wake_at: Option<i64>,
}

/// Which of `candidates` a claim of `room` jobs of `flow` takes at `now`, given `state`.
pub(crate) fn plan(flow: &FlowKind, state: &FlowState, candidates: &[Candidate], room: usize, now: i64) -> Plan {
    let mut order: Vec<String> = Vec::new();
    let mut queues: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, c) in candidates.iter().enumerate() {
        let key = if flow.keyed() { c.key.clone().unwrap_or_default() } else { String::new() };
        let q = queues.entry(key.clone()).or_default();
        if q.is_empty() {
            order.push(key);
        }
        q.push(i);
    }
    let mut picked = Picker::new(flow, state, now);
    let mut heads: HashMap<&str, usize> = HashMap::new();
    let mut stopped: HashMap<&str, bool> = HashMap::new();
    let mut take = Vec::new();
    while take.len() < room {
        // The next job: the head of the key with the lowest pass when fair, else the earliest head in claim order.
        let mut best: Option<(&str, usize)> = None;
        for key in &order {
            if stopped.get(key.as_str()).copied().unwrap_or(false) {
                continue;
            }
            let at = heads.get(key.as_str()).copied().unwrap_or(0);
            let Some(&i) = queues[key].get(at) else { continue };
            let better = match best {
                None => true,
                Some((b, j)) => {
                    if flow.fair {
                        picked.pass(key) < picked.pass(b) - 1e-12
                    } else {
                        i < j
                    }
                }
            };
            if better {
                best = Some((key.as_str(), i));
            }
        }
        let Some((key, i)) = best else { break };
        if let Some(until) = picked.paused(key) {
            stopped.insert(key, true);
            if let Some(until) = until {
                picked.wake(until);
            }
            continue;
        }
        let cost = candidates[i].cost;
        if !picked.fits(key, cost) {
            stopped.insert(key, true);
            if !flow.keyed() || flow.rate_per_key {
                continue;
            }
            // The kind's bucket is shared: nothing else fits either once the lowest-pass key's head does not.
            break;
        }
        picked.take(key, cost);
        take.push(i);
        *heads.entry(key).or_insert(0) += 1;
    }
    picked.finish(take)
}

/// The plan's running state.
struct Picker<'a> {
    flow: &'a FlowKind,
    state: &'a FlowState,
    now: i64,
    buckets: HashMap<String, Bucket>,
    passes: HashMap<String, f64>,
    clock: f64,
    wake_at: Option<i64>,
}

impl<'a> Picker<'a> {
    fn new(flow: &'a FlowKind, state: &'a FlowState, now: i64) -> Self {
        Picker { flow, state, now, buckets: HashMap::new(), passes: HashMap::new(), clock: state.clock, wake_at: None }
    }

    fn paused(&self, key: &str) -> Option<Option<i64>> {
        if key.is_empty() {
            return None;
        }
        self.state.paused_keys.get(key).copied().filter(|until| until.is_none_or(|t| t > self.now))
    }

    fn wake(&mut self, at: i64) {
        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
    }

    /// The key's pass: its stored one, brought up to the clock.
    fn pass(&self, key: &str) -> f64 {
        if let Some(p) = self.passes.get(key) {
            return *p;
        }
        self.state.fair.get(key).map_or(self.clock, |(_, p)| p.max(self.clock))
    }

    fn weight(&self, key: &str) -> f64 {
        f64::from(self.state.fair.get(key).map_or(1, |(w, _)| (*w).max(1)))
    }

    /// The bucket a job of `key` draws from, and its rate; `None` without a rate.
    fn bucket_key(&self, key: &str) -> Option<(String, Rate)> {
        let rate = self.flow.rate?;
        Some((if self.flow.rate_per_key { key.to_owned() } else { String::new() }, rate))
    }

    fn bucket(&self, name: &str, rate: &Rate) -> Bucket {
        self.buckets
            .get(name)
            .or_else(|| self.state.buckets.get(name))
            .copied()
            .unwrap_or_else(|| Bucket::full(rate, self.now))
    }

    fn fits(&mut self, key: &str, cost: u64) -> bool {
        let Some((name, rate)) = self.bucket_key(key) else { return true };
        let bucket = self.bucket(&name, &rate);
        if bucket.allows(&rate, self.now, cost) {
            return true;
        }
        self.wake(bucket.ready_at(&rate, self.now, cost));
        false
    }

    fn take(&mut self, key: &str, cost: u64) {
        if let Some((name, rate)) = self.bucket_key(key) {
            let mut bucket = self.bucket(&name, &rate);
            bucket.take(&rate, self.now, cost);
            self.buckets.insert(name, bucket);
        }
        if self.flow.fair {
            let start = self.pass(key);
            self.clock = self.clock.max(start);
            let next = start + 1.0 / self.weight(key);
            self.passes.insert(key.to_owned(), next);
        }
    }

    fn finish(self, take: Vec<usize>) -> Plan {
        let mut buckets: Vec<(String, Bucket)> = self.buckets.into_iter().collect();
        buckets.sort_by(|a, b| a.0.cmp(&b.0));
        let mut passes: Vec<(String, f64)> = self.passes.into_iter().collect();
        passes.sort_by(|a, b| a.0.cmp(&b.0));
        Plan { take, buckets, passes, clock: self.clock, wake_at: self.wake_at }
    }
}

/// How many jobs of each key a claim of `room` would take if every key had jobs enough, each of cost 1: what to
/// read of each key's jobs (a claim reads no more of a key than it can take); and when a key left out (its rate
/// spent, or held) may be taken.
pub(crate) fn quotas(
    flow: &FlowKind,
    state: &FlowState,
    keys: &[String],
    room: usize,
    now: i64,
) -> (Vec<(String, usize)>, Option<i64>) {
    let mut candidates = Vec::with_capacity(keys.len() * room);
    for _ in 0..room {
        for key in keys {
            candidates.push(Candidate { key: Some(key.clone()), cost: 1 });
        }
    }
    let plan = plan(flow, state, &candidates, room, now);
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for i in plan.take {
        *counts.entry(candidates[i].key.as_deref().unwrap_or_default()).or_insert(0) += 1;
    }
    (keys.iter().filter_map(|k| counts.get(k.as_str()).map(|n| (k.clone(), *n))).collect(), plan.wake_at)
}

impl Plan {
    /// Also wake at `at`.
    pub(crate) fn wake_too(&mut self, at: Option<i64>) {
        if let Some(at) = at {
            self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(rate: Option<&str>, per_key: bool, fair: bool) -> FlowKind {
        FlowKind {
            kind: "k".into(),
            concurrency: None,
            rate: rate.map(|r| r.parse().expect("rate")),
            rate_per_key: per_key,
            fair,
        }
    }

    fn jobs(keys: &[(&str, usize)]) -> Vec<Candidate> {
        let mut out = Vec::new();
        for (key, n) in keys {
            for _ in 0..*n {
                out.push(Candidate { key: Some((*key).into()), cost: 1 });
            }
        }
        out
    }

    fn keys_of(c: &[Candidate], plan: &Plan) -> String {
        plan.take.iter().map(|i| c[*i].key.clone().unwrap_or_default()).collect::<Vec<_>>().join("")
    }

    #[test]
    fn a_kind_rate_takes_what_its_bucket_holds_and_says_when_to_come_back() {
        let f = flow(Some("10/s burst 3"), false, false);
        let c = jobs(&[("a", 10)]);
        let p = plan(&f, &FlowState::default(), &c, 8, 0);
        assert_eq!(p.take, [0, 1, 2]);
        assert_eq!(p.wake_at, Some(100));
        let state = FlowState { buckets: p.buckets.into_iter().collect(), ..FlowState::default() };
        let p = plan(&f, &state, &c, 8, 50);
        assert!(p.take.is_empty());
        assert_eq!(p.wake_at, Some(100));
        assert_eq!(plan(&f, &state, &c, 8, 250).take, [0, 1]);
    }

    #[test]
    fn costs_count_and_a_costly_head_is_not_overtaken() {
        let f = flow(Some("100/s"), false, false);
        let c = vec![
            Candidate { key: None, cost: 60 },
            Candidate { key: None, cost: 60 },
            Candidate { key: None, cost: 1 },
        ];
        let p = plan(&f, &FlowState::default(), &c, 10, 0);
        assert_eq!(p.take, [0]);
        assert_eq!(p.wake_at, Some(200));
    }

    #[test]
    fn a_rate_per_key_gives_each_key_its_own_bucket() {
        let f = flow(Some("2/s"), true, false);
        let c = jobs(&[("a", 5), ("b", 5)]);
        let p = plan(&f, &FlowState::default(), &c, 10, 0);
        assert_eq!(keys_of(&c, &p), "aabb");
        assert_eq!(p.buckets.len(), 2);
    }

    #[test]
    fn fair_share_alternates_by_weight_and_serves_a_late_key_at_once() {
        let f = flow(None, false, true);
        let c = jobs(&[("a", 20), ("b", 20)]);
        assert_eq!(keys_of(&c, &plan(&f, &FlowState::default(), &c, 6, 0)), "ababab");
        let mut state = FlowState::default();
        state.fair.insert("b".into(), (3, 0.0));
        assert_eq!(keys_of(&c, &plan(&f, &state, &c, 8, 0)), "abbbabbb");
        // `a` ran alone for a while: its pass and the clock are at 50. `b` arrives with no row, or an old one,
        // and alternates with `a` from the first claim, owed nothing for the time it was away.
        let mut state = FlowState { clock: 50.0, ..FlowState::default() };
        state.fair.insert("a".into(), (1, 50.0));
        state.fair.insert("b".into(), (1, 3.0));
        let p = plan(&f, &state, &c, 6, 0);
        assert_eq!(keys_of(&c, &p), "ababab");
        // A lone key takes every slot.
        let lone = jobs(&[("a", 20)]);
        assert_eq!(plan(&f, &FlowState::default(), &lone, 10, 0).take.len(), 10);
    }

    #[test]
    fn a_held_key_waits_and_the_others_go_on() {
        let f = flow(None, false, true);
        let c = jobs(&[("a", 3), ("b", 3)]);
        let mut state = FlowState::default();
        state.paused_keys.insert("a".into(), Some(500));
        let p = plan(&f, &state, &c, 6, 0);
        assert_eq!(keys_of(&c, &p), "bbb");
        assert_eq!(p.wake_at, Some(500));
        assert_eq!(plan(&f, &state, &c, 6, 500).take.len(), 6);
        state.paused_keys.insert("a".into(), None);
        assert_eq!(plan(&f, &state, &c, 6, 10_000).wake_at, None);
    }

    #[test]
    fn quotas_read_no_more_of_a_key_than_a_claim_takes() {
        let f = flow(None, false, true);
        let keys = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let mut state = FlowState::default();
        state.fair.insert("c".into(), (2, 0.0));
        let (q, _) = quotas(&f, &state, &keys, 8, 0);
        assert_eq!(q, [("a".to_owned(), 2), ("b".to_owned(), 2), ("c".to_owned(), 4)]);
    }
}
