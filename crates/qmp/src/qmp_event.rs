//! [`QmpEvent`]: an asynchronous QMP event (`{"event": NAME, "data": ..., "timestamp": ...}`).

use serde_json::Value;

/// An asynchronous event sent by QEMU (`MIGRATION`, `STOP`, `RESUME`, `SHUTDOWN`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct QmpEvent {
    /// The event name (`MIGRATION`).
    pub name: String,
    /// Its `data` member (`{"status": "completed"}`), `Value::Null` when QEMU sent none.
    pub data: Value,
}
