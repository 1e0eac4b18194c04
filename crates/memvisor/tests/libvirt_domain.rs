//! libvirt hosts (issue 12, deliverable 5): a real libvirt daemon starts a domain whose
//! `<emulator>` is `contrib/libvirt/memvisor-qemu`, and the domain's QEMU runs under
//! `memvisor run` with the budget written in the domain's metadata.
//!
//! The daemon is `virtqemud`, or `libvirtd` where the modular daemons are not packaged (Debian
//! 12), run as root with a private configuration in a fresh 0700 directory. A root daemon's
//! paths (`/etc/libvirt/qemu.conf`, `/run/libvirt`, `/var/lib/libvirt`, ...) are fixed when
//! libvirt is built, so the daemon runs in a mount namespace of its own (`unshare --mount`)
//! where the directory's `etc`, `run` and `var` are bound over `/etc/libvirt`, `/run` and
//! `/var`: nothing of the host's libvirt is read or written, and a system daemon, if any, is
//! neither seen nor disturbed. `virsh -c qemu:///system?socket=DIR/sock/...` talks to it.
//!
//! The domain is `contrib/libvirt/domain-example.xml` with its paths replaced: the test guest of
//! `crates/testvm` (TCG, direct kernel boot, 256 MiB of `memfd` guest RAM, a 64M budget in its
//! metadata) writes 128 MiB of checksummed pages, reads them back twice, verifies every page
//! and idles. The test checks that
//! - the process libvirt started for the domain (its pid file) is `memvisor run`, and the QEMU
//!   under it is managed: `memvisor stat --json` shows the budget from the metadata and a
//!   `guest-memfd` region of the guest's 256 MiB, and QEMU got `memory-backend-memfd` with
//!   `share`;
//! - the guest verifies every page, and its pages went out to swap and came back (page-outs,
//!   page-ins, bytes written) with residency within the budget all along;
//! - `virsh destroy` ends QEMU and `memvisor run`, and once the daemon is stopped no process
//!   of the test is left (cgroups are off in its qemu.conf: nothing is made in /sys/fs/cgroup).
//!
//! Skipped (a `SKIPPED` line) only when no libvirt daemon is installed, and failing then under
//! `CI=true` (scripts/install installs libvirt). Needs root: a system daemon, mount namespaces
//! and userfaultfd for a QEMU libvirt starts.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use memvisor_control::{ProcessStatus, RegionStatus};
use memvisor_testvm::{
    isolate, kill_group, parse_result_line, GuestImage, MemPhaseKind, WorkloadResult,
};

const MIB: u64 = 1 << 20;
/// The example domain's name, RAM, budget (its metadata) and workload size.
const DOMAIN: &str = "memvisor-example";
const GUEST_MIB: u64 = 256;
const BUDGET_BYTES: u64 = 64 * MIB;
const DATA_MIB: u64 = 128;
/// How long the guest may take from `virsh start` to its last verified phase.
const GUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one `virsh` command may take.
const VIRSH_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the daemon may take to open its socket, and to exit when told to.
const DAEMON_TIMEOUT: Duration = Duration::from_secs(30);
/// How often `memvisor stat` and the console are read while the guest runs.
const POLL: Duration = Duration::from_millis(250);

/// The workspace root.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// A libvirt daemon that runs QEMU domains: its program, configuration file and socket names.
struct DaemonKind {
    program: PathBuf,
    config_file: &'static str,
    socket: &'static str,
}

/// `virtqemud` if installed, else `libvirtd`.
fn find_daemon() -> Option<DaemonKind> {
    let kinds = [
        ("virtqemud", "virtqemud.conf", "virtqemud-sock"),
        ("libvirtd", "libvirtd.conf", "libvirt-sock"),
    ];
    for (name, config_file, socket) in kinds {
        for dir in ["/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/bin"] {
            let program = Path::new(dir).join(name);
            if program.is_file() {
                return Some(DaemonKind {
                    program,
                    config_file,
                    socket,
                });
            }
        }
    }
    None
}

/// Whether `cmd` is found on PATH.
fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

/// Text with `&`, `<`, `>`, `'` and `"` escaped for XML.
fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\'', "&apos;")
        .replace('"', "&quot;")
}

/// `path` as UTF-8 (every path here is made of the temporary directory and the workspace).
fn utf8(path: &Path) -> &str {
    path.to_str()
        .unwrap_or_else(|| panic!("{} is not UTF-8", path.display()))
}

/// The last `n` lines of the file at `path` (empty if unreadable).
fn file_tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Runs `cmd` to completion within `limit`; killed and reported in one line after it.
fn output_within(mut cmd: Command, what: &str, limit: Duration) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let readers = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .map(|r| {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut bytes);
            }
            bytes
        })
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {} s", limit.as_secs());
        }
        thread::sleep(Duration::from_millis(20));
    };
    let [stdout, stderr] = readers.map(|r| r.join().unwrap());
    Output {
        status,
        stdout,
        stderr,
    }
}

/// Fields of `/proc/PID/stat` after the command name: state, ppid, ...; `None` once gone.
fn proc_stat(pid: u32) -> Option<Vec<String>> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// True while `pid` runs (a zombie has ended).
fn alive(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|f| f[0] != "Z")
}

/// The parent of `pid`.
fn parent_of(pid: u32) -> Option<u32> {
    proc_stat(pid)?.get(1)?.parse().ok()
}

/// The executable of `pid`.
fn exe_of(pid: u32) -> Option<PathBuf> {
    fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// Whether `haystack` contains `needle`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// A root libvirt daemon with a private configuration, in its own mount namespace, and the
/// directory holding all of its state. Dropping it kills whatever of it is left.
struct PrivateLibvirt {
    daemon: Child,
    /// The daemon's mount namespace (`/proc/PID/ns/mnt`), to recognize what it started.
    mount_ns: PathBuf,
    uri: String,
    dir: tempfile::TempDir,
}

impl PrivateLibvirt {
    /// Writes the configuration and starts the daemon; returns once its socket answers.
    fn start(kind: &DaemonKind) -> PrivateLibvirt {
        let dir = tempfile::Builder::new()
            .prefix("memvisor-libvirt-")
            .tempdir()
            .unwrap();
        let d = dir.path().to_path_buf();
        fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).unwrap();
        for hidden in ["/run", "/var", "/etc/libvirt"] {
            assert!(
                !d.starts_with(hidden),
                "the temporary directory {} is under {hidden}, which the daemon's namespace \
                 replaces; set TMPDIR elsewhere",
                d.display()
            );
        }
        assert!(
            Path::new("/etc/libvirt").is_dir(),
            "/etc/libvirt is missing (libvirt-daemon creates it; scripts/install installs it)"
        );
        for sub in [
            "etc",
            "run",
            "var/lib",
            "var/log",
            "var/cache",
            "var/tmp",
            "sock",
        ] {
            fs::create_dir_all(d.join(sub)).unwrap();
        }
        fs::set_permissions(d.join("var/tmp"), fs::Permissions::from_mode(0o1777)).unwrap();
        for private in ["ctl", "swap"] {
            fs::create_dir(d.join(private)).unwrap();
            fs::set_permissions(d.join(private), fs::Permissions::from_mode(0o700)).unwrap();
        }
        let p = |sub: &str| utf8(&d.join(sub)).to_string();
        fs::write(
            d.join("etc").join(kind.config_file),
            format!(
                "unix_sock_dir = \"{}\"\nunix_sock_rw_perms = \"0700\"\n\
                 unix_sock_ro_perms = \"0700\"\nauth_unix_rw = \"none\"\n\
                 auth_unix_ro = \"none\"\nlog_outputs = \"3:file:{}\"\n",
                p("sock"),
                p("daemon.log")
            ),
        )
        .unwrap();
        // QEMU as root, as README.md says: memvisor run needs userfaultfd. No AppArmor or
        // SELinux profile (the wrapper and memvisor are not in libvirt's), console and log
        // files without virtlogd, and no cgroups, so that nothing is left in /sys/fs/cgroup.
        fs::write(
            d.join("etc/qemu.conf"),
            "user = \"root\"\ngroup = \"root\"\nsecurity_driver = \"none\"\n\
             stdio_handler = \"file\"\ncgroup_controllers = [ ]\n",
        )
        .unwrap();
        // The wrapper's configuration: this build's memvisor, private swap and control
        // directories. Found by the wrapper at /etc/libvirt/memvisor-qemu.conf (here: etc/).
        let memvisor = fs::canonicalize(memvisor_bin()).unwrap();
        let wrapper_conf = d.join("etc/memvisor-qemu.conf");
        fs::write(
            &wrapper_conf,
            format!(
                "# written by crates/memvisor/tests/libvirt_domain.rs\nmemvisor = {}\n\
                 swap_dir = {}\ncontrol_dir = {}\n",
                utf8(&memvisor),
                p("swap"),
                p("ctl")
            ),
        )
        .unwrap();
        fs::set_permissions(&wrapper_conf, fs::Permissions::from_mode(0o600)).unwrap();

        let log = fs::File::create(d.join("daemon.out")).unwrap();
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
            .arg(
                "set -eu\n\
                 mount --bind \"$1/etc\" /etc/libvirt\n\
                 mount --bind \"$1/run\" /run\n\
                 mount --bind \"$1/var\" /var\n\
                 exec \"$2\" --config \"$1/etc/$3\"",
            )
            .arg("memvisor-libvirt-namespace")
            .arg(&d)
            .arg(&kind.program)
            .arg(kind.config_file)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        isolate(&mut cmd);
        let daemon = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start unshare (util-linux): {e}"));
        let socket = d.join("sock").join(kind.socket);
        let mut host = PrivateLibvirt {
            daemon,
            mount_ns: PathBuf::new(),
            uri: format!("qemu:///system?socket={}", utf8(&socket)),
            dir,
        };
        let start = Instant::now();
        loop {
            if let Some(status) = host.daemon.try_wait().unwrap() {
                panic!(
                    "{} exited ({status}) before opening {} (scripts/install installs libvirt \
                     and creates the libvirt-qemu user its QEMU driver requires):\n{}\n{}",
                    kind.program.display(),
                    socket.display(),
                    file_tail(&host.path("daemon.out"), 10),
                    file_tail(&host.path("daemon.log"), 10)
                );
            }
            if UnixStream::connect(&socket).is_ok() {
                break;
            }
            assert!(
                start.elapsed() < DAEMON_TIMEOUT,
                "{} did not open {} within {} s:\n{}",
                kind.program.display(),
                socket.display(),
                DAEMON_TIMEOUT.as_secs(),
                file_tail(&host.path("daemon.log"), 10)
            );
            thread::sleep(Duration::from_millis(50));
        }
        // The namespace is the daemon's once the socket is there (the mounts come first).
        host.mount_ns = fs::read_link(format!("/proc/{}/ns/mnt", host.daemon.id())).unwrap();
        host
    }

    /// A path in the private directory.
    fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    /// The domain's log (QEMU's command line and stderr, the wrapper's lines).
    fn domain_log(&self) -> PathBuf {
        self.path(&format!("var/log/libvirt/qemu/{DOMAIN}.log"))
    }

    /// `virsh -c URI ARGS`, which must succeed; its standard output.
    fn virsh(&self, args: &[&OsStr]) -> String {
        let mut cmd = Command::new("virsh");
        cmd.arg("-c").arg(&self.uri).args(args);
        let words: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
        let what = format!("virsh {}", words.join(" "));
        let o = output_within(cmd, &what, VIRSH_TIMEOUT);
        assert!(
            o.status.success(),
            "{what}: {}\n{}\ndomain log:\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim(),
            file_tail(&self.domain_log(), 8)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// The example domain with its paths replaced: the wrapper of this checkout, the built
    /// guest, a console file here. Each replaced text must be in the example.
    fn domain_xml(&self, image: &GuestImage) -> PathBuf {
        let example = workspace_root().join("contrib/libvirt/domain-example.xml");
        let wrapper = workspace_root().join("contrib/libvirt/memvisor-qemu");
        let mut xml = fs::read_to_string(&example).unwrap();
        let console = self.path("console.log");
        for (from, to) in [
            ("/usr/local/libexec/memvisor-qemu", &wrapper),
            (
                "/var/lib/libvirt/images/memvisor-guest/vmlinuz",
                &image.kernel,
            ),
            (
                "/var/lib/libvirt/images/memvisor-guest/initramfs.cpio",
                &image.initramfs,
            ),
            (
                "/var/log/libvirt/qemu/memvisor-example-console.log",
                &console,
            ),
        ] {
            assert_eq!(
                xml.matches(from).count(),
                1,
                "{} must name {from} once",
                example.display()
            );
            xml = xml.replace(from, &xml_escape(utf8(to)));
        }
        let path = self.path("domain.xml");
        fs::write(&path, xml).unwrap();
        path
    }

    /// Processes this daemon started that are still there: in its mount namespace, or naming
    /// the private directory in their command line or environment (QEMU runs in a namespace
    /// of its own, with the wrapper's MEMVISOR_CONTROL_DIR). Zombies have ended.
    fn leftovers(&self) -> Vec<(u32, String)> {
        let me = std::process::id();
        let dir = self.dir.path().as_os_str().as_encoded_bytes();
        let mut found = Vec::new();
        for entry in fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if pid == me || !alive(pid) {
                continue;
            }
            let ns = fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let environ = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            if ns.as_ref() == Some(&self.mount_ns)
                || contains(&cmdline, dir)
                || contains(&environ, dir)
            {
                let shown: String = String::from_utf8_lossy(&cmdline)
                    .replace('\0', " ")
                    .chars()
                    .take(120)
                    .collect();
                found.push((pid, shown));
            }
        }
        found
    }

    /// Stops the daemon (SIGTERM, as an init system would) and checks that nothing it started
    /// is left.
    fn stop(mut self) {
        // SAFETY: kill(2) of our own child, not yet waited for.
        unsafe { libc::kill(self.daemon.id() as libc::pid_t, libc::SIGTERM) };
        let start = Instant::now();
        while self.daemon.try_wait().unwrap().is_none() {
            assert!(
                start.elapsed() < DAEMON_TIMEOUT,
                "the daemon did not exit within {} s of SIGTERM",
                DAEMON_TIMEOUT.as_secs()
            );
            thread::sleep(Duration::from_millis(50));
        }
        let start = Instant::now();
        loop {
            let left = self.leftovers();
            if left.is_empty() {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "processes left after the daemon stopped: {left:?}"
            );
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for PrivateLibvirt {
    fn drop(&mut self) {
        // The domain (libvirt daemonizes it in a session of its own): its memvisor run first,
        // whose QEMU follows (PR_SET_PDEATHSIG); then the daemon's group; then anything else.
        let pid_file = self.path(&format!("run/libvirt/qemu/{DOMAIN}.pid"));
        if let Some(pid) = fs::read_to_string(pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
            .filter(|&p| {
                p > 1
                    && exe_of(p)
                        .and_then(|e| e.file_name().map(|n| n.to_owned()))
                        .is_some_and(|n| {
                            let n = n.to_string_lossy();
                            n.starts_with("memvisor") || n.starts_with("qemu-system")
                        })
            })
        {
            // SAFETY: kill(2) of the domain's process, named by the daemon's pid file.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        kill_group(self.daemon.id());
        let _ = self.daemon.wait();
        for (pid, _) in self.leftovers() {
            // SAFETY: kill(2) of a process this daemon started (see `leftovers`).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
    }
}

/// The `guest-memfd` region of the guest's RAM in a status.
fn guest_region(status: &ProcessStatus) -> Option<&RegionStatus> {
    status
        .regions
        .iter()
        .find(|r| r.kind == "guest-memfd" && r.size_bytes == GUEST_MIB * MIB)
}

#[test]
fn libvirt_domain_runs_under_memvisor() {
    let test = "libvirt_domain_runs_under_memvisor";
    let Some(kind) = find_daemon() else {
        let reason = "no libvirt daemon (virtqemud or libvirtd) is installed";
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{test}: {reason} (CI=true: scripts/install must install libvirt-daemon)");
        }
        eprintln!("SKIPPED {test}: {reason}; scripts/install installs libvirt-daemon");
        return;
    };
    // SAFETY: geteuid(2) has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "{test} must run as root: it starts a system libvirt daemon in a mount namespace"
    );
    for (cmd, package) in [
        ("virsh", "libvirt-clients"),
        ("xmllint", "libxml2-utils"),
        ("unshare", "util-linux"),
    ] {
        assert!(
            on_path(cmd),
            "{cmd} not found on PATH (Debian package {package}; scripts/install installs it)"
        );
    }
    let Some(image) = GuestImage::for_test(test) else {
        return;
    };
    ensure_preload_library();
    let started = Instant::now();
    let host = PrivateLibvirt::start(&kind);
    let daemon_up = started.elapsed();
    let ctl = host.path("ctl");

    let xml = host.domain_xml(&image);
    host.virsh(&["define".as_ref(), xml.as_os_str()]);
    host.virsh(&["start".as_ref(), DOMAIN.as_ref()]);
    let domain_started = started.elapsed();

    // The process libvirt started and watches (its pid file) is memvisor run.
    let pid_file = host.path(&format!("run/libvirt/qemu/{DOMAIN}.pid"));
    let run_pid: u32 = fs::read_to_string(&pid_file)
        .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()))
        .trim()
        .parse()
        .unwrap();
    let memvisor = fs::canonicalize(memvisor_bin()).unwrap();
    assert_eq!(
        exe_of(run_pid),
        Some(memvisor.clone()),
        "libvirt's process for the domain (pid {run_pid}) is not {}:\n{}",
        memvisor.display(),
        file_tail(&host.domain_log(), 8)
    );
    // The wrapper took the budget from the domain's metadata in libvirt's status XML.
    let log = fs::read_to_string(host.domain_log()).unwrap();
    let expected = format!(
        "memvisor-qemu: domain {DOMAIN}: memvisor run --budget 64M (64M; domain metadata in \
         /run/libvirt/qemu/{DOMAIN}.xml)"
    );
    assert!(
        log.contains(&expected),
        "no `{expected}` in the domain log:\n{log}"
    );

    // Its child, QEMU, is the managed process: it shows its guest RAM within 30 s.
    let wait_start = Instant::now();
    let (qemu_pid, first) = loop {
        let managed = memvisor_control::socket_dir::list_managed_pids(&ctl).unwrap_or_default();
        if let Some(s) = managed.iter().find_map(|&pid| try_stat_json(&ctl, pid)) {
            if guest_region(&s).is_some() {
                break (s.pid, s);
            }
        }
        assert!(
            wait_start.elapsed() < Duration::from_secs(30),
            "no process under {} showed a guest-memfd region of {GUEST_MIB} MiB (managed: \
             {managed:?})\ndomain log:\n{}",
            ctl.display(),
            file_tail(&host.domain_log(), 8)
        );
        thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(parent_of(qemu_pid), Some(run_pid), "QEMU's parent");
    assert_eq!(first.program, "qemu-system-x86_64");
    assert_eq!(
        first.budget_bytes, BUDGET_BYTES,
        "budget from the metadata: {first:?}"
    );
    let qemu_exe = exe_of(qemu_pid).unwrap();
    assert!(
        qemu_exe
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("qemu-system-x86_64")),
        "{}",
        qemu_exe.display()
    );
    let cmdline = fs::read(format!("/proc/{qemu_pid}/cmdline")).unwrap();
    assert!(
        contains(&cmdline, b"memory-backend-memfd")
            && (contains(&cmdline, b"\"share\":true") || contains(&cmdline, b"share=on")),
        "QEMU's guest RAM is not a shared memfd: {}",
        String::from_utf8_lossy(&cmdline).replace('\0', " ")
    );

    // The guest runs: its console (a file libvirt opens and passes to QEMU with -add-fd)
    // reaches the last verified phase, while memvisor stat is polled.
    let console = host.path("console.log");
    let mut samples = vec![(started.elapsed(), first)];
    let mut phases = Vec::new();
    let mut seen_lines = 0;
    let verified = loop {
        let text = fs::read_to_string(&console).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        for (i, line) in complete.lines().enumerate().skip(seen_lines) {
            match parse_result_line(line, i + 1) {
                Some(Ok(WorkloadResult::Mem(phase))) => phases.push(phase),
                Some(Ok(WorkloadResult::Error { message })) => {
                    panic!(
                        "the guest reports an error: {message}\n{}",
                        file_tail(&console, 10)
                    )
                }
                Some(Err(e)) => panic!("{e}"),
                _ => {}
            }
            seen_lines = i + 1;
        }
        if let Some(s) = try_stat_json(&ctl, qemu_pid) {
            assert_within_budget(&s, started.elapsed());
            samples.push((started.elapsed(), s));
        }
        if phases
            .last()
            .is_some_and(|p| p.kind == MemPhaseKind::Verify)
        {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < domain_started + GUEST_TIMEOUT,
            "the guest did not finish its phases within {} s; console:\n{}\ndomain log:\n{}",
            GUEST_TIMEOUT.as_secs(),
            file_tail(&console, 10),
            file_tail(&host.domain_log(), 5)
        );
        thread::sleep(POLL);
    };
    let kinds: Vec<_> = phases.iter().map(|p| p.kind).collect();
    assert_eq!(
        kinds,
        [
            MemPhaseKind::Write,
            MemPhaseKind::Seq,
            MemPhaseKind::Rev,
            MemPhaseKind::Verify
        ]
    );
    let pages = DATA_MIB * MIB / 4096;
    for phase in &phases {
        assert!(phase.ok && phase.errors == 0, "{phase:?}");
        assert_eq!(
            (phase.mib, phase.pages, phase.reads),
            (DATA_MIB, pages, pages)
        );
    }

    // Now the guest idles: its counters say where its pages went.
    let last = try_stat_json(&ctl, qemu_pid).expect("memvisor stat of the idle guest's QEMU");
    assert_within_budget(&last, started.elapsed());
    assert_eq!(last.budget_bytes, BUDGET_BYTES);
    let g = guest_region(&last).expect("the guest-memfd region").clone();
    // 128 MiB of data through a 64 MiB budget: at least 64 MiB of it was written out, and the
    // reads brought pages back.
    assert!(g.page_outs > 0 && g.page_ins > 0, "{g:?}");
    assert!(
        g.bytes_written >= (DATA_MIB * MIB).saturating_sub(BUDGET_BYTES),
        "only {} bytes written to swap: {g:?}",
        g.bytes_written
    );
    assert!(g.bytes_read > 0 && g.swapped_bytes > 0, "{g:?}");
    let peak = samples
        .iter()
        .filter_map(|(_, s)| guest_region(s).map(|r| r.resident_bytes))
        .max()
        .unwrap_or(0);
    assert!(
        peak >= BUDGET_BYTES / 2,
        "guest RAM resident at most {peak} bytes"
    );

    // virsh destroy (libvirt signals memvisor run, which passes it on to QEMU) ends both; the
    // control socket goes with them.
    host.virsh(&["destroy".as_ref(), DOMAIN.as_ref()]);
    let destroy_start = Instant::now();
    while alive(run_pid) || alive(qemu_pid) {
        assert!(
            destroy_start.elapsed() < Duration::from_secs(15),
            "after virsh destroy: memvisor run {run_pid} alive {}, QEMU {qemu_pid} alive {}",
            alive(run_pid),
            alive(qemu_pid)
        );
        thread::sleep(Duration::from_millis(50));
    }
    let socket = memvisor_control::socket_dir::socket_path(&ctl, qemu_pid);
    assert!(!socket.exists(), "{} left behind", socket.display());
    let state = host.virsh(&["domstate".as_ref(), DOMAIN.as_ref()]);
    assert_eq!(state.trim(), "shut off");
    host.virsh(&["undefine".as_ref(), DOMAIN.as_ref()]);
    let destroyed = started.elapsed();
    host.stop();
    eprintln!(
        "{test}: {} s in all: daemon up at {:.1} s, domain started at {:.1} s, guest verified \
         at {:.1} s, destroyed at {:.1} s; {} stat samples; guest-memfd: resident {} MiB (peak \
         {} MiB), swapped {} MiB, page-outs {}, page-ins {}, written {} MiB, read {} MiB",
        started.elapsed().as_secs_f64().round(),
        daemon_up.as_secs_f64(),
        domain_started.as_secs_f64(),
        verified.as_secs_f64(),
        destroyed.as_secs_f64(),
        samples.len(),
        g.resident_bytes / MIB,
        peak / MIB,
        g.swapped_bytes / MIB,
        g.page_outs,
        g.page_ins,
        g.bytes_written / MIB,
        g.bytes_read / MIB
    );
}
