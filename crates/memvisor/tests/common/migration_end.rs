//! One end of a live migration in the tests: a TCG guest under `memvisor run` with its own
//! control directory and QMP socket, and the `memvisor migrate` command between two ends
//! (`migrate_guest.rs`, `migrate_failures.rs`).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use memvisor_control::{MigrationStatus, ProcessStatus, RegionStatus};
use memvisor_testvm::{qemu_binary, GuestConfig, GuestImage, MemoryBackend, RunningGuest};

use super::{first_managed_status, memvisor};

/// A key file `dir/name` of 32 random bytes, mode 0600, created exclusively.
pub fn key_file(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut r| std::io::Read::read_exact(&mut r, &mut bytes))
        .unwrap();
    f.write_all(&bytes).unwrap();
    path
}

/// The region kind the preload library gives guest RAM from `backend`.
pub fn guest_region_kind(backend: &MemoryBackend) -> &'static str {
    match backend {
        MemoryBackend::Memfd => "guest-memfd",
        MemoryBackend::File(_) => "guest-file",
        MemoryBackend::Anonymous => "fixed",
    }
}

/// One end: a guest under `memvisor run` with its own control directory and QMP socket.
pub struct MigrationEnd {
    pub ctl: PathBuf,
    pub qmp: PathBuf,
    /// The kind of its guest-RAM region (`guest-memfd`, `guest-file`).
    pub kind: &'static str,
    pub guest: Option<RunningGuest>,
}

impl MigrationEnd {
    /// Starts `config` under `memvisor run --swap-dir DIR/NAME-swap RUN_ARGS`, with
    /// `qemu_extra` appended to QEMU's arguments.
    pub fn start(
        dir: &Path,
        name: &str,
        image: &GuestImage,
        config: &GuestConfig,
        run_args: &[&str],
        qemu_extra: &[&str],
    ) -> MigrationEnd {
        let ctl = dir.join(format!("{name}-ctl"));
        let qmp = dir.join(format!("{name}.qmp"));
        let swap = dir.join(format!("{name}-swap"));
        std::fs::create_dir(&swap).unwrap();
        let config = config.clone().qmp_socket(&qmp);
        let mut cmd = memvisor(&ctl);
        cmd.args(["run", "--swap-dir"])
            .arg(&swap)
            .args(run_args)
            .arg("--")
            .arg(qemu_binary().unwrap())
            .args(config.qemu_args(image).unwrap())
            .args(qemu_extra);
        MigrationEnd {
            ctl,
            qmp,
            kind: guest_region_kind(&config.backend),
            guest: Some(RunningGuest::spawn(cmd).unwrap()),
        }
    }

    /// The managed QEMU's status once it shows its guest RAM (30 s at most).
    pub fn status(&self) -> ProcessStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = first_managed_status(&self.ctl) {
                if s.regions.iter().any(|r| r.kind == self.kind) {
                    return s;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{} never answered with its guest RAM",
                self.ctl.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its guest-RAM region now.
    pub fn guest_region(&self) -> RegionStatus {
        self.status()
            .regions
            .into_iter()
            .find(|r| r.kind == self.kind)
            .unwrap()
    }

    /// Its migration status (there must be one).
    pub fn migration(&self) -> MigrationStatus {
        self.status().migration.expect("a migration status")
    }

    /// Waits until the guest has written `bytes` (resident or swapped; `limit` at most).
    pub fn wait_written(&self, bytes: u64, limit: Duration) {
        let start = Instant::now();
        loop {
            let g = self.guest_region();
            if g.resident_bytes + g.swapped_bytes >= bytes {
                return;
            }
            assert!(start.elapsed() < limit, "guest never wrote: {g:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// One QMP command on this end's socket; its reply (or error) as text.
    /// The state of migration capability `name` (`query-migrate-capabilities`).
    pub fn capability(&self, name: &str) -> bool {
        let mut c = memvisor_qmp::QmpClient::connect(
            &memvisor_qmp::QmpAddress::Unix(self.qmp.clone()),
            Duration::from_secs(10),
        )
        .unwrap();
        c.query_migration_capabilities()
            .unwrap()
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no capability {name}"))
            .1
    }

    pub fn qmp(&self, command: &str) -> String {
        let mut c = memvisor_qmp::QmpClient::connect(
            &memvisor_qmp::QmpAddress::Unix(self.qmp.clone()),
            Duration::from_secs(10),
        )
        .unwrap();
        c.execute(command, None)
            .map(|v| v.to_string())
            .unwrap_or_else(|e| e.to_string())
    }

    /// QEMU's run state (`running`, `inmigrate`, `postmigrate`, ...).
    pub fn run_state(&self) -> String {
        let mut c = memvisor_qmp::QmpClient::connect(
            &memvisor_qmp::QmpAddress::Unix(self.qmp.clone()),
            Duration::from_secs(10),
        )
        .unwrap();
        c.query_status().unwrap().status
    }

    /// The guest finishes on its own (within `limit`) and verified all of its memory.
    pub fn verifies(mut self, limit: Duration) {
        let run = self
            .guest
            .take()
            .unwrap()
            .wait(limit)
            .unwrap_or_else(|e| panic!("guest: {e}"));
        let done = run.done().expect("done line");
        assert!(
            done.ok && done.errors == 0,
            "{done:?}\n{}",
            run.console_tail(10)
        );
    }
}

/// `memvisor migrate` of `src` to the destination listening on 127.0.0.1 port `ports.0`
/// (device state to port `ports.1`) whose QMP socket is `dst`'s, with `key` and `extra`
/// options.
pub fn migrate_command(
    src: &MigrationEnd,
    dst: &MigrationEnd,
    key: &Path,
    ports: (u16, u16),
    extra: &[&str],
) -> Command {
    let pid = src.status().pid.to_string();
    let mut cmd = memvisor(&src.ctl);
    cmd.args([
        "migrate",
        &pid,
        "--to",
        &format!("127.0.0.1:{}", ports.0),
        "--key",
    ])
    .arg(key)
    .arg("--qmp")
    .arg(&src.qmp)
    .arg("--dest-qmp")
    .arg(&dst.qmp)
    .args(["--device-uri", &format!("tcp:127.0.0.1:{}", ports.1)])
    .args(extra);
    cmd
}
