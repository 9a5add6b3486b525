//! What a kind declares of flow control: its rate, the key its jobs are rate limited and shared out by, and what
//! each job costs; and the key and cost of one payload.

use serde_json::Value;

use super::sequence::Template;
use crate::error::pointer_token;
use crate::flow::Rate;
use crate::job::Violation;

/// A kind's flow options as written (a typed kind's `KindOpts`, or a recorded kind's columns).
#[derive(Debug, Clone, Default)]
pub(super) struct FlowSpec {
    pub(super) rate: Option<String>,
    pub(super) rate_key: Option<String>,
    pub(super) fair: Option<String>,
    pub(super) cost: Option<String>,
}

/// A kind's flow options, checked.
#[derive(Debug, Clone, Default)]
pub(super) struct KindFlow {
    pub(super) rate: Option<Rate>,
    /// The one key template of `rate_key` and `fair`.
    pub(super) key: Option<Template>,
    pub(super) rate_per_key: bool,
    pub(super) fair: bool,
    pub(super) cost: Option<Cost>,
    /// The options as written, to record.
    pub(super) written: FlowWritten,
}

/// The options as written, for the kinds table.
#[derive(Debug, Clone, Default)]
pub(super) struct FlowWritten {
    pub(super) rate: Option<String>,
    pub(super) rate_key: Option<String>,
    pub(super) fair: Option<String>,
    pub(super) cost: Option<String>,
}

/// What one job of a kind costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Cost {
    Fixed(u32),
    /// The whole number in this top-level payload field.
    Field(String),
}

impl KindFlow {
    /// Checks `spec`; `is_property` says whether a field is a property of the payload schema.
    pub(super) fn build(spec: FlowSpec, is_property: &dyn Fn(&str) -> bool) -> Result<KindFlow, String> {
        let rate = spec.rate.as_deref().map(str::parse::<Rate>).transpose().map_err(|e| e.to_string())?;
        let template = |what: &str, text: &Option<String>| -> Result<Option<Template>, String> {
            let Some(text) = text else { return Ok(None) };
            let t = Template::parse(text).map_err(|e| e.replace("sequence template", &format!("{what} template")))?;
            if let Some(field) = t.fields().find(|f| !is_property(f)) {
                return Err(format!(
                    "the {what} template `{text}` reads `{field}`, which is not a property of the payload schema"
                ));
            }
            Ok(Some(t))
        };
        let rate_key = template("rate key", &spec.rate_key)?;
        let fair = template("fairness key", &spec.fair)?;
        if let (Some(r), Some(f)) = (&rate_key, &fair)
            && r.as_str() != f.as_str()
        {
            return Err(format!(
                "rate_key `{}` and fair `{}` differ: a job has one flow key, so they must be the same template",
                r.as_str(),
                f.as_str()
            ));
        }
        if rate_key.is_some() && rate.is_none() {
            return Err(format!(
                "rate_key `{}` is set without a rate: set `rate` too (a key alone can still be paused: use `fair` for \
                 fair share)",
                spec.rate_key.as_deref().unwrap_or_default()
            ));
        }
        let cost = match spec.cost.as_deref() {
            None => None,
            Some(text) => Some(parse_cost(text, is_property)?),
        };
        Ok(KindFlow {
            rate,
            rate_per_key: rate_key.is_some(),
            fair: fair.is_some(),
            key: rate_key.or(fair),
            cost,
            written: FlowWritten { rate: rate.map(|r| r.to_string()), ..FlowWritten::from(&spec) },
        })
    }

    /// The flow key of `payload`: `Ok(None)` when the kind has none.
    pub(super) fn key(&self, payload: &Value) -> Result<Option<String>, Violation> {
        let Some(t) = &self.key else { return Ok(None) };
        let what = if self.fair { "fairness key" } else { "rate key" };
        let key = t.render(payload).map_err(|mut v| {
            v.message = v.message.replace("sequence key", what);
            v
        })?;
        if key.is_empty() {
            return Err(Violation {
                path: t.fields().next().map(|f| format!("/{}", pointer_token(f))).unwrap_or_default(),
                message: format!("gives an empty {what} under `{}`", t.as_str()),
            });
        }
        Ok(Some(key))
    }

    /// What `payload` costs: `Ok(None)` for the default of 1.
    pub(super) fn cost(&self, payload: &Value) -> Result<Option<u32>, Violation> {
        match &self.cost {
            None => Ok(None),
            Some(Cost::Fixed(n)) => Ok(Some(*n)),
            Some(Cost::Field(field)) => {
                let value = payload.get(field.as_str());
                match value.and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok()) {
                    Some(n) => Ok(Some(n)),
                    None => Err(Violation {
                        path: format!("/{}", pointer_token(field)),
                        message: format!(
                            "must be a whole number from 0 to {} to be the job's cost, not {}",
                            u32::MAX,
                            value.map_or_else(|| "missing".to_owned(), Value::to_string)
                        ),
                    }),
                }
            }
        }
    }
}

impl From<&FlowSpec> for FlowWritten {
    fn from(spec: &FlowSpec) -> Self {
        FlowWritten {
            rate: spec.rate.clone(),
            rate_key: spec.rate_key.clone(),
            fair: spec.fair.clone(),
            cost: spec.cost.clone(),
        }
    }
}

/// A cost as written: a whole number, or `{field}`.
fn parse_cost(text: &str, is_property: &dyn Fn(&str) -> bool) -> Result<Cost, String> {
    let t = text.trim();
    if let Some(field) = t.strip_prefix('{').and_then(|f| f.strip_suffix('}')) {
        if field.is_empty() || field.contains(['{', '}', ':']) {
            return Err(format!("cost `{text}`: write a whole number or one field as `{{field}}`"));
        }
        if !is_property(field) {
            return Err(format!("cost `{text}` reads `{field}`, which is not a property of the payload schema"));
        }
        return Ok(Cost::Field(field.to_owned()));
    }
    match t.parse::<u32>() {
        Ok(n) => Ok(Cost::Fixed(n)),
        Err(_) => Err(format!(
            "cost `{text}` is neither a whole number from 0 to {} nor a field written `{{field}}`",
            u32::MAX
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn build(spec: FlowSpec) -> Result<KindFlow, String> {
        KindFlow::build(spec, &|f| ["tenant", "tokens"].contains(&f))
    }

    #[test]
    fn keys_and_costs_come_from_the_payload() {
        let flow = build(FlowSpec {
            rate: Some("10/s".into()),
            rate_key: Some("t:{tenant}".into()),
            cost: Some("{tokens}".into()),
            ..FlowSpec::default()
        })
        .expect("flow");
        let p = json!({"tenant": "acme", "tokens": 40});
        assert_eq!(flow.key(&p).expect("key").as_deref(), Some("t:acme"));
        assert_eq!(flow.cost(&p).expect("cost"), Some(40));
        let v = flow.key(&json!({"tokens": 1})).expect_err("missing");
        assert_eq!(v.path, "/tenant");
        assert!(v.message.contains("rate key `t:{tenant}`"), "{}", v.message);
        for bad in [json!(-1), json!("12"), json!(1.5), json!(null)] {
            let v = flow.cost(&json!({"tenant": "a", "tokens": bad})).expect_err("bad cost");
            assert_eq!(v.path, "/tokens");
            assert!(v.message.contains("must be a whole number"), "{}", v.message);
        }
    }

    #[test]
    fn bad_options_are_named() {
        for (spec, says) in [
            (FlowSpec { rate: Some("0/1m".into()), ..FlowSpec::default() }, "the amount must be at least 1"),
            (FlowSpec { fair: Some("{nope}".into()), ..FlowSpec::default() }, "reads `nope`"),
            (
                FlowSpec {
                    rate: Some("1/s".into()),
                    rate_key: Some("{tenant}".into()),
                    fair: Some("x{tenant}".into()),
                    ..FlowSpec::default()
                },
                "must be the same template",
            ),
            (FlowSpec { rate_key: Some("{tenant}".into()), ..FlowSpec::default() }, "without a rate"),
            (FlowSpec { cost: Some("-3".into()), ..FlowSpec::default() }, "neither a whole number"),
            (FlowSpec { cost: Some("{nope}".into()), ..FlowSpec::default() }, "reads `nope`"),
        ] {
            let err = build(spec).expect_err(says);
            assert!(err.contains(says), "{err}");
        }
    }
}
