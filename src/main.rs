//! The `latchkey` binary: parse config → init telemetry → run; or, with a
//! client subcommand (`lock`, `rwlock`, `semaphore`, `latch`, `ls`,
//! `status`), a client.

use std::process::ExitCode;

use latchkey::config::{self, Invocation};

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().collect();
    if let Some(code) = latchkey::cli::run_if_client(&args) {
        return code;
    }
    let (config, warnings) = match config::from_process() {
        Ok(Invocation::Run { config, warnings }) => (config, warnings),
        Ok(Invocation::Help) => {
            print!("{}", config::usage());
            return ExitCode::SUCCESS;
        }
        Ok(Invocation::Version) => {
            println!("latchkey {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Ok(Invocation::PrintOpenApi) => {
            print!("{}", latchkey::openapi_json());
            return ExitCode::SUCCESS;
        }
        Ok(Invocation::PrintConfigReference) => {
            print!("{}", config::reference::markdown());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("latchkey: {e}");
            return ExitCode::from(2);
        }
    };
    latchkey::telemetry::init(&config.log);
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    match latchkey::app::run(*config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "latchkey stopped");
            eprintln!("latchkey: {e}");
            ExitCode::FAILURE
        }
    }
}
