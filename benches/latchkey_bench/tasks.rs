//! Collecting the results of a set of worker tasks.

use std::time::Duration;

use tokio::task::JoinSet;

/// Waits (at most `deadline`) for every task and returns the values of
/// those that succeeded. Failures, panics and a deadline overrun (the
/// remaining tasks are then aborted) are pushed to `errors`.
pub async fn join_all<T: 'static>(
    tasks: &mut JoinSet<Result<T, String>>,
    deadline: Duration,
    errors: &mut Vec<String>,
) -> Vec<T> {
    let mut values = Vec::new();
    let drained = tokio::time::timeout(deadline, async {
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Ok(value)) => values.push(value),
                Ok(Err(e)) => errors.push(e),
                Err(e) => errors.push(format!("task panicked: {e}")),
            }
        }
    })
    .await;
    if drained.is_err() {
        errors.push(format!(
            "{} task(s) still running after {deadline:?}",
            tasks.len()
        ));
        tasks.abort_all();
    }
    values
}
