//! The database engine a row runs on, and how durable its commits are.

/// The database engine of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub(crate) enum Backend {
    Sqlite,
    #[value(alias = "postgresql")]
    Postgres,
}

impl Backend {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// How durable a commit is: SQLite's `synchronous` (FULL, NORMAL), PostgreSQL's `synchronous_commit`
/// (on, off). The weaker setting may lose the last commits on power loss (PostgreSQL: on a server crash too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub(crate) enum SyncMode {
    Full,
    Normal,
}

impl SyncMode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            SyncMode::Full => "FULL",
            SyncMode::Normal => "NORMAL",
        }
    }

    /// The setting's own name on `backend`.
    pub(crate) fn label(self, backend: Backend) -> &'static str {
        match (backend, self) {
            (Backend::Sqlite, _) => self.name(),
            (Backend::Postgres, SyncMode::Full) => "on",
            (Backend::Postgres, SyncMode::Normal) => "off",
        }
    }

    pub(crate) fn is_full(self) -> bool {
        self == SyncMode::Full
    }
}
