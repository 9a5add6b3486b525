//! Every Rust block of the workspace's README.md and of the pages under docs/, compiled and run as doctests
//! of a crate whose only dependencies are `outbox`, `serde` and `tokio` (the guides on files, AWS and the
//! HTTP API use the dev-dependencies too), so the documentation cannot drift from the API.
//! `tests/pages.rs` fails when a page under docs/ is missing here.

#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct Readme;

#[doc = include_str!("../../docs/README.md")]
#[cfg(doctest)]
pub struct DocsIndex;

#[doc = include_str!("../../docs/benchmarks.md")]
#[cfg(doctest)]
pub struct Benchmarks;

#[doc = include_str!("../../docs/development.md")]
#[cfg(doctest)]
pub struct Development;

#[doc = include_str!("../../docs/guides/enqueue-and-transactions.md")]
#[cfg(doctest)]
pub struct GuidesEnqueueAndTransactions;

#[doc = include_str!("../../docs/guides/files-and-aws.md")]
#[cfg(doctest)]
pub struct GuidesFilesAndAws;

#[doc = include_str!("../../docs/guides/flow-control.md")]
#[cfg(doctest)]
pub struct GuidesFlowControl;

#[doc = include_str!("../../docs/guides/getting-started.md")]
#[cfg(doctest)]
pub struct GuidesGettingStarted;

#[doc = include_str!("../../docs/guides/kinds-and-payloads.md")]
#[cfg(doctest)]
pub struct GuidesKindsAndPayloads;

#[doc = include_str!("../../docs/guides/operating.md")]
#[cfg(doctest)]
pub struct GuidesOperating;

#[doc = include_str!("../../docs/guides/postgres.md")]
#[cfg(doctest)]
pub struct GuidesPostgres;

#[doc = include_str!("../../docs/guides/remote-and-shell-workers.md")]
#[cfg(doctest)]
pub struct GuidesRemoteAndShellWorkers;

#[doc = include_str!("../../docs/guides/sequences-and-limits.md")]
#[cfg(doctest)]
pub struct GuidesSequencesAndLimits;

#[doc = include_str!("../../docs/guides/sqlite.md")]
#[cfg(doctest)]
pub struct GuidesSqlite;

#[doc = include_str!("../../docs/guides/subjects-entities-and-traces.md")]
#[cfg(doctest)]
pub struct GuidesSubjectsEntitiesAndTraces;

#[doc = include_str!("../../docs/guides/testing.md")]
#[cfg(doctest)]
pub struct GuidesTesting;

#[doc = include_str!("../../docs/guides/time.md")]
#[cfg(doctest)]
pub struct GuidesTime;

#[doc = include_str!("../../docs/guides/troubleshooting.md")]
#[cfg(doctest)]
pub struct GuidesTroubleshooting;

#[doc = include_str!("../../docs/guides/workers-and-handlers.md")]
#[cfg(doctest)]
pub struct GuidesWorkersAndHandlers;

#[doc = include_str!("../../docs/guides/workflows.md")]
#[cfg(doctest)]
pub struct GuidesWorkflows;

#[doc = include_str!("../../docs/internals/README.md")]
#[cfg(doctest)]
pub struct InternalsReadme;

#[doc = include_str!("../../docs/internals/lifecycle.md")]
#[cfg(doctest)]
pub struct InternalsLifecycle;

#[doc = include_str!("../../docs/internals/mariadb.md")]
#[cfg(doctest)]
pub struct InternalsMariadb;

#[doc = include_str!("../../docs/internals/postgres-write-path.md")]
#[cfg(doctest)]
pub struct InternalsPostgresWritePath;

#[doc = include_str!("../../docs/internals/storage.md")]
#[cfg(doctest)]
pub struct InternalsStorage;

#[doc = include_str!("../../docs/reference/cli.md")]
#[cfg(doctest)]
pub struct ReferenceCli;

#[doc = include_str!("../../docs/reference/configuration.md")]
#[cfg(doctest)]
pub struct ReferenceConfiguration;

#[doc = include_str!("../../docs/reference/http-api.md")]
#[cfg(doctest)]
pub struct ReferenceHttpApi;

#[doc = include_str!("../../docs/reference/metrics.md")]
#[cfg(doctest)]
pub struct ReferenceMetrics;
