//! [`MigrationInfo`]: what `query-migrate` says about the current (or last) migration.

use serde_json::Value;

/// The state of a migration, from `query-migrate`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MigrationInfo {
    /// QEMU's migration status: `none` (also when QEMU returns `{}`: no migration yet),
    /// `setup`, `active`, `pre-switchover`, `device`, `completed`, `failed`, `cancelling`,
    /// `cancelled`, ...
    pub status: String,
    /// `total-time`: milliseconds since the migration started (or its whole duration).
    pub total_time_ms: Option<u64>,
    /// `downtime`: milliseconds the guest was stopped (known once completed).
    pub downtime_ms: Option<u64>,
    /// `setup-time`: milliseconds spent in setup.
    pub setup_time_ms: Option<u64>,
    /// `ram.transferred`: bytes of RAM sent so far.
    pub ram_transferred: Option<u64>,
    /// `ram.total`: bytes of RAM to migrate.
    pub ram_total: Option<u64>,
    /// `error-desc`: why the migration failed.
    pub error_desc: Option<String>,
}

impl MigrationInfo {
    /// Reads `query-migrate`'s return value. Absent members are `None`; a member of the wrong
    /// type is an error naming it.
    pub fn from_return(value: &Value) -> Result<Self, String> {
        if !value.is_object() {
            return Err(format!("not an object: {value}"));
        }
        let number = |parent: &Value, name: &str, shown: &str| match parent.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| format!("'{shown}' is not a non-negative integer: {v}")),
        };
        let text = |name: &str| match value.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(format!("'{name}' is not a string: {v}")),
        };
        let ram = match value.get("ram") {
            None => Value::Null,
            Some(ram @ Value::Object(_)) => ram.clone(),
            Some(v) => return Err(format!("'ram' is not an object: {v}")),
        };
        Ok(MigrationInfo {
            status: text("status")?.unwrap_or_else(|| "none".to_string()),
            total_time_ms: number(value, "total-time", "total-time")?,
            downtime_ms: number(value, "downtime", "downtime")?,
            setup_time_ms: number(value, "setup-time", "setup-time")?,
            ram_transferred: number(&ram, "transferred", "ram.transferred")?,
            ram_total: number(&ram, "total", "ram.total")?,
            error_desc: text("error-desc")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_a_completed_migration() {
        let info = MigrationInfo::from_return(&json!({
            "status": "completed", "total-time": 70, "downtime": 12, "setup-time": 3,
            "blocked": false,
            "ram": {"transferred": 417_000, "total": 67_000_000, "remaining": 0, "duplicate": 0}
        }))
        .unwrap();
        assert_eq!(
            info,
            MigrationInfo {
                status: "completed".into(),
                total_time_ms: Some(70),
                downtime_ms: Some(12),
                setup_time_ms: Some(3),
                ram_transferred: Some(417_000),
                ram_total: Some(67_000_000),
                error_desc: None,
            }
        );
    }

    #[test]
    fn reads_no_migration_and_failures() {
        assert_eq!(
            MigrationInfo::from_return(&json!({})).unwrap().status,
            "none"
        );
        let failed = MigrationInfo::from_return(
            &json!({"status": "failed", "error-desc": "Unable to write to socket"}),
        )
        .unwrap();
        assert_eq!(
            failed.error_desc.as_deref(),
            Some("Unable to write to socket")
        );
        for (bad, named) in [
            (json!({"status": 1}), "'status'"),
            (json!({"total-time": -1}), "'total-time'"),
            (json!({"ram": {"transferred": "x"}}), "'ram.transferred'"),
            (json!({"ram": 5}), "'ram'"),
            (json!({"error-desc": false}), "'error-desc'"),
            (json!(null), "not an object"),
        ] {
            let e = MigrationInfo::from_return(&bad).unwrap_err();
            assert!(e.contains(named), "{e}");
        }
    }
}
