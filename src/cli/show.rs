//! `latchkey ls KIND` and `latchkey status KIND NAME`: what the service's
//! listings and state reads say, as a table (or JSON) for terminals and
//! scripts (the book's "Client tools" (docs/src/client-tools.md)).
//!
//! Columns come from the JSON itself: every scalar member of the objects
//! (`locked`, `hold_count`, `available`, `count`, `queued`, ...) and, when
//! an object lists its `holds`, their owners (`ls`) or one line per hold
//! (`status`). A member the service adds shows up without a change here.

use std::time::Duration;

use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::{Map, Value};

use super::service::{Failure, Service};
use super::{Stop, exit, segment};

/// The kinds `ls` and `status` know, as the API names their collections.
pub const KINDS: [&str; 8] = [
    "locks",
    "fair-locks",
    "rwlocks",
    "semaphores",
    "latches",
    "redlocks",
    "rate-limiters",
    "sessions",
];

/// How long one page or state read may take.
const READ_TIMEOUT: Duration = Duration::from_secs(15);

/// Items asked for per page.
const PAGE: u64 = 1000;

/// `KIND` as the API's collection: the plural (`locks`) or the singular
/// (`lock`, `fair-lock`, `rate-limiter`).
pub fn collection(kind: &str) -> Result<&'static str, Stop> {
    KINDS
        .into_iter()
        .find(|k| *k == kind || k.strip_suffix('s') == Some(kind))
        .ok_or_else(|| {
            Stop::new(
                exit::USAGE,
                format!("unknown kind {kind:?}: one of {}", KINDS.join(", ")),
            )
        })
}

/// One GET, as a JSON body or the stop its failure means.
async fn get(service: &Service, path: &str, what: &str) -> Result<Value, Stop> {
    let answer = service
        .call(Method::GET, path, None, HeaderMap::new(), READ_TIMEOUT)
        .await
        .map_err(|why| Stop::new(exit::UNAVAILABLE, format!("{what}: {why}")))?;
    if answer.status.is_success() {
        Ok(answer.body)
    } else if answer.status.is_server_error() || answer.status.as_u16() == 429 {
        Err(Stop::from_failure(
            what,
            Failure::Unavailable(format!("latchkey answered {}", answer.detail())),
        ))
    } else {
        Err(Stop::from_failure(what, Failure::Refused(answer)))
    }
}

/// Every item of `GET /{kind}?prefix=`, following the cursors to the end
/// (`limit`: at most that many in all).
pub async fn list(
    service: &Service,
    kind: &str,
    prefix: Option<&str>,
    limit: Option<u64>,
) -> Result<Vec<Value>, Stop> {
    let what = format!("ls {kind}");
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let left = limit.map(|l| l.saturating_sub(items.len() as u64));
        if left == Some(0) {
            return Ok(items);
        }
        let mut path = format!("/{kind}?limit={}", left.unwrap_or(PAGE).min(PAGE));
        if let Some(prefix) = prefix {
            path.push_str(&format!("&prefix={}", segment(prefix)));
        }
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={}", segment(c)));
        }
        let page = get(service, &path, &what).await?;
        if let Some(page_items) = page["items"].as_array() {
            items.extend(page_items.iter().cloned());
        }
        match page["cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return Ok(items),
        }
    }
}

/// `GET /{kind}/{name}`.
pub async fn status(service: &Service, kind: &str, name: &str) -> Result<Value, Stop> {
    let path = format!("/{kind}/{}", segment(name));
    get(service, &path, &format!("status {kind} {name}")).await
}

/// A cell: strings as they are, `null` as `-`.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The scalar members of `rows`, in order of first appearance, `name`
/// first.
fn scalar_columns<'a>(rows: impl IntoIterator<Item = &'a Map<String, Value>>) -> Vec<String> {
    let mut columns: Vec<String> = Vec::new();
    for row in rows {
        for (key, value) in row {
            if !matches!(value, Value::Array(_) | Value::Object(_)) && !columns.contains(key) {
                columns.push(key.clone());
            }
        }
    }
    if let Some(i) = columns.iter().position(|c| c == "name") {
        let name = columns.remove(i);
        columns.insert(0, name);
    }
    columns
}

/// Lines of a table with `header` and `rows`, columns padded to fit.
fn table(header: &[String], rows: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    std::iter::once(header.to_vec())
        .chain(rows.iter().cloned())
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect()
}

/// The owners of an object's `holds`, or `None` when it lists none.
fn owners(object: &Map<String, Value>) -> Option<String> {
    let holds = object.get("holds")?.as_array()?;
    let owners: Vec<String> = holds.iter().map(|h| cell(&h["owner"])).collect();
    Some(if owners.is_empty() {
        "-".into()
    } else {
        owners.join(", ")
    })
}

/// `ls`'s table: one line per object.
pub fn list_table(items: &[Value]) -> Vec<String> {
    let objects: Vec<&Map<String, Value>> = items.iter().filter_map(Value::as_object).collect();
    let columns = scalar_columns(objects.iter().copied());
    let with_owners = objects.iter().any(|o| owners(o).is_some());
    let mut header: Vec<String> = columns.iter().map(|c| c.to_uppercase()).collect();
    if with_owners {
        header.push("OWNERS".into());
    }
    let rows: Vec<Vec<String>> = objects
        .iter()
        .map(|o| {
            let mut row: Vec<String> = columns
                .iter()
                .map(|c| o.get(c).map_or_else(String::new, cell))
                .collect();
            if with_owners {
                row.push(owners(o).unwrap_or_default());
            }
            row
        })
        .collect();
    table(&header, &rows)
}

/// `status`'s lines: the object's columns, then one line per hold.
pub fn status_table(object: &Value) -> Vec<String> {
    let mut lines = list_table(std::slice::from_ref(object));
    let holds: Vec<&Map<String, Value>> = object["holds"]
        .as_array()
        .map(|h| h.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default();
    if !holds.is_empty() {
        let columns = scalar_columns(holds.iter().copied());
        let header: Vec<String> = columns.iter().map(|c| c.to_uppercase()).collect();
        let rows: Vec<Vec<String>> = holds
            .iter()
            .map(|h| {
                columns
                    .iter()
                    .map(|c| h.get(c).map_or_else(String::new, cell))
                    .collect()
            })
            .collect();
        lines.push(String::new());
        lines.extend(table(&header, &rows));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_are_plural_or_singular() {
        assert_eq!(collection("locks").ok(), Some("locks"));
        assert_eq!(collection("fair-lock").ok(), Some("fair-locks"));
        assert_eq!(collection("rate-limiter").ok(), Some("rate-limiters"));
        assert!(collection("mutex").is_err());
    }

    #[test]
    fn columns_come_from_the_json_and_owners_from_the_holds() {
        let items = [
            json!({"name": "a", "locked": true, "hold_count": 1,
                   "holds": [{"owner": "web-7 pid 1", "expires_in_ms": 900}]}),
            json!({"name": "bb", "locked": false, "hold_count": 0, "holds": [], "queued": 2}),
        ];
        let lines = list_table(&items);
        assert_eq!(lines[0], "NAME  LOCKED  HOLD_COUNT  QUEUED  OWNERS");
        assert_eq!(lines[1], "a     true    1                   web-7 pid 1");
        assert_eq!(lines[2], "bb    false   0           2       -");
        // Without holds in the JSON, no owners column.
        let plain = list_table(&[json!({"name": "s", "permits": 3, "available": 1})]);
        assert_eq!(plain, ["NAME  PERMITS  AVAILABLE", "s     3        1"]);
        let status = status_table(&items[0]);
        assert_eq!(
            status[3..],
            ["OWNER        EXPIRES_IN_MS", "web-7 pid 1  900"]
        );
    }
}
