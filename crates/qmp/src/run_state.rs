//! [`RunState`]: what `query-status` says about a VM.

use serde_json::Value;

/// A VM's run state, from `query-status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunState {
    /// QEMU's run state: `prelaunch`, `running`, `paused`, `inmigrate`, `postmigrate`,
    /// `finish-migrate`, `shutdown`, ...
    pub status: String,
    /// Whether the guest's CPUs run.
    pub running: bool,
}

impl RunState {
    /// Reads `query-status`'s return value (`{"status": "prelaunch", "running": false, ...}`).
    pub fn from_return(value: &Value) -> Result<Self, String> {
        let status = value
            .get("status")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("no string 'status' in {value}"))?;
        let running = value
            .get("running")
            .and_then(Value::as_bool)
            .ok_or_else(|| format!("no boolean 'running' in {value}"))?;
        Ok(RunState {
            status: status.to_string(),
            running,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_query_status() {
        assert_eq!(
            RunState::from_return(
                &json!({"status": "prelaunch", "singlestep": false, "running": false})
            ),
            Ok(RunState {
                status: "prelaunch".into(),
                running: false
            })
        );
        assert!(RunState::from_return(&json!({"status": "running"}))
            .unwrap_err()
            .contains("'running'"));
        assert!(RunState::from_return(&json!([]))
            .unwrap_err()
            .contains("'status'"));
    }
}
