//! What Redis itself says: `INFO commandstats` (calls and CPU time per
//! command) and `INFO stats` (commands processed), reset between phases
//! with `CONFIG RESETSTAT`.

use std::time::Duration;

use redis::aio::MultiplexedConnection;

/// One multiplexed connection to the benchmark's redis-server.
#[derive(Clone)]
pub struct Redis {
    conn: MultiplexedConnection,
}

/// The script calls of `INFO commandstats`: its `FCALL` and `EVALSHA`
/// lines together.
#[derive(Clone, Copy, Debug, Default)]
pub struct EvalStats {
    pub calls: u64,
    pub usec_per_call: f64,
}

impl Redis {
    /// A new connection (each caller that wants its own gets one).
    pub async fn connect(url: &str) -> Result<Redis, String> {
        let client = redis::Client::open(url).map_err(|e| format!("redis URL {url}: {e}"))?;
        let config =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(10)));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| format!("cannot connect to {url}: {e}"))?;
        Ok(Redis { conn })
    }

    pub fn conn(&self) -> MultiplexedConnection {
        self.conn.clone()
    }

    /// Zeroes commandstats and total_commands_processed.
    pub async fn reset_stats(&self) -> Result<(), String> {
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async::<()>(&mut self.conn())
            .await
            .map_err(|e| format!("CONFIG RESETSTAT: {e}"))
    }

    async fn info(&self, section: &str) -> Result<String, String> {
        redis::cmd("INFO")
            .arg(section)
            .query_async::<String>(&mut self.conn())
            .await
            .map_err(|e| format!("INFO {section}: {e}"))
    }

    /// One `field:value` of an INFO section.
    pub async fn field(&self, section: &str, field: &str) -> Result<String, String> {
        let text = self.info(section).await?;
        text.lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
            .ok_or_else(|| format!("no {field} in INFO {section}"))
    }

    /// Commands processed since the last reset.
    pub async fn total_commands(&self) -> Result<u64, String> {
        let value = self.field("stats", "total_commands_processed").await?;
        value
            .parse()
            .map_err(|e| format!("total_commands_processed {value:?}: {e}"))
    }

    /// Script calls (`FCALL` and `EVALSHA`) and Redis's CPU time per call
    /// since the last reset (zero when there was none).
    pub async fn scripts(&self) -> Result<EvalStats, String> {
        let text = self.info("commandstats").await?;
        let (mut calls, mut usec) = (0.0, 0.0);
        for command in ["fcall", "evalsha"] {
            let prefix = format!("cmdstat_{command}:");
            let Some(fields) = text.lines().find_map(|line| line.strip_prefix(&prefix)) else {
                continue;
            };
            // calls=12,usec=34,usec_per_call=2.83,rejected_calls=0,failed_calls=0
            let get = |name: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .ok_or_else(|| format!("cannot parse {prefix} {fields:?}"))
            };
            calls += get("calls")?;
            usec += get("usec")?;
        }
        Ok(EvalStats {
            calls: calls as u64,
            usec_per_call: if calls > 0.0 { usec / calls } else { 0.0 },
        })
    }
}
