//! Runs a command under a hold (or a session, whose heartbeats renew the
//! holds taken in it): heartbeats at the service's interval while it
//! runs, stops it when the hold is lost, forwards SIGINT, SIGTERM and
//! SIGHUP to it, and releases the hold (ends the session) when it exits.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::ExitStatus;
use std::time::Duration;

use reqwest::Method;
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::{Instant, sleep_until};

use super::service::Service;
use super::{Stop, Target, delete, exit, segment};

/// A hold the client has, and how to keep it.
pub struct Hold {
    service: Service,
    kept: Kept,
    /// When the hold ends by the client's own clock unless renewed: the
    /// lease counted from when the heartbeat that renewed it was sent (it
    /// started a little later on the service), or from when the grant
    /// arrived (a long-poll's grant is made at most one network trip
    /// earlier, and when within the wait is not known).
    valid_until: Instant,
    interval: Duration,
}

/// What a hold is of.
enum Kept {
    /// A hold of an object; `in_session`: taken in a session, which
    /// renews it (the client sends no heartbeats of its own).
    Object {
        target: Target,
        holder: String,
        fencing_token: u64,
        in_session: bool,
    },
    /// A session (`POST /sessions`), and every hold taken in it.
    Session { id: String },
}

impl Hold {
    /// The hold a grant describes, taken by a request sent at most now
    /// (in a session when `in_session`).
    pub fn new(
        service: Service,
        target: Target,
        holder: String,
        grant: &Value,
        in_session: bool,
    ) -> Self {
        let fencing_token = grant["fencing_token"].as_u64().unwrap_or(0);
        let kept = Kept::Object {
            target,
            holder,
            fencing_token,
            in_session,
        };
        Hold::of(service, kept, grant)
    }

    /// The session a creation's answer describes.
    pub fn session(service: Service, grant: &Value) -> Self {
        let id = grant["session"].as_str().unwrap_or_default().to_string();
        Hold::of(service, Kept::Session { id }, grant)
    }

    fn of(service: Service, kept: Kept, grant: &Value) -> Self {
        let mut hold = Hold {
            service,
            kept,
            valid_until: Instant::now(),
            interval: Duration::ZERO,
        };
        hold.renewed(grant, Instant::now());
        hold
    }

    /// How messages name it: `lock orders`, `session`.
    fn describe(&self) -> String {
        match &self.kept {
            Kept::Object { target, .. } => target.describe(),
            Kept::Session { .. } => "session".into(),
        }
    }

    /// Where its heartbeats go; `None` when the client sends none.
    fn heartbeat_path(&self) -> Option<String> {
        match &self.kept {
            Kept::Object {
                in_session: true, ..
            } => None,
            Kept::Object { target, holder, .. } => {
                Some(format!("{}/heartbeat", target.holder_path(holder)))
            }
            Kept::Session { id } => Some(format!("/sessions/{}/heartbeat", segment(id))),
        }
    }

    /// What the command finds in its environment.
    fn environment(&self) -> Vec<(&'static str, String)> {
        match &self.kept {
            Kept::Object {
                target,
                holder,
                fencing_token,
                ..
            } => vec![
                ("LATCHKEY_NAME", target.name.clone()),
                ("LATCHKEY_HOLDER", holder.clone()),
                ("LATCHKEY_FENCING_TOKEN", fencing_token.to_string()),
            ],
            Kept::Session { id } => vec![("LATCHKEY_SESSION", id.clone())],
        }
    }

    /// Takes in a grant of a request sent at `sent` (a session's has its
    /// `ttl_ms` where a hold's has `expires_in_ms`).
    fn renewed(&mut self, grant: &Value, sent: Instant) {
        let lease = grant["expires_in_ms"].as_u64().or(grant["ttl_ms"].as_u64());
        self.valid_until = sent + Duration::from_millis(lease.unwrap_or(0));
        self.interval = Duration::from_millis(grant["heartbeat_interval_ms"].as_u64().unwrap_or(0))
            .max(Duration::from_millis(50));
    }

    /// Heartbeats until the hold is lost, and says why it was (never, when
    /// the client sends no heartbeats). A heartbeat that fails for another
    /// reason than "not held" is tried again at a third of the interval
    /// while the lease lasts by the client's clock.
    async fn keep(&mut self) -> String {
        let Some(path) = self.heartbeat_path() else {
            return std::future::pending().await;
        };
        let mut next = Instant::now() + self.interval;
        loop {
            sleep_until(next.min(self.valid_until)).await;
            let sent = Instant::now();
            let left = self.valid_until.saturating_duration_since(sent);
            if left.is_zero() {
                return "no heartbeat succeeded before the lease ended".into();
            }
            let answer = self
                .service
                .call(
                    Method::POST,
                    &path,
                    Some(&json!({})),
                    HeaderMap::new(),
                    left,
                )
                .await;
            match answer {
                Ok(answer) if answer.status == StatusCode::OK => {
                    self.renewed(&answer.body, sent);
                    next = sent + self.interval;
                }
                Ok(answer) if answer.status == StatusCode::NOT_FOUND => {
                    return format!("the service says it is not held: {}", answer.detail());
                }
                Ok(_) | Err(_) => next = Instant::now() + self.interval / 3,
            }
        }
    }

    /// Releases the hold (a session: ends it, which releases every hold
    /// taken in it).
    async fn release(&self) -> Released {
        let answer = match &self.kept {
            Kept::Object { target, holder, .. } => target.release(&self.service, holder).await,
            Kept::Session { id } => {
                let path = format!("/sessions/{}", segment(id));
                delete(&self.service, &path).await
            }
        };
        match answer {
            Ok(answer) if answer.status == StatusCode::OK => Released::Done,
            Ok(answer) if answer.status == StatusCode::NOT_FOUND => {
                Released::NotHeld(answer.detail())
            }
            Ok(answer) => Released::Unknown(answer.detail()),
            Err(why) => Released::Unknown(why),
        }
    }
}

/// What a release came to.
enum Released {
    Done,
    /// The service says the hold was gone already.
    NotHeld(String),
    /// No answer, or an error: the lease frees the hold.
    Unknown(String),
}

/// How the command ended.
enum Ended {
    Exited(ExitStatus),
    /// The hold was lost, for this reason, and then the command exited.
    Lost(String, ExitStatus),
}

/// The signals latchkey handles itself, from before the wait for the hold
/// until it exits, so that none meant for the command ends latchkey.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    /// Replaces the default action (ending latchkey) of SIGINT, SIGTERM
    /// and SIGHUP.
    pub fn install() -> Self {
        let handle = |kind| signal(kind).expect("signal handlers install");
        Signals {
            interrupt: handle(SignalKind::interrupt()),
            terminate: handle(SignalKind::terminate()),
            hangup: handle(SignalKind::hangup()),
        }
    }

    /// The next signal's number. Cancel safe (as `Signal::recv` is).
    pub async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
        }
    }
}

/// Runs `command` under `hold` (`None`: under nothing to keep or
/// release, signals forwarded all the same); returns latchkey's exit code.
pub async fn run(
    mut hold: Option<Hold>,
    mut signals: Signals,
    command: Vec<OsString>,
    kill_after: Duration,
) -> Result<u8, Stop> {
    let what = hold.as_ref().map(Hold::describe).unwrap_or_default();
    let environment = hold.as_ref().map(Hold::environment).unwrap_or_default();
    let mut child = match spawn(&environment, &command) {
        Ok(child) => child,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            };
            release(hold.as_ref()).await;
            return Err(Stop::new(code, format!("cannot run {:?}: {e}", command[0])));
        }
    };
    let pid = child.id().expect("a running child has a pid");

    let mut lost: Option<String> = None;
    let mut kill_at: Option<Instant> = None;
    let status = {
        let keep = async {
            match hold.as_mut() {
                Some(hold) => hold.keep().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(keep);
        loop {
            tokio::select! {
                // Cancel safety: Child::wait can be polled again after any
                // other branch ran.
                status = child.wait() => break status,
                why = &mut keep, if lost.is_none() => {
                    eprintln!(
                        "latchkey: lost the {what}: {why}; sending SIGTERM to the command \
                         (SIGKILL in {} ms)",
                        kill_after.as_millis()
                    );
                    crate::child::signal_group(pid, libc::SIGTERM);
                    lost = Some(why);
                    kill_at = Some(Instant::now() + kill_after);
                }
                _ = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                    crate::child::signal_group(pid, libc::SIGKILL);
                    kill_at = None;
                }
                // A signal that came while latchkey was still starting
                // the command is forwarded now.
                signal = signals.recv() => { crate::child::signal_group(pid, signal); }
            }
        }
    };
    let status = status
        .map_err(|e| Stop::new(exit::UNAVAILABLE, format!("waiting for the command: {e}")))?;
    let ended = match lost {
        // Said already, when it was lost. Whatever the command started and
        // left running must not go on without the hold either.
        Some(_) => {
            crate::child::signal_group(pid, libc::SIGKILL);
            Ended::Lost(String::new(), status)
        }
        None => match release(hold.as_ref()).await {
            Released::Done => Ended::Exited(status),
            // Not held when the command ended: it may have run past the
            // hold's end, so this is a lost hold too.
            Released::NotHeld(why) => Ended::Lost(format!(" ({why})"), status),
            Released::Unknown(why) => {
                eprintln!("latchkey: could not release the {what} ({why}); its lease will free it");
                Ended::Exited(status)
            }
        },
    };
    match ended {
        Ended::Exited(status) => Ok(code_of(status)),
        Ended::Lost(why, status) => Err(Stop::new(
            exit::HOLD_LOST,
            format!(
                "the {what} was lost while the command ran{why}; the command ended with {}",
                code_of(status)
            ),
        )),
    }
}

/// Releases `hold`, when there is one.
async fn release(hold: Option<&Hold>) -> Released {
    match hold {
        Some(hold) => hold.release().await,
        None => Released::Done,
    }
}

/// Starts the command with the hold in its environment.
fn spawn(
    environment: &[(&str, String)],
    command: &[OsString],
) -> std::io::Result<tokio::process::Child> {
    let mut std_command = std::process::Command::new(&command[0]);
    std_command
        .args(&command[1..])
        .envs(environment.iter().map(|(k, v)| (k, v)));
    // Its own process group, so that a signal reaches every process it
    // starts (a script's children too); latchkey forwards the terminal's.
    std_command.process_group(0);
    crate::child::die_with_parent(&mut std_command);
    tokio::process::Command::from(std_command).spawn()
}

/// The shell's convention: the exit code, or 128+n for signal n.
fn code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.saturating_add(signal as u8),
        (None, None) => exit::UNAVAILABLE,
    }
}
