//! [`BalloonTrigger`]: inflates a running guest's balloon (QMP `balloon`) once the guest has
//! read a given number of bytes from its disks (QMP `query-blockstats`), from a thread of its
//! own: issue 10's balloon case, where the host takes memory back from a guest in the middle of
//! its work, as a manager such as oVirt's MoM does, and the guest gives up page cache that the
//! host may already have paged out (seed 004's "up to 2x with ballooning").

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use memvisor_qmp::{QmpAddress, QmpClient};
use serde_json::{json, Value};

/// How long QEMU has to create its QMP socket, and each QMP command to answer.
const QMP_WAIT: Duration = Duration::from_secs(60);
/// How often the disk statistics are read.
const POLL: Duration = Duration::from_millis(100);

/// When the balloon was inflated and how far the guest got.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BalloonInflation {
    /// Seconds after [`BalloonTrigger::start`] the balloon was set.
    pub at_secs: f64,
    /// The guest's smallest memory size QEMU reported afterwards (`query-balloon`'s
    /// `actual`), bytes: the target, once the guest has given it all up (`None`: QEMU
    /// answered no query).
    pub reached_bytes: Option<u64>,
}

/// The watcher thread of one guest run.
pub struct BalloonTrigger {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Option<BalloonInflation>, String>>,
}

impl BalloonTrigger {
    /// Watches the QEMU whose QMP socket is `socket` (it need not exist yet): once its disks
    /// have read `after_read_bytes` bytes, sets the guest's memory to `target_bytes`, then
    /// follows the guest's memory size until the run ends.
    pub fn start(socket: PathBuf, after_read_bytes: u64, target_bytes: u64) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            thread::spawn(move || watch(&socket, after_read_bytes, target_bytes, &stop))
        };
        Self { stop, thread }
    }

    /// Stops watching (the guest exited) and returns the inflation (`None`: the guest never
    /// read that much), or why it could not be made.
    pub fn finish(self) -> Result<Option<BalloonInflation>, String> {
        self.stop.store(true, Ordering::Release);
        self.thread
            .join()
            .unwrap_or_else(|_| Err("the balloon thread panicked".into()))
    }
}

fn watch(
    socket: &std::path::Path,
    after_read_bytes: u64,
    target_bytes: u64,
    stop: &AtomicBool,
) -> Result<Option<BalloonInflation>, String> {
    let started = Instant::now();
    while !socket.exists() {
        if stop.load(Ordering::Acquire) {
            return Ok(None);
        }
        if started.elapsed() > QMP_WAIT {
            return Err(format!("no QMP socket at {}", socket.display()));
        }
        thread::sleep(POLL);
    }
    let address = QmpAddress::Unix(socket.to_path_buf());
    let mut qmp = QmpClient::connect(&address, QMP_WAIT).map_err(|e| e.to_string())?;
    // QEMU exits at the end of the guest's run: a failed command is not an error of the
    // balloon if the run is over (its end is told a moment later).
    let gone = |e: String| {
        if wait_for(stop, QMP_WAIT) {
            Ok(())
        } else {
            Err(e)
        }
    };
    let at_secs = loop {
        if stop.load(Ordering::Acquire) {
            return Ok(None);
        }
        match qmp.execute("query-blockstats", None) {
            Ok(stats) if read_bytes(&stats) >= after_read_bytes => {
                break started.elapsed().as_secs_f64();
            }
            Ok(_) => thread::sleep(POLL),
            Err(e) => return gone(format!("query-blockstats: {e}")).map(|()| None),
        }
    };
    qmp.execute("balloon", Some(json!({ "value": target_bytes })))
        .map_err(|e| format!("balloon to {target_bytes} bytes: {e}"))?;
    let mut reached_bytes: Option<u64> = None;
    while !stop.load(Ordering::Acquire) {
        match qmp.execute("query-balloon", None) {
            Ok(v) => {
                if let Some(actual) = v.get("actual").and_then(Value::as_u64) {
                    reached_bytes = Some(reached_bytes.map_or(actual, |r| r.min(actual)));
                }
            }
            Err(e) => {
                gone(format!("query-balloon: {e}"))?;
                break;
            }
        }
        thread::sleep(POLL);
    }
    Ok(Some(BalloonInflation {
        at_secs,
        reached_bytes,
    }))
}

/// Whether `stop` is set within `limit`.
fn wait_for(stop: &AtomicBool, limit: Duration) -> bool {
    let started = Instant::now();
    while !stop.load(Ordering::Acquire) {
        if started.elapsed() > limit {
            return false;
        }
        thread::sleep(POLL);
    }
    true
}

/// Bytes read by every device of a `query-blockstats` answer.
fn read_bytes(stats: &Value) -> u64 {
    stats
        .as_array()
        .map(|devices| {
            devices
                .iter()
                .filter_map(|d| d.pointer("/stats/rd_bytes").and_then(Value::as_u64))
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_bytes_add_up_over_devices() {
        let v = json!([
            { "device": "", "stats": { "rd_bytes": 4096, "wr_bytes": 7 } },
            { "device": "x", "stats": { "rd_bytes": 8192 } },
            { "device": "y" }
        ]);
        assert_eq!(read_bytes(&v), 12288);
        assert_eq!(read_bytes(&json!({})), 0);
    }

    #[test]
    fn a_guest_that_never_starts_gives_no_balloon() {
        let dir = tempfile::tempdir().unwrap();
        let t = BalloonTrigger::start(dir.path().join("qmp.sock"), 1, 1 << 30);
        assert_eq!(t.finish(), Ok(None));
    }
}
