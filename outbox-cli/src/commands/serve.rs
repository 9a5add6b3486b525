//! `serve`: the HTTP API until Ctrl-C or SIGTERM.

use outbox_server::{ServerOpts, Token};

use crate::cli::ServeArgs;
use crate::db;
use crate::fail::{Failure, Result, code};
use crate::kinds;

/// The variable holding tokens, comma-separated `role:secret`.
const TOKENS_VAR: &str = "OUTBOX_TOKENS";

pub(super) async fn serve(database_url: &str, args: ServeArgs) -> Result<u8> {
    use tokio::signal::unix::{SignalKind, signal};
    let opts = opts(&args, std::env::var_os(TOKENS_VAR))?;
    // Refused before anything listens or the database is opened: nothing is exposed, even for a moment.
    opts.check_listen(args.listen).map_err(|e| {
        Failure::from(e)
            .hint(format!("give tokens in {TOKENS_VAR} (see `outbox serve --help`), or --listen 127.0.0.1:PORT"))
    })?;
    // Listen before waiting for the database, so an early Ctrl-C or SIGTERM stops the command gracefully.
    let listen = |kind| signal(kind).map_err(|e| Failure::error(format!("cannot listen for signals: {e}")));
    let (mut term, mut int) = (listen(SignalKind::terminate())?, listen(SignalKind::interrupt())?);
    let db = tokio::select! {
        db = db::open(database_url, false, true) => db?,
        _ = term.recv() => return Ok(code::OK),
        _ = int.recv() => return Ok(code::OK),
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| Failure::error(format!("cannot listen on {}: {e}", args.listen)))?;
    let stop = async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: finishing requests in flight"),
            _ = int.recv() => tracing::info!("interrupted: finishing requests in flight"),
        }
    };
    outbox_server::serve(listener, db, opts, stop).await?;
    Ok(code::OK)
}

/// The server's options from the arguments and the tokens variable's value. Errors name where a bad token
/// came from, never its secret.
pub(crate) fn opts(args: &ServeArgs, tokens_var: Option<std::ffi::OsString>) -> Result<ServerOpts> {
    let mut opts = ServerOpts::new().kinds(kinds::built_in()?).request_timeout(args.request_timeout);
    if args.request_timeout.is_zero() {
        return Err(Failure::invalid("--request-timeout must be longer than 0s"));
    }
    if let Some(value) = tokens_var {
        let value = value.into_string().map_err(|_| Failure::invalid(format!("{TOKENS_VAR} is not valid UTF-8")))?;
        let entries = value.split(',').map(str::trim).filter(|t| !t.is_empty());
        for (i, entry) in entries.enumerate() {
            let token: Token =
                entry.parse().map_err(|e| Failure::invalid(format!("{TOKENS_VAR}, token {}: {e}", i + 1)))?;
            opts = opts.token(token);
        }
    }
    for (i, entry) in args.tokens.iter().enumerate() {
        let token: Token = entry.parse().map_err(|e| Failure::invalid(format!("--token number {}: {e}", i + 1)))?;
        opts = opts.token(token);
    }
    for origin in &args.cors_origins {
        opts = opts.cors_origin(origin).map_err(|e| Failure::invalid(format!("--cors-origin: {e}")))?;
    }
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(tokens: &[&str]) -> ServeArgs {
        ServeArgs {
            listen: "0.0.0.0:8080".parse().expect("addr"),
            tokens: tokens.iter().map(|t| (*t).to_owned()).collect(),
            cors_origins: Vec::new(),
            request_timeout: std::time::Duration::from_secs(30),
        }
    }

    #[test]
    fn tokens_come_from_the_variable_and_the_flags() {
        let opts = opts(&args(&["read:flag-secret"]), Some(" operate:a , work:b,".into())).expect("opts");
        let shown = format!("{opts:?}");
        assert!(shown.contains("Operate") && shown.contains("Work") && shown.contains("Read"), "{shown}");
        assert!(opts.check_listen("0.0.0.0:1".parse().expect("addr")).is_ok());
        let open = super::opts(&args(&[]), None).expect("opts");
        let refused = open.check_listen("0.0.0.0:1".parse().expect("addr")).expect_err("no tokens");
        assert!(refused.to_string().contains("0.0.0.0:1"), "{refused}");
    }

    #[test]
    fn bad_tokens_are_named_by_place_never_by_secret() {
        for (flags, var, place) in [
            (vec!["admin:hunter2-secret"], None, "--token number 1"),
            (vec![], Some("read:ok,hunter2-secret"), "OUTBOX_TOKENS, token 2"),
            (vec!["read:"], None, "--token number 1"),
        ] {
            let failure = opts(&args(&flags), var.map(Into::into)).expect_err("bad token");
            assert!(failure.message.contains(place), "{}", failure.message);
            assert!(!failure.message.contains("hunter2"), "the secret is not echoed: {}", failure.message);
        }
    }
}
