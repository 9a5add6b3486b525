//! `outbox`: operate an outbox job queue from a terminal.
//!
//! Answers "what is outstanding, what failed and why, is anything stuck, how long do jobs take, are there
//! duplicates, what ran lately" without SQL (`stats`, `list`, `get`, `queues`), acts on the answers
//! (`retry`, `cancel`, `purge`, `enqueue`), and runs a worker with the built-in handlers (`work`) and the
//! filesystem reconciler (`reconcile`), and serves all of it as a JSON API (`serve`). Run `outbox --help` for the
//! exit codes.

mod cli;
mod commands;
mod db;
mod fail;
mod handover;
mod kinds;
mod logs;
mod payload;
mod render;

#[cfg(test)]
mod fuzz_tests;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::Cli;
use crate::render::Format;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return cli::usage_error(e),
    };
    let format = cli.format;
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(fail::code::ERROR);
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            if format == Format::Json {
                let doc = serde_json::json!({
                    "error": failure.message,
                    "hint": failure.hint,
                    "exitCode": failure.code,
                });
                eprintln!("{doc}");
            } else {
                eprintln!("{failure}");
            }
            ExitCode::from(failure.code)
        }
    }
}
