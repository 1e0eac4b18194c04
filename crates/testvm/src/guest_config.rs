//! What a test guest looks like, and the QEMU command line that boots it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::accel::{Accel, AccelChoice};
use crate::error::{Result, TestVmError};
use crate::guest_image::GuestImage;
use crate::guest_run::GuestRun;
use crate::qemu_binary::qemu_binary;
use crate::running_guest::RunningGuest;

/// Where QEMU gets the guest's RAM.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MemoryBackend {
    /// QEMU's default: private anonymous memory.
    #[default]
    Anonymous,
    /// A shared memfd (`-object memory-backend-memfd,...,share=on`), named
    /// `memory-backend-memfd` in `/proc/PID/maps`: what memvisor manages.
    Memfd,
    /// A shared file (`-object memory-backend-file,...,mem-path=PATH,share=on`): QEMU opens
    /// the file `PATH` (creating it if missing), or creates and unlinks a temporary file in it
    /// if `PATH` is a directory. On tmpfs (`/dev/shm`) and empty, memvisor adopts it as it
    /// adopts the memfd (region kind `guest-file`); QEMU 8.1+ needs this form for
    /// `x-ignore-shared` migration.
    File(PathBuf),
}

/// QEMU's `cache=` mode for a drive (how the host page cache is used).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DiskCache {
    /// Host page cache on, writes acknowledged when cached (double caching reproduces).
    #[default]
    Writeback,
    /// Host page cache on, writes acknowledged when on disk.
    Writethrough,
    /// `O_DIRECT`: no host page cache.
    None,
    /// `O_DIRECT` and writes acknowledged when on disk.
    Directsync,
    /// Host page cache on, flushes ignored.
    Unsafe,
}

impl DiskCache {
    /// QEMU's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            DiskCache::Writeback => "writeback",
            DiskCache::Writethrough => "writethrough",
            DiskCache::None => "none",
            DiskCache::Directsync => "directsync",
            DiskCache::Unsafe => "unsafe",
        }
    }
}

/// QEMU's `aio=` mode for a drive: how its requests are submitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DiskAio {
    /// A pool of worker threads doing `preadv`/`pwritev` (QEMU's default).
    #[default]
    Threads,
    /// Linux AIO (`io_submit`); QEMU requires `cache=none` or `directsync` with it.
    Native,
    /// io_uring.
    IoUring,
}

impl DiskAio {
    /// QEMU's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            DiskAio::Threads => "threads",
            DiskAio::Native => "native",
            DiskAio::IoUring => "io_uring",
        }
    }
}

/// A raw disk image attached as the guest's `/dev/vda` (virtio-blk).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskConfig {
    /// The image file (raw format).
    pub path: PathBuf,
    /// Host caching mode.
    pub cache: DiskCache,
    /// Attach read-only (the guest cannot change the image).
    pub read_only: bool,
    /// Request submission (`aio=`; not passed when `Threads`, QEMU's default).
    pub aio: DiskAio,
}

impl DiskConfig {
    /// A read-only raw image with `cache=writeback`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        DiskConfig {
            path: path.into(),
            cache: DiskCache::Writeback,
            read_only: true,
            aio: DiskAio::Threads,
        }
    }

    /// Sets the request submission mode.
    pub fn aio(mut self, aio: DiskAio) -> Self {
        self.aio = aio;
        self
    }

    /// Sets the cache mode.
    pub fn cache(mut self, cache: DiskCache) -> Self {
        self.cache = cache;
        self
    }

    /// Sets read-only or read-write.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }
}

/// x86's kernel command line limit (COMMAND_LINE_SIZE), including the terminating NUL.
const MAX_KERNEL_CMDLINE: usize = 2048;

/// A test guest: memory, optional disk, the workload it runs, and how long it may take.
#[derive(Debug, Clone, PartialEq)]
pub struct GuestConfig {
    /// Guest RAM in MiB (`-m`).
    pub memory_mib: u64,
    /// Where the RAM comes from.
    pub backend: MemoryBackend,
    /// Virtual CPUs (`-smp`).
    pub cpus: u32,
    /// The disk, if any.
    pub disk: Option<DiskConfig>,
    /// A virtio-balloon device with free page reporting (the guest reports the pages it frees
    /// and QEMU discards them from guest RAM).
    pub free_page_reporting: bool,
    /// A QMP monitor on this Unix socket (QEMU listens; `server=on,wait=off`).
    pub qmp_socket: Option<PathBuf>,
    /// The workload command line, passed as `memvisor.run="..."` (commands separated by `;`),
    /// e.g. `mem 256 --patterns seq,zipf`.
    pub workload: String,
    /// Extra kernel command line words.
    pub kernel_args: Vec<String>,
    /// Accelerator choice.
    pub accel: AccelChoice,
    /// Wall-clock limit for the whole run, boot included.
    pub timeout: Duration,
}

impl GuestConfig {
    /// A guest with `memory_mib` MiB of anonymous RAM, one CPU, no disk, accelerator from
    /// `MEMVISOR_ACCEL` (TCG when unset), running `workload`, with a 120 s timeout.
    pub fn new(memory_mib: u64, workload: impl Into<String>) -> Self {
        GuestConfig {
            memory_mib,
            backend: MemoryBackend::Anonymous,
            cpus: 1,
            disk: None,
            free_page_reporting: false,
            qmp_socket: None,
            workload: workload.into(),
            kernel_args: Vec::new(),
            accel: AccelChoice::FromEnv,
            timeout: Duration::from_secs(120),
        }
    }

    /// Adds a virtio-balloon device with free page reporting (`virtio_balloon` is loaded in the
    /// guest either way).
    pub fn free_page_reporting(mut self, on: bool) -> Self {
        self.free_page_reporting = on;
        self
    }

    /// Serves QMP on the Unix socket `path` (for balloon commands and the like).
    pub fn qmp_socket(mut self, path: impl Into<PathBuf>) -> Self {
        self.qmp_socket = Some(path.into());
        self
    }

    /// Sets the memory backend.
    pub fn backend(mut self, backend: MemoryBackend) -> Self {
        self.backend = backend;
        self
    }

    /// Attaches a disk.
    pub fn disk(mut self, disk: DiskConfig) -> Self {
        self.disk = Some(disk);
        self
    }

    /// Sets the number of CPUs.
    pub fn cpus(mut self, cpus: u32) -> Self {
        self.cpus = cpus;
        self
    }

    /// Sets the accelerator choice.
    pub fn accel(mut self, accel: AccelChoice) -> Self {
        self.accel = accel;
        self
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Appends a kernel command line word.
    pub fn kernel_arg(mut self, arg: impl Into<String>) -> Self {
        self.kernel_args.push(arg.into());
        self
    }

    /// The kernel command line: serial console, quiet, power off on panic, no IO-APIC timer
    /// check (an overloaded TCG host can fail it and panic the guest), the workload.
    pub fn kernel_cmdline(&self) -> Result<String> {
        let invalid = |reason: String| Err(TestVmError::InvalidConfig { reason });
        if self.workload.trim().is_empty() {
            return invalid("the workload command is empty".to_string());
        }
        if let Some(c) = self
            .workload
            .chars()
            .find(|c| *c == '"' || !(c.is_ascii_graphic() || *c == ' '))
        {
            return invalid(format!(
                "the workload command {:?} contains {c:?}; use printable ASCII without double quotes",
                self.workload
            ));
        }
        let mut cmdline = String::from("console=ttyS0 quiet panic=-1 no_timer_check");
        for arg in &self.kernel_args {
            cmdline.push(' ');
            cmdline.push_str(arg);
        }
        cmdline.push_str(&format!(" memvisor.run=\"{}\"", self.workload));
        if cmdline.len() >= MAX_KERNEL_CMDLINE {
            return invalid(format!(
                "the kernel command line is {} bytes, the limit is {}",
                cmdline.len(),
                MAX_KERNEL_CMDLINE - 1
            ));
        }
        Ok(cmdline)
    }

    /// QEMU's arguments (without the program), for a caller that builds its own command, e.g.
    /// `memvisor run -- qemu-system-x86_64 ARGS...`. Resolves the accelerator (see
    /// [`AccelChoice`]).
    pub fn qemu_args(&self, image: &GuestImage) -> Result<Vec<OsString>> {
        let invalid = |reason: String| Err(TestVmError::InvalidConfig { reason });
        if !(64..=1 << 20).contains(&self.memory_mib) {
            return invalid(format!(
                "memory of {} MiB is outside 64..=1048576 MiB",
                self.memory_mib
            ));
        }
        if !(1..=64).contains(&self.cpus) {
            return invalid(format!("{} CPUs is outside 1..=64", self.cpus));
        }
        let cmdline = self.kernel_cmdline()?;
        let accel = self.accel.resolve(|| kvm_works(image))?;
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |items: &[&str]| args.extend(items.iter().map(OsString::from));
        push(&[
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-serial",
            "stdio",
            "-no-reboot",
            "-accel",
            accel.as_str(),
        ]);
        if accel == Accel::Kvm {
            push(&["-cpu", "host"]);
        }
        let mem = format!("{}M", self.memory_mib);
        push(&["-smp", &self.cpus.to_string(), "-m", &mem]);
        let backend = match &self.backend {
            MemoryBackend::Anonymous => None,
            MemoryBackend::Memfd => {
                Some(format!("memory-backend-memfd,id=ram,size={mem},share=on"))
            }
            MemoryBackend::File(path) => {
                let path = path.to_str().ok_or_else(|| TestVmError::InvalidConfig {
                    reason: format!("memory backend path {} is not UTF-8", path.display()),
                })?;
                // QEMU option syntax: a comma inside a value is written as two.
                Some(format!(
                    "memory-backend-file,id=ram,size={mem},mem-path={},share=on",
                    path.replace(',', ",,")
                ))
            }
        };
        if let Some(backend) = backend {
            push(&["-object", &backend, "-machine", "memory-backend=ram"]);
        }
        args.push("-kernel".into());
        args.push(image.kernel.clone().into());
        args.push("-initrd".into());
        args.push(image.initramfs.clone().into());
        args.push("-append".into());
        args.push(cmdline.into());
        if let Some(disk) = &self.disk {
            if !disk.path.exists() {
                return Err(TestVmError::MissingFile {
                    what: "disk image",
                    path: disk.path.clone(),
                });
            }
            let path = disk
                .path
                .to_str()
                .ok_or_else(|| TestVmError::InvalidConfig {
                    reason: format!("disk image path {} is not UTF-8", disk.path.display()),
                })?;
            // QEMU option syntax: a comma inside a value is written as two.
            let mut drive = format!(
                "file={},format=raw,if=virtio,cache={}",
                path.replace(',', ",,"),
                disk.cache.as_str()
            );
            if disk.read_only {
                drive.push_str(",readonly=on");
            }
            if disk.aio != DiskAio::Threads {
                drive.push_str(",aio=");
                drive.push_str(disk.aio.as_str());
            }
            args.push("-drive".into());
            args.push(drive.into());
        }
        if self.free_page_reporting {
            args.push("-device".into());
            args.push("virtio-balloon-pci,free-page-reporting=on".into());
        }
        if let Some(q) = &self.qmp_socket {
            let path = q.to_str().ok_or_else(|| TestVmError::InvalidConfig {
                reason: format!("QMP socket path {} is not UTF-8", q.display()),
            })?;
            args.push("-qmp".into());
            args.push(format!("unix:{},server=on,wait=off", path.replace(',', ",,")).into());
        }
        Ok(args)
    }

    /// The complete QEMU command (program from [`qemu_binary`]).
    pub fn command(&self, image: &GuestImage) -> Result<Command> {
        let mut command = Command::new(qemu_binary()?);
        command.args(self.qemu_args(image)?);
        Ok(command)
    }

    /// Boots the guest under plain QEMU and waits for it (see [`RunningGuest::wait`]).
    pub fn run(&self, image: &GuestImage) -> Result<GuestRun> {
        RunningGuest::spawn(self.command(image)?)?.wait(self.timeout)
    }
}

/// How long the KVM probe's guest may take; a working KVM boots in well under a second.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

static KVM_WORKS: OnceLock<bool> = OnceLock::new();

/// True if `/dev/kvm` opens read-write and a no-op guest boots and powers off under KVM within
/// [`PROBE_TIMEOUT`]. The answer is cached for the process.
pub fn kvm_works(image: &GuestImage) -> bool {
    *KVM_WORKS.get_or_init(|| {
        let openable = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_ok();
        openable
            && GuestConfig::new(128, "noop")
                .accel(AccelChoice::Fixed(Accel::Kvm))
                .timeout(PROBE_TIMEOUT)
                .run(image)
                .is_ok_and(|run| run.ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    fn image() -> GuestImage {
        GuestImage {
            dir: "/g".into(),
            kernel: "/g/vmlinuz".into(),
            initramfs: "/g/initramfs.cpio".into(),
            workload: "/g/workload".into(),
        }
    }

    fn args(config: &GuestConfig) -> Vec<String> {
        config
            .qemu_args(&image())
            .unwrap()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn memfd_guest_command_line() {
        let config = GuestConfig::new(512, "mem 256")
            .backend(MemoryBackend::Memfd)
            .accel(AccelChoice::Fixed(Accel::Tcg));
        let args = args(&config);
        let joined = args.join(" ");
        assert!(joined.starts_with(
            "-nodefaults -no-user-config -display none -serial stdio -no-reboot -accel tcg -smp 1 -m 512M \
             -object memory-backend-memfd,id=ram,size=512M,share=on -machine memory-backend=ram \
             -kernel /g/vmlinuz -initrd /g/initramfs.cpio -append"
        ), "{joined}");
        assert_eq!(
            args.last().unwrap(),
            "console=ttyS0 quiet panic=-1 no_timer_check memvisor.run=\"mem 256\""
        );
    }

    #[test]
    fn file_guest_command_line_escapes_commas() {
        let config = GuestConfig::new(512, "mem 256")
            .backend(MemoryBackend::File("/dev/shm/a,b/ram".into()))
            .accel(AccelChoice::Fixed(Accel::Tcg));
        let joined = args(&config).join(" ");
        assert!(
            joined.contains(
                "-m 512M -object memory-backend-file,id=ram,size=512M,mem-path=/dev/shm/a,,b/ram,\
                 share=on -machine memory-backend=ram -kernel /g/vmlinuz"
            ),
            "{joined}"
        );
    }

    #[test]
    fn anonymous_guest_with_disk_and_kvm() {
        let disk = tempfile::Builder::new().prefix("a,b").tempfile().unwrap();
        let config = GuestConfig::new(256, "disk /dev/vda seq 1")
            .disk(DiskConfig::new(disk.path()).cache(DiskCache::None))
            .cpus(2)
            .kernel_arg("mitigations=off")
            .accel(AccelChoice::Fixed(Accel::Kvm));
        let args = args(&config);
        assert!(!args.iter().any(|a| a.contains("memory-backend")));
        let joined = args.join(" ");
        assert!(
            joined.contains("-accel kvm -cpu host -smp 2 -m 256M"),
            "{joined}"
        );
        assert!(joined.contains(
            "console=ttyS0 quiet panic=-1 no_timer_check mitigations=off memvisor.run=\"disk /dev/vda seq 1\""
        ));
        let drive = args.last().unwrap();
        let escaped = disk.path().to_str().unwrap().replace(',', ",,");
        assert_eq!(
            drive,
            &format!("file={escaped},format=raw,if=virtio,cache=none,readonly=on")
        );
        assert!(drive.contains("a,,b"));
    }

    #[test]
    fn bad_configurations_are_rejected_with_the_reason() {
        let tcg = AccelChoice::Fixed(Accel::Tcg);
        let reason = |config: GuestConfig| match config.accel(tcg).qemu_args(&image()) {
            Err(TestVmError::InvalidConfig { reason }) => reason,
            other => panic!("expected InvalidConfig, got {other:?}"),
        };
        assert_eq!(
            reason(GuestConfig::new(512, "mem \"8\"")),
            "the workload command \"mem \\\"8\\\"\" contains '\"'; use printable ASCII without double quotes"
        );
        assert!(reason(GuestConfig::new(512, "mem 8\nnoop")).contains("'\\n'"));
        assert_eq!(
            reason(GuestConfig::new(512, "  ")),
            "the workload command is empty"
        );
        assert_eq!(
            reason(GuestConfig::new(16, "noop")),
            "memory of 16 MiB is outside 64..=1048576 MiB"
        );
        assert_eq!(
            reason(GuestConfig::new(512, "noop").cpus(0)),
            "0 CPUs is outside 1..=64"
        );
        assert!(reason(GuestConfig::new(512, "x".repeat(2100))).contains("the limit is 2047"));
        let not_utf8 = std::ffi::OsStr::from_bytes(b"/dev/shm/\xff");
        assert_eq!(
            reason(GuestConfig::new(512, "noop").backend(MemoryBackend::File(not_utf8.into()))),
            "memory backend path /dev/shm/\u{fffd} is not UTF-8"
        );
        let missing = GuestConfig::new(512, "noop")
            .accel(tcg)
            .disk(DiskConfig::new("/nonexistent/disk.img"))
            .qemu_args(&image())
            .unwrap_err();
        assert_eq!(
            missing.to_string(),
            "disk image not found at /nonexistent/disk.img"
        );
    }
}
