//! [`CpuWakeLatency`]: a request to the kernel's CPU latency QoS (`/dev/cpu_dma_latency`) that
//! idle CPUs wake up at once.
//!
//! A thread that waits for a page-in sleeps in the kernel; the handler's `UFFDIO_COPY` wakes
//! it. If its CPU went idle meanwhile, the wake-up must first bring that CPU out of its idle
//! state: on the development VM (cpuidle `haltpoll`, halt polling off) that is a halt and a
//! VM exit, and a scattered page-in took about twice as long as with the CPU polling (76
//! against 151 µs per page-in, `docs/benchmarks.md`, Run L). On bare metal it is a C-state exit
//! (up to about 100 µs for the deepest). The kernel's own swap pays such a wake-up too, but once
//! per fault, from the completion interrupt; a user-space pager adds one.
//!
//! The request is the kernel's documented interface for this (`Documentation/power/pm_qos_interface.rst`):
//! while the descriptor is open, its value bounds the exit latency of the idle states cpuidle
//! may choose on every CPU; 0 leaves only polling. The kernel drops the request when its
//! last descriptor closes, also when the process dies. A child forked without exec shares the
//! descriptor (it is close-on-exec) until it exits; so a held request is lifted before it is
//! dropped, and only a process killed while holding it leaves it to such a child. Opening the
//! device needs root (it is mode 0600); without it there is no request and nothing changes.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The kernel's CPU latency QoS device.
pub const CPU_LATENCY_DEVICE: &str = "/dev/cpu_dma_latency";

/// The kernel's "no constraint" value, microseconds (`PM_QOS_CPU_LATENCY_DEFAULT_VALUE`).
const NO_CONSTRAINT_US: i32 = 2_000_000_000;

/// One open request on the CPU latency QoS device, holding either no constraint or a wake-up
/// latency of zero (idle CPUs poll).
#[derive(Debug)]
pub struct CpuWakeLatency {
    device: File,
    held: bool,
}

impl CpuWakeLatency {
    /// Opens a request on [`CPU_LATENCY_DEVICE`], without a constraint yet.
    pub fn open() -> io::Result<Self> {
        Self::open_at(Path::new(CPU_LATENCY_DEVICE))
    }

    /// Opens a request on the device at `path`: a character device, never followed through a
    /// symbolic link.
    pub fn open_at(path: &Path) -> io::Result<Self> {
        let device = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)?;
        if !device.metadata()?.file_type().is_char_device() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a character device", path.display()),
            ));
        }
        Ok(Self {
            device,
            held: false,
        })
    }

    /// Whether the zero-latency constraint is in force.
    pub fn is_held(&self) -> bool {
        self.held
    }

    /// Asks that idle CPUs wake at once (a constraint of 0 µs). Does nothing if already held.
    pub fn hold(&mut self) -> io::Result<()> {
        if !self.held {
            self.write_value(0)?;
            self.held = true;
        }
        Ok(())
    }

    /// Lifts the constraint (idle CPUs may halt again). Does nothing if not held.
    pub fn release(&mut self) -> io::Result<()> {
        if self.held {
            self.write_value(NO_CONSTRAINT_US)?;
            self.held = false;
        }
        Ok(())
    }

    /// The device takes the request's new value as a native-endian 32-bit integer.
    fn write_value(&mut self, us: i32) -> io::Result<()> {
        let n = self.device.write(&us.to_ne_bytes())?;
        if n != 4 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("{CPU_LATENCY_DEVICE} took {n} of 4 bytes"),
            ));
        }
        Ok(())
    }
}

impl Drop for CpuWakeLatency {
    fn drop(&mut self) {
        // Nothing to do about a failure here: closing the descriptor drops the request anyway
        // unless a forked child still shares it.
        let _ = self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// The constraint in force on every CPU, microseconds: what reading the device returns.
    fn current_constraint_us() -> Option<i32> {
        let mut f = File::open(CPU_LATENCY_DEVICE).ok()?;
        let mut b = [0u8; 4];
        f.read_exact(&mut b).ok()?;
        Some(i32::from_ne_bytes(b))
    }

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn a_held_request_is_the_kernels_constraint() {
        if !is_root() || !Path::new(CPU_LATENCY_DEVICE).exists() {
            eprintln!("skipped: needs root and {CPU_LATENCY_DEVICE}");
            return;
        }
        let mut r = CpuWakeLatency::open().expect("root opens the QoS device");
        assert!(!r.is_held());
        r.hold().unwrap();
        assert!(r.is_held());
        assert_eq!(
            current_constraint_us(),
            Some(0),
            "held: idle CPUs must poll"
        );
        r.release().unwrap();
        assert!(!r.is_held());
        // What the constraint is once released depends on every other request in the system
        // (other tests' handlers hold 0 while they page), so only the held state is checked.
        r.hold().unwrap();
        assert_eq!(current_constraint_us(), Some(0), "held again");
        drop(r);
    }

    #[test]
    fn only_a_character_device_is_a_request() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"").unwrap();
        let e = CpuWakeLatency::open_at(&plain).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&plain, &link).unwrap();
        let e = CpuWakeLatency::open_at(&link).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
    }
}
