//! The database resource adaptor: an async connection pool to embedded SQLite (the default:
//! nothing to install) or PostgreSQL (a `postgres://` URL), with the schema the B2BUA
//! services use: call policies keyed by the callee's user name and billing records.
//!
//! Every call is `async` and runs on the tokio runtime, never on a SIP executor: a service
//! spawns the query and brings the result back with a `Completion` (see the container).
//! Schema creation and the seeding of policies are done here, at startup or by
//! `tandem db init`, not by hand.
#![forbid(unsafe_code)]

use serde::Deserialize;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};
use std::time::Duration;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `sqlite::memory:` (default), `sqlite:PATH?mode=rwc` (a file, created if missing) or
    /// `postgres://user@host/db`.
    pub url: String,
    pub max_connections: u32,
    #[serde(with = "humantime_serde")]
    pub acquire_timeout: Duration,
    /// Callees (Request-URI users) given a policy at startup when they have none.
    pub seed_users: Vec<String>,
    /// Their maximum call duration.
    #[serde(with = "humantime_serde")]
    pub seed_max_duration: Duration,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            url: "sqlite::memory:".into(),
            max_connections: 8,
            acquire_timeout: Duration::from_secs(2),
            seed_users: vec!["service".into()],
            seed_max_duration: Duration::from_secs(3600),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database {url}: {source}")]
    Connect { url: String, source: sqlx::Error },
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
    #[error("unsupported database URL {0:?} (use sqlite:... or postgres://...)")]
    Url(String),
}

/// What a callee's policy allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub user: String,
    /// The longest call allowed to this callee.
    pub max_duration: Duration,
}

/// One finished call, written when it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BillingRecord {
    /// Tandem's application-session ID of the call: unique, the record's key.
    pub call_ref: String,
    /// The caller's Call-ID (leg A); callers may reuse them across restarts.
    pub call_id: String,
    pub caller: String,
    /// The Request-URI user the policy was looked up with.
    pub callee: String,
    /// When the call was answered, milliseconds since the Unix epoch.
    pub answered_at_ms: i64,
    pub duration_ms: i64,
    /// `caller`, `callee`, `timer`, `policy` or `no-ack`.
    pub ended_by: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A pool of connections; cheap to clone.
#[derive(Debug, Clone)]
pub struct Database {
    pool: AnyPool,
    backend: Backend,
}

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS b2bua_policy (
        user_name VARCHAR(128) PRIMARY KEY,
        max_duration_ms BIGINT NOT NULL,
        billed_calls BIGINT NOT NULL DEFAULT 0,
        billed_ms BIGINT NOT NULL DEFAULT 0
    )",
    "CREATE TABLE IF NOT EXISTS b2bua_billing (
        call_ref VARCHAR(64) PRIMARY KEY,
        call_id VARCHAR(256) NOT NULL,
        caller VARCHAR(256) NOT NULL,
        callee VARCHAR(128) NOT NULL,
        answered_at_ms BIGINT NOT NULL,
        duration_ms BIGINT NOT NULL,
        ended_by VARCHAR(16) NOT NULL
    )",
];

impl Database {
    /// Connects, creates the schema if missing and seeds the configured policies.
    pub async fn open(config: &DatabaseConfig) -> Result<Database, DbError> {
        let db = Database::connect(config).await?;
        db.create_schema().await?;
        db.seed(&config.seed_users, config.seed_max_duration).await?;
        Ok(db)
    }

    pub async fn connect(config: &DatabaseConfig) -> Result<Database, DbError> {
        sqlx::any::install_default_drivers();
        let url = config.url.as_str();
        let backend = if url.starts_with("sqlite:") {
            Backend::Sqlite
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            return Err(DbError::Url(config.url.clone()));
        };
        // An in-memory SQLite database lives as long as its connection: keep exactly one.
        let memory = backend == Backend::Sqlite && url.contains(":memory:");
        let mut options = AnyPoolOptions::new().max_connections(if memory { 1 } else { config.max_connections.max(1) });
        options = options.acquire_timeout(config.acquire_timeout);
        if memory {
            options = options.min_connections(1).idle_timeout(None).max_lifetime(None);
        }
        let pool = options.connect(url).await.map_err(|source| DbError::Connect { url: redact(url), source })?;
        Ok(Database { pool, backend })
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    pub async fn create_schema(&self) -> Result<(), DbError> {
        for statement in SCHEMA {
            sqlx::query(statement).execute(&self.pool).await?;
        }
        Ok(())
    }

    /// Gives each user a policy unless it has one; returns how many were added.
    pub async fn seed(&self, users: &[String], max_duration: Duration) -> Result<u64, DbError> {
        let mut added = 0;
        for user in users {
            added +=
                sqlx::query("INSERT INTO b2bua_policy (user_name, max_duration_ms) VALUES ($1, $2) ON CONFLICT (user_name) DO NOTHING")
                    .bind(user.as_str())
                    .bind(millis(max_duration))
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
        }
        Ok(added)
    }

    /// Sets a user's policy (created or replaced).
    pub async fn set_policy(&self, user: &str, max_duration: Duration) -> Result<(), DbError> {
        sqlx::query(
            "INSERT INTO b2bua_policy (user_name, max_duration_ms) VALUES ($1, $2) \
             ON CONFLICT (user_name) DO UPDATE SET max_duration_ms = excluded.max_duration_ms",
        )
        .bind(user)
        .bind(millis(max_duration))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn remove_policy(&self, user: &str) -> Result<bool, DbError> {
        let done = sqlx::query("DELETE FROM b2bua_policy WHERE user_name = $1").bind(user).execute(&self.pool).await?;
        Ok(done.rows_affected() > 0)
    }

    /// The callee's policy, if it has one.
    pub async fn policy(&self, user: &str) -> Result<Option<Policy>, DbError> {
        let row: Option<AnyRow> = sqlx::query("SELECT user_name, max_duration_ms FROM b2bua_policy WHERE user_name = $1")
            .bind(user)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some(row) => {
                let ms: i64 = row.try_get(1)?;
                Some(Policy { user: row.try_get(0)?, max_duration: Duration::from_millis(ms.max(0) as u64) })
            }
            None => None,
        })
    }

    /// Writes the record and adds it to the callee's totals, in one transaction.
    pub async fn bill(&self, record: &BillingRecord) -> Result<(), DbError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO b2bua_billing (call_ref, call_id, caller, callee, answered_at_ms, duration_ms, ended_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(record.call_ref.as_str())
        .bind(record.call_id.as_str())
        .bind(record.caller.as_str())
        .bind(record.callee.as_str())
        .bind(record.answered_at_ms)
        .bind(record.duration_ms)
        .bind(record.ended_by.as_str())
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE b2bua_policy SET billed_calls = billed_calls + 1, billed_ms = billed_ms + $1 WHERE user_name = $2")
            .bind(record.duration_ms)
            .bind(record.callee.as_str())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Billing records, newest last (for tools and tests).
    pub async fn billing(&self, limit: i64) -> Result<Vec<BillingRecord>, DbError> {
        let rows = sqlx::query(
            "SELECT call_ref, call_id, caller, callee, answered_at_ms, duration_ms, ended_by FROM b2bua_billing \
             ORDER BY answered_at_ms, call_ref LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(BillingRecord {
                    call_ref: r.try_get(0)?,
                    call_id: r.try_get(1)?,
                    caller: r.try_get(2)?,
                    callee: r.try_get(3)?,
                    answered_at_ms: r.try_get(4)?,
                    duration_ms: r.try_get(5)?,
                    ended_by: r.try_get(6)?,
                })
            })
            .collect()
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{}:***{}", &url[..scheme + 3], user, &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> DatabaseConfig {
        DatabaseConfig { seed_users: vec!["alice".into()], seed_max_duration: Duration::from_secs(60), ..Default::default() }
    }

    async fn exercise(db: &Database) {
        let alice = db.policy("alice").await.expect("query").expect("seeded");
        assert_eq!(alice.max_duration, Duration::from_secs(60));
        assert_eq!(db.policy("nobody").await.expect("query"), None);
        db.set_policy("bob", Duration::from_secs(5)).await.expect("set");
        assert_eq!(db.policy("bob").await.expect("query").map(|p| p.max_duration), Some(Duration::from_secs(5)));
        let record = BillingRecord {
            call_ref: "0123abcd".into(),
            call_id: "c1@test".into(),
            caller: "sip:carol@example.com".into(),
            callee: "alice".into(),
            answered_at_ms: 1_700_000_000_000,
            duration_ms: 1234,
            ended_by: "caller".into(),
        };
        db.bill(&record).await.expect("bill");
        // The same call billed twice violates the key: the transaction leaves nothing behind.
        assert!(db.bill(&record).await.is_err());
        assert_eq!(db.billing(10).await.expect("list"), vec![record]);
        let row = sqlx::query("SELECT billed_calls, billed_ms FROM b2bua_policy WHERE user_name = 'alice'")
            .fetch_one(&db.pool)
            .await
            .expect("totals");
        assert_eq!((row.get::<i64, _>(0), row.get::<i64, _>(1)), (1, 1234));
        assert!(db.remove_policy("bob").await.expect("delete"));
        assert_eq!(db.policy("bob").await.expect("query"), None);
    }

    #[tokio::test]
    async fn sqlite_in_memory_policies_and_billing() {
        let db = Database::open(&memory()).await.expect("open");
        assert_eq!(db.backend(), Backend::Sqlite);
        // Seeding again adds nothing and keeps the policy.
        assert_eq!(db.seed(&["alice".into()], Duration::from_secs(1)).await.expect("seed"), 0);
        exercise(&db).await;
    }

    #[tokio::test]
    async fn postgres_when_available() {
        let Some(url) = std::env::var("TANDEM_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty()) else {
            eprintln!("skipped: set TANDEM_TEST_POSTGRES_URL (e.g. postgres://postgres@127.0.0.1/test) to run against PostgreSQL");
            return;
        };
        // A database of its own, so that other users of the server do not disturb the counts.
        let admin = Database::connect(&DatabaseConfig { url: url.clone(), ..memory() }).await.expect("connect");
        let name = format!("tandem_unit_{}", std::process::id());
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&admin.pool).await.expect("drop");
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&admin.pool).await.expect("create");
        let own = match url.rfind('/') {
            Some(i) if i > url.find("://").map_or(0, |s| s + 2) => format!("{}/{name}", &url[..i]),
            _ => format!("{url}/{name}"),
        };
        let db = Database::open(&DatabaseConfig { url: own, ..memory() }).await.expect("open");
        assert_eq!(db.backend(), Backend::Postgres);
        exercise(&db).await;
        db.close().await;
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&admin.pool).await.expect("drop");
    }

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("sqlite::memory:"), "sqlite::memory:");
    }

    #[tokio::test]
    async fn a_bad_url_is_a_clear_error() {
        let err = Database::open(&DatabaseConfig { url: "mysql://x".into(), ..memory() }).await.expect_err("refused");
        assert!(err.to_string().contains("unsupported database URL"), "{err}");
    }
}
