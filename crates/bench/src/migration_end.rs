//! [`MigrationEnd`]: one QEMU of a migration (source or destination) started as its
//! [`Placement`] says — plain, under `memvisor run` (its own control directory and swap
//! directory; a destination listening for memory with a key), or alone in a cgroup v1 memory
//! group with a swap file of its own — with a QMP socket, its console read live, and its
//! swap counters.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use memvisor_control::{socket_dir, ProcessStatus, RegionStatus};
use memvisor_qmp::{QmpAddress, QmpClient};
use memvisor_testvm::{qemu_binary, GuestConfig, GuestImage};

use crate::bench_error::BenchError;
use crate::kernel_swap::KernelSwapFile;
use crate::live_guest::LiveGuest;
use crate::managed_process::status_of;
use crate::memory_cgroup::{group_name, MemoryCgroup};
use crate::migration_eval_config::Placement;
use crate::migration_run::{ProcessIo, SwapCounter, SwapTraffic};

/// How long QMP commands may take.
const QMP_TIMEOUT: Duration = Duration::from_secs(10);

/// What a destination listens with for `memvisor migrate`.
#[derive(Debug, Clone)]
pub struct Listen {
    /// `--migration-listen` IP:PORT.
    pub address: String,
    /// `--migration-key` file.
    pub key: PathBuf,
}

/// How to start one end.
#[derive(Debug, Clone)]
pub struct EndSpec<'a> {
    /// `source` or `destination` (file names, errors).
    pub role: &'static str,
    /// The run, for errors (`virtualizing / naive / rep 0`).
    pub run: &'a str,
    /// Where its memory lives.
    pub placement: Placement,
    /// The guest.
    pub guest: &'a GuestConfig,
    /// The guest image.
    pub image: &'a GuestImage,
    /// The `memvisor` binary.
    pub memvisor: &'a Path,
    /// The run's private directory.
    pub dir: &'a Path,
    /// A memvisor destination's listener.
    pub listen: Option<Listen>,
    /// Start QEMU with `-incoming defer` (a destination).
    pub incoming: bool,
    /// Sequence number of the run (cgroup names).
    pub seq: u64,
    /// Allow other swap areas beside a kernel end's swap file.
    pub allow_other_swap: bool,
}

/// One running end. Dropping it kills QEMU first, then removes its cgroup and swap file.
pub struct MigrationEnd {
    /// The guest (QEMU, `memvisor run`, or the shell that became QEMU).
    pub guest: LiveGuest,
    /// Its QMP socket.
    pub qmp: PathBuf,
    /// Where it lives.
    pub placement: Placement,
    /// `memvisor run`'s control directory.
    ctl: Option<PathBuf>,
    label: String,
    _cgroup: Option<MemoryCgroup>,
    _swap: Option<KernelSwapFile>,
}

impl MigrationEnd {
    /// Starts `spec`'s QEMU.
    pub fn start(spec: &EndSpec<'_>) -> Result<Self, BenchError> {
        let label = format!("{} / {}", spec.run, spec.role);
        let guest_err = |source| BenchError::Guest {
            run: label.clone(),
            source,
        };
        let qmp = spec.dir.join(format!("{}.qmp", spec.role));
        let config = spec.guest.clone().qmp_socket(&qmp);
        let qemu = qemu_binary().map_err(guest_err)?;
        let mut args = config.qemu_args(spec.image).map_err(guest_err)?;
        if spec.incoming {
            args.extend(["-incoming".into(), "defer".into()]);
        }
        let (mut ctl, mut cgroup, mut swap) = (None, None, None);
        let command = match spec.placement {
            Placement::Plain => {
                let mut c = Command::new(&qemu);
                c.args(&args);
                c
            }
            Placement::Cgroup { limit } => {
                let bytes = config.memory_mib << 21;
                swap = Some(KernelSwapFile::create(
                    spec.dir,
                    bytes,
                    spec.allow_other_swap,
                )?);
                let group = MemoryCgroup::create(&group_name(spec.seq), Some(limit))?;
                // QEMU alone joins the group: a shell writes its own pid, then becomes QEMU.
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg("echo $$ > \"$0\" && exec \"$@\"")
                    .arg(group.procs_path())
                    .arg(&qemu)
                    .args(&args);
                cgroup = Some(group);
                c
            }
            Placement::Memvisor { budget } => {
                let dir = spec.dir.join(format!("{}-ctl", spec.role));
                socket_dir::prepare_control_dir(&dir).map_err(|e| {
                    BenchError::io(
                        "create control directory",
                        &dir,
                        std::io::Error::other(e.to_string()),
                    )
                })?;
                let swap_dir = spec.dir.join(format!("{}-swap", spec.role));
                std::fs::create_dir(&swap_dir)
                    .map_err(|e| BenchError::io("create swap directory", &swap_dir, e))?;
                let mut c = Command::new(spec.memvisor);
                c.env("MEMVISOR_CONTROL_DIR", &dir)
                    .arg("run")
                    .args(["--budget", &budget.to_string()])
                    .arg("--swap-dir")
                    .arg(&swap_dir);
                if let Some(l) = &spec.listen {
                    c.args(["--migration-listen", &l.address])
                        .arg("--migration-key")
                        .arg(&l.key);
                }
                c.arg("--").arg(&qemu).args(&args);
                ctl = Some(dir);
                c
            }
        };
        let guest = LiveGuest::spawn(command, label.clone())?;
        Ok(Self {
            guest,
            qmp,
            placement: spec.placement,
            ctl,
            label,
            _cgroup: cgroup,
            _swap: swap,
        })
    }

    /// A QMP client, once QEMU answers (30 s at most). QEMU serves one client at a time:
    /// drop it before anyone else (`memvisor migrate`) connects.
    pub fn qmp(&mut self) -> Result<QmpClient, BenchError> {
        let address = QmpAddress::Unix(self.qmp.clone());
        let start = Instant::now();
        loop {
            match QmpClient::connect(&address, QMP_TIMEOUT) {
                Ok(c) => return Ok(c),
                Err(e) => {
                    if self.guest.exited() || start.elapsed() > Duration::from_secs(30) {
                        return Err(self.guest.failure(&format!("QMP: {e}")));
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `memvisor run`'s control directory (`None` for a QEMU not under memvisor).
    pub fn control_dir(&self) -> Option<&Path> {
        self.ctl.as_deref()
    }

    /// The managed QEMU's status, for an end under `memvisor run` (`None` otherwise).
    pub fn status(&self) -> Result<Option<ProcessStatus>, BenchError> {
        let Some(ctl) = &self.ctl else {
            return Ok(None);
        };
        let pid = socket_dir::list_managed_pids(ctl)
            .map_err(|e| {
                BenchError::io(
                    "list control directory",
                    ctl,
                    std::io::Error::other(e.to_string()),
                )
            })?
            .first()
            .copied()
            .ok_or_else(|| {
                BenchError::bad(
                    "control directory",
                    ctl.display().to_string(),
                    format!("{}: no managed process has a socket there", self.label),
                )
            })?;
        status_of(ctl, pid).map(Some)
    }

    /// The managed QEMU's pid and status once it reports its guest RAM (`timeout` at most).
    pub fn wait_for_guest_region(
        &mut self,
        timeout: Duration,
    ) -> Result<(u32, RegionStatus), BenchError> {
        let start = Instant::now();
        loop {
            if let Ok(Some(s)) = self.status() {
                if let Some(r) = guest_region(&s) {
                    return Ok((s.pid, r.clone()));
                }
            }
            if self.guest.exited() || start.elapsed() > timeout {
                return Err(self
                    .guest
                    .failure("memvisor stat never showed the guest RAM region"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Swap bytes (read, written) so far and where they come from: memvisor's counters of the
    /// guest RAM, or the system's (a kernel end; see [`SwapCounter::KernelVmstat`]).
    pub fn swap_counters(&self) -> Result<SwapTraffic, BenchError> {
        match self.placement {
            Placement::Plain => Ok(SwapTraffic::NONE),
            Placement::Cgroup { .. } => {
                let (pin, pout) = vmstat_swap()?;
                Ok(SwapTraffic {
                    read_bytes: pin * 4096,
                    written_bytes: pout * 4096,
                    counter: SwapCounter::KernelVmstat,
                })
            }
            Placement::Memvisor { .. } => {
                let s = self.status()?.unwrap_or_default();
                let r = guest_region(&s).ok_or_else(|| {
                    BenchError::bad("memvisor stat", self.label.clone(), "no guest RAM region")
                })?;
                Ok(SwapTraffic {
                    read_bytes: r.bytes_read,
                    written_bytes: r.bytes_written,
                    counter: SwapCounter::MemvisorStat,
                })
            }
        }
    }

    /// The QEMU process's storage I/O so far (`/proc/PID/io`; QEMU is the managed process of
    /// a memvisor end, the started program otherwise).
    pub fn process_io(&self) -> Result<ProcessIo, BenchError> {
        let pid = match self.status()? {
            Some(s) => s.pid,
            None => self.guest.pid(),
        };
        let path = format!("/proc/{pid}/io");
        let t = std::fs::read_to_string(&path).map_err(|e| BenchError::io("read", &path, e))?;
        Ok(ProcessIo {
            read_bytes: crate::counters::field(&t, "read_bytes:"),
            written_bytes: crate::counters::field(&t, "write_bytes:"),
        })
    }
}

/// The I/O between two readings of [`MigrationEnd::process_io`].
pub fn io_delta(before: ProcessIo, after: ProcessIo) -> ProcessIo {
    ProcessIo {
        read_bytes: after.read_bytes.saturating_sub(before.read_bytes),
        written_bytes: after.written_bytes.saturating_sub(before.written_bytes),
    }
}

/// The guest RAM region of a managed QEMU.
pub fn guest_region(s: &ProcessStatus) -> Option<&RegionStatus> {
    s.regions.iter().find(|r| r.kind == "guest-memfd")
}

/// The traffic between two readings of [`MigrationEnd::swap_counters`].
pub fn swap_delta(before: SwapTraffic, after: SwapTraffic) -> SwapTraffic {
    SwapTraffic {
        read_bytes: after.read_bytes.saturating_sub(before.read_bytes),
        written_bytes: after.written_bytes.saturating_sub(before.written_bytes),
        counter: after.counter,
    }
}

/// `pswpin`/`pswpout` of `/proc/vmstat`, in pages.
fn vmstat_swap() -> Result<(u64, u64), BenchError> {
    let t = std::fs::read_to_string("/proc/vmstat")
        .map_err(|e| BenchError::io("read", "/proc/vmstat", e))?;
    Ok((
        crate::counters::field(&t, "pswpin"),
        crate::counters::field(&t, "pswpout"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_never_go_negative() {
        let a = SwapTraffic {
            read_bytes: 10,
            written_bytes: 50,
            counter: SwapCounter::MemvisorStat,
        };
        let b = SwapTraffic {
            read_bytes: 30,
            written_bytes: 40,
            counter: SwapCounter::MemvisorStat,
        };
        assert_eq!(
            swap_delta(a, b),
            SwapTraffic {
                read_bytes: 20,
                written_bytes: 0,
                counter: SwapCounter::MemvisorStat
            }
        );
    }
}
