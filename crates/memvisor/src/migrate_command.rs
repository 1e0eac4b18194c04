//! `memvisor migrate PID`: live migration of a QEMU running under `memvisor run` to a
//! destination QEMU running under `memvisor run --migration-listen ADDR --migration-key FILE
//! ... -incoming defer` (seed 003, section 3).
//!
//! memvisor moves guest memory itself, pager to pager, and QEMU only device state (capability
//! `x-ignore-shared`; `return-path` so a failed load reaches the source;
//! `pause-before-switchover` so the last memory round runs with the guest paused):
//!
//! 1. the source pager sends every chunk holding data (resident ones first, swapped ones
//!    straight from its swap file) while the guest runs, then rounds of what changed, until a
//!    round's changes fit the downtime limit;
//! 2. the source QEMU starts its device-state migration and stops in `pre-switchover`;
//! 3. the last memory round goes, the destination acknowledges every page;
//! 4. `migrate-continue`: QEMU sends device state, the destination loads it (guest memory is
//!    complete by then) and runs.
//!
//! Post-copy (`--post-copy`; by default `auto`: when the last round would pause the guest
//! longer than naming its pages does) replaces step 3: the pages changed last are only named,
//! the destination acknowledges at once, and they follow after step 4 while the destination's
//! guest runs (its faults on them wait, and are served first). A connection lost during that
//! push is resumed: the source reconnects until it gets through.
//!
//! Any failure before step 4 cancels both migrations: the source guest keeps running, the
//! destination discards what it received and listens again. Once QEMU sent the device state
//! (or may have: `migrate-continue` failed without saying whether it ran, or a step after
//! QEMU's completion failed), and after a post-copy switch-over, nothing is rolled back: the
//! destination's guest may run, so the source's stays paused. Both QEMUs' migration
//! capabilities and parameters are put back as they were at the end, whatever the outcome.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use memvisor_control::{
    format_bytes, parse_duration, socket_dir, ByteSize, ControlClient, ControlError, MigrateRules,
    MigrationStatus, PostCopy, Request,
};
use memvisor_migration::MigrationKey;
use memvisor_qmp::{QmpAddress, QmpClient, QmpError};

/// Arguments of `memvisor migrate`.
#[derive(Debug, Args)]
#[command(after_help = "\
The destination QEMU must run under `memvisor run --migration-listen IP:PORT --migration-key \
FILE`, started with `-incoming defer` (or `-incoming URI` equal to --device-uri), the same \
guest RAM size, and guest RAM that memvisor manages: memory-backend-memfd,share=on, or \
memory-backend-file,mem-path=<tmpfs>,share=on (needed from QEMU 8.1 on). Both QEMUs need a QMP \
socket.

Example (one host):
  memvisor migrate 4242 --to 127.0.0.1:7070 --key /etc/memvisor/migration.key \\
      --qmp /run/src.qmp --dest-qmp /run/dst.qmp --device-uri tcp:127.0.0.1:7071")]
pub struct MigrateArgs {
    /// Process id of the source QEMU (started by `memvisor run`).
    pid: u32,
    /// The destination's memory address (its --migration-listen), IP:PORT.
    #[arg(long, value_name = "IP:PORT")]
    to: String,
    /// Shared key file (32 to 4096 bytes, mode 0600; the destination's --migration-key).
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    /// QMP socket of the source QEMU (PATH, unix:PATH or tcp:HOST:PORT).
    #[arg(long, value_name = "ADDR")]
    qmp: String,
    /// QMP socket of the destination QEMU.
    #[arg(long, value_name = "ADDR")]
    dest_qmp: String,
    /// Where the source QEMU sends device state (the destination's -incoming URI).
    #[arg(long, value_name = "URI")]
    device_uri: String,
    /// Memory bandwidth limit (bytes per second: 100M, 1G); unlimited by default.
    #[arg(long, value_name = "SIZE")]
    max_bandwidth: Option<String>,
    /// Rounds end once one round's changes would go in this long.
    #[arg(long, value_name = "DURATION", default_value = "300ms")]
    downtime_limit: String,
    /// Give up (cancelling cleanly) if the memory rounds have not converged by then.
    #[arg(long, value_name = "DURATION", default_value = "600s")]
    converge_timeout: String,
    /// When to post-copy the last round: never, auto or always (`--post-copy` alone:
    /// always). Post-copy only names the pages changed since they were sent while the guest
    /// is paused; the destination's guest resumes at once and they follow, the ones it
    /// touches first. A shorter pause; but once switched over, the VM needs the source's
    /// memvisor until the last page arrived (a lost connection is resumed; a lost source
    /// process leaves the destination's guest waiting on the pages that did not arrive, as
    /// with QEMU's post-copy). auto: only when the last round would take longer than 5 ms.
    #[arg(
        long,
        value_name = "WHEN",
        default_value = "auto",
        default_missing_value = "always",
        num_args = 0..=1,
        require_equals = true
    )]
    post_copy: String,
}

/// Why `memvisor migrate` failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// An argument is malformed or refused.
    #[error("{0}")]
    Argument(String),
    /// The control socket of the source.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// A QMP exchange.
    #[error(transparent)]
    Qmp(#[from] QmpError),
    /// The migration failed; both sides were rolled back.
    #[error("{0}")]
    Failed(String),
}

const QMP_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(50);
/// Polling while the guest is paused (every millisecond there is downtime).
const PAUSED_POLL: Duration = Duration::from_millis(1);

/// The name the device-state connection has in the source QEMU (`getfd`, `fd:NAME`).
const DEVICE_STATE_FD: &str = "memvisor-device-state";

/// Runs the whole migration and prints progress (stderr) and a summary (stdout).
pub fn run(args: MigrateArgs) -> Result<(), MigrateError> {
    let arg = |e: String| MigrateError::Argument(e);
    let max_bandwidth = match &args.max_bandwidth {
        Some(t) => match ByteSize::parse(t).map_err(|e| arg(format!("--max-bandwidth: {e}")))? {
            ByteSize::Bytes(b) => Some(b),
            ByteSize::Percent(_) => {
                return Err(arg(format!(
                    "--max-bandwidth {t}: give bytes per second, not a percentage"
                )))
            }
        },
        None => None,
    };
    let duration = |flag: &str, text: &str| match parse_duration(text) {
        Ok(Some(d)) => Ok(d),
        Ok(None) => Err(arg(format!("--{flag} {text}: must be more than 0"))),
        Err(e) => Err(arg(format!("--{flag} {text}: {e}"))),
    };
    let post_copy: PostCopy = args
        .post_copy
        .parse()
        .map_err(|e| arg(format!("--post-copy: {e}")))?;
    let downtime = duration("downtime-limit", &args.downtime_limit)?;
    let converge_timeout = duration("converge-timeout", &args.converge_timeout)?;
    let key_file = std::path::absolute(&args.key)
        .map_err(|e| arg(format!("--key {}: {e}", args.key.display())))?;
    let key_text = key_file.to_string_lossy().into_owned();
    let downtime_ms = downtime.as_millis() as u64;
    MigrateRules.check(&args.to, &key_text, max_bandwidth, downtime_ms)?;
    MigrationKey::load(&key_file).map_err(|e| arg(format!("--key: {e}")))?;
    let qmp_addr = |flag: &str, text: &str| {
        text.parse::<QmpAddress>()
            .map_err(|e| arg(format!("--{flag}: {e}")))
    };
    let (src_addr, dst_addr) = (
        qmp_addr("qmp", &args.qmp)?,
        qmp_addr("dest-qmp", &args.dest_qmp)?,
    );

    let mut control = ControlClient::connect(&socket_dir::find_socket_dir(args.pid), args.pid)?;
    let mut src = QmpClient::connect(&src_addr, QMP_TIMEOUT)?;
    let mut dst = QmpClient::connect(&dst_addr, QMP_TIMEOUT)?;
    let was_running = src.query_status()?.running;
    let dst_state = dst.query_status()?.status;
    if dst_state != "inmigrate" {
        return Err(arg(format!(
            "the destination QEMU ({dst_addr}) is '{dst_state}', not waiting for a migration \
             (start it with -incoming defer)"
        )));
    }
    // What memvisor changes on each QEMU, as it was: put back at the end, whatever happens (a
    // VM left with x-ignore-shared on would lose its shared RAM in a later plain migration).
    let src_saved = SavedSettings::take(&mut src, SOURCE_CAPABILITIES, SOURCE_PARAMETERS)?;
    let dst_saved = SavedSettings::take(&mut dst, DESTINATION_CAPABILITIES, &[])?;

    // From here on, Ctrl-C (SIGINT, SIGTERM, SIGHUP) rolls both migrations back instead of
    // leaving the source paused at pre-switchover or sending rounds forever.
    memvisor_control::interrupt::install();
    let started = Instant::now();
    let mut run = Migration {
        control: &mut control,
        src: &mut src,
        dst: &mut dst,
        src_saved,
        dst_saved,
        was_running,
        qemu_started: false,
        switched_over: false,
        last_print: Instant::now(),
    };
    let request = Request::Migrate {
        to: args.to.clone(),
        key_file: key_text,
        max_bandwidth,
        downtime_limit_ms: downtime_ms,
        post_copy,
    };
    let outcome = run
        .set_up(downtime_ms, max_bandwidth, &request)
        .and_then(|()| run.drive(&args.device_uri, converge_timeout));
    match outcome {
        Ok(summary) => {
            run.restore_settings();
            print_summary(&summary, started.elapsed());
            Ok(())
        }
        Err(e) => {
            run.roll_back();
            Err(e)
        }
    }
}

/// Capabilities memvisor sets on the source QEMU.
const SOURCE_CAPABILITIES: &[&str] = &["x-ignore-shared", "return-path", "pause-before-switchover"];
/// Capabilities memvisor sets on the destination QEMU.
const DESTINATION_CAPABILITIES: &[&str] = &["x-ignore-shared", "return-path"];
/// Parameters memvisor sets on the source QEMU.
const SOURCE_PARAMETERS: &[&str] = &["downtime-limit", "max-bandwidth"];

/// QEMU migration statuses after which the device state has gone, or may have: the
/// destination's guest may run, so the source's must not run again.
const SWITCHED_OVER: &[&str] = &[
    "device",
    "completed",
    "postcopy-active",
    "postcopy-paused",
    "postcopy-recover-setup",
    "postcopy-recover",
];

/// The migration capabilities and parameters of one QEMU that memvisor changes, as they were
/// before: put back after the migration, whether it completed or was rolled back.
struct SavedSettings {
    capabilities: Vec<(String, bool)>,
    parameters: serde_json::Map<String, serde_json::Value>,
}

impl SavedSettings {
    /// Reads the present state of `capabilities` and `parameters` on `qmp`.
    fn take(
        qmp: &mut QmpClient,
        capabilities: &[&str],
        parameters: &[&str],
    ) -> Result<Self, QmpError> {
        let all = qmp.query_migration_capabilities()?;
        let capabilities = capabilities
            .iter()
            .map(|name| {
                let state = all.iter().find(|(n, _)| n == name).is_some_and(|(_, s)| *s);
                (name.to_string(), state)
            })
            .collect();
        let present = if parameters.is_empty() {
            serde_json::Value::Null
        } else {
            qmp.query_migration_parameters()?
        };
        let parameters = parameters
            .iter()
            .filter_map(|name| Some((name.to_string(), present.get(*name)?.clone())))
            .collect();
        Ok(Self {
            capabilities,
            parameters,
        })
    }

    /// Sets them back on `qmp` (only possible while no migration is active there).
    fn restore(&self, qmp: &mut QmpClient) -> Result<(), QmpError> {
        let caps: Vec<(&str, bool)> = self
            .capabilities
            .iter()
            .map(|(n, s)| (n.as_str(), *s))
            .collect();
        qmp.set_migration_capabilities(&caps)?;
        if !self.parameters.is_empty() {
            qmp.set_migration_parameters(serde_json::Value::Object(self.parameters.clone()))?;
        }
        Ok(())
    }
}

/// A running migration's two QMP clients and the source's control socket.
struct Migration<'a> {
    control: &'a mut ControlClient,
    src: &'a mut QmpClient,
    dst: &'a mut QmpClient,
    /// The source's and the destination's settings before the migration.
    src_saved: SavedSettings,
    dst_saved: SavedSettings,
    was_running: bool,
    qemu_started: bool,
    /// Post-copy: `migrate-continue` was sent with pages still at the source; the
    /// destination's guest may run, so nothing may be rolled back.
    switched_over: bool,
    last_print: Instant,
}

/// What a completed migration reports.
struct Summary {
    memory: MigrationStatus,
    /// From the pause at `pre-switchover` until the destination acknowledged the last round.
    last_round: Duration,
    /// From `migrate-continue` until the source QEMU completed (device state sent and loaded).
    switchover: Duration,
    downtime_ms: Option<u64>,
    device_bytes: Option<u64>,
    destination_state: String,
    /// Post-copy: pages named at the pause, and from `migrate-continue` until the last of
    /// them arrived.
    post_copy: Option<(u64, Duration)>,
}

impl Migration<'_> {
    /// Sets QEMU's capabilities and parameters for memvisor's migration on both ends and
    /// starts the source pager's memory migration (`request`).
    fn set_up(
        &mut self,
        downtime_ms: u64,
        max_bandwidth: Option<u64>,
        request: &Request,
    ) -> Result<(), MigrateError> {
        let on = |names: &[&'static str]| names.iter().map(|n| (*n, true)).collect::<Vec<_>>();
        self.src
            .set_migration_capabilities(&on(SOURCE_CAPABILITIES))?;
        self.dst
            .set_migration_capabilities(&on(DESTINATION_CAPABILITIES))?;
        let mut params = serde_json::json!({ "downtime-limit": downtime_ms });
        if let Some(b) = max_bandwidth {
            params["max-bandwidth"] = b.into();
        }
        self.src.set_migration_parameters(params)?;
        self.control.migrate(request)?;
        Ok(())
    }

    /// Puts both QEMUs' capabilities and parameters back as they were (a failure is told, not
    /// fatal: the migration's outcome stands).
    fn restore_settings(&mut self) {
        for (qmp, saved, end) in [
            (&mut *self.src, &self.src_saved, "source"),
            (&mut *self.dst, &self.dst_saved, "destination"),
        ] {
            if let Err(e) = saved.restore(qmp) {
                eprintln!(
                    "memvisor: warning: the {end} QEMU's migration capabilities and parameters \
                     could not be put back: {e}"
                );
            }
        }
    }

    /// Whether the source QEMU's migration has sent, or may have sent, the device state
    /// (then the destination's guest may run). Unknown (QMP does not answer) counts as sent:
    /// two running copies of a guest would be worse than a paused one.
    fn device_state_may_have_gone(&mut self) -> bool {
        self.src
            .query_migrate()
            .map_or(true, |m| SWITCHED_OVER.contains(&m.status.as_str()))
    }

    fn drive(
        &mut self,
        device_uri: &str,
        converge_timeout: Duration,
    ) -> Result<Summary, MigrateError> {
        // 1. Memory rounds while the guest runs.
        let deadline = Instant::now() + converge_timeout;
        let m = self.wait_memory(&["converged"], Some(deadline), POLL)?;
        eprintln!(
            "memvisor: memory converged after {} rounds ({} pages, {}); starting device state",
            m.rounds,
            m.pages,
            format_bytes(m.wire_bytes)
        );
        // 2. Device state, up to the pause.
        match self.dst.migrate_incoming(device_uri) {
            Ok(()) => {}
            // Started with `-incoming URI`: it listens already.
            Err(QmpError::Command { desc, .. }) if desc.contains("already") => {}
            Err(e) => return Err(e.into()),
        }
        self.qemu_started = true;
        self.start_device_state(device_uri)?;
        // The guest pauses on the way there: poll as while paused.
        self.src.wait_migration_status_every(
            &["pre-switchover"],
            Duration::from_secs(60),
            PAUSED_POLL,
        )?;
        // 3. The last memory round, guest paused.
        let paused = Instant::now();
        self.control.migrate(&Request::MigrateFinish)?;
        // Post-copy: the pages changed last were named, not sent.
        let mut memory = self.wait_memory(
            &["completed", "post-copy", "post-copy-paused"],
            None,
            PAUSED_POLL,
        )?;
        let last_round = paused.elapsed();
        // 4. Switch over.
        let continued = Instant::now();
        // A short push may have finished already (it starts at once): the sender's count of
        // named pages tells, not the state.
        let remote = (memory.post_copy_pages > 0).then_some(memory.post_copy_pages);
        self.src.migrate_continue("pre-switchover")?;
        // From here on the destination may run: a post-copy that fails cannot be undone. (A
        // continue that failed may still have been carried out: `roll_back` asks QEMU.)
        self.switched_over = remote.is_some();
        let info = self.src.wait_migration_status_every(
            &["completed"],
            Duration::from_secs(60),
            PAUSED_POLL,
        )?;
        let switchover = continued.elapsed();
        let mut state = self.dst.query_status()?;
        let until = Instant::now() + Duration::from_secs(30);
        while state.status == "inmigrate" && Instant::now() < until {
            std::thread::sleep(PAUSED_POLL);
            state = self.dst.query_status()?;
        }
        if self.was_running && !state.running && state.status == "paused" {
            // Started with -S: run it, as the source ran.
            self.dst.execute("cont", None)?;
            state = self.dst.query_status()?;
        }
        // 5. Post-copy: the named pages follow while the destination runs.
        let post_copy = match remote {
            Some(named) => {
                memory = self.wait_memory(&["completed"], None, POLL)?;
                Some((named, continued.elapsed()))
            }
            None => None,
        };
        Ok(Summary {
            memory,
            last_round,
            switchover,
            downtime_ms: info.downtime_ms,
            device_bytes: info.ram_transferred,
            destination_state: state.status,
            post_copy,
        })
    }

    /// Starts the source QEMU's device-state migration to `device_uri`. For a `tcp:HOST:PORT`
    /// URI and a source QMP socket that can carry descriptors, memvisor connects itself, with
    /// `TCP_NODELAY`, and hands QEMU the connection (`getfd`, then `migrate fd:NAME`): QEMU
    /// 7.2's own `tcp:` socket keeps Nagle's algorithm on, and the device state's last short
    /// segment then waits for the destination's delayed acknowledgement: 40 to 60 ms more
    /// downtime in 7 of 10 migrations measured here.
    fn start_device_state(&mut self, device_uri: &str) -> Result<(), MigrateError> {
        let own_connection = device_uri
            .strip_prefix("tcp:")
            .filter(|host_port| !host_port.contains(','))
            .filter(|_| self.src.can_pass_fds());
        let Some(host_port) = own_connection else {
            return Ok(self.src.migrate(device_uri)?);
        };
        let tcp =
            memvisor_qmp::connect_tcp(host_port, Instant::now() + QMP_TIMEOUT).map_err(|e| {
                MigrateError::Failed(format!(
                    "connecting to the destination's device-state address {host_port}: {e}"
                ))
            })?;
        self.src.pass_fd(DEVICE_STATE_FD, tcp.as_fd())?;
        self.src.migrate(&format!("fd:{DEVICE_STATE_FD}"))?;
        // QEMU holds its own duplicate; ours closes here.
        Ok(())
    }

    /// Polls the source's memory migration every `poll` until its state is one of `wanted`
    /// (printing progress about once a second); a failed or cancelled one, or the deadline, is
    /// an error.
    fn wait_memory(
        &mut self,
        wanted: &[&str],
        deadline: Option<Instant>,
        poll: Duration,
    ) -> Result<MigrationStatus, MigrateError> {
        loop {
            let status = self.control.status()?;
            let Some(m) = status.migration else {
                return Err(MigrateError::Failed(
                    "the source reports no migration".into(),
                ));
            };
            if wanted.contains(&m.state.as_str()) {
                return Ok(m);
            }
            if memvisor_control::interrupt::requested() {
                return Err(MigrateError::Failed(if self.switched_over {
                    "interrupted by a signal after the post-copy switch-over; the source's \
                     memvisor goes on pushing (memvisor stat shows it)"
                        .into()
                } else {
                    "interrupted by a signal; both migrations cancelled".into()
                }));
            }
            if m.is_over() {
                return Err(MigrateError::Failed(format!(
                    "memory migration {}: {}",
                    m.state,
                    m.error.as_deref().unwrap_or("no reason given")
                )));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(MigrateError::Failed(format!(
                    "memory did not converge in time: the last round changed {} pages (round {})",
                    m.last_round_changed_pages, m.rounds
                )));
            }
            if self.last_print.elapsed() >= Duration::from_secs(1) {
                self.last_print = Instant::now();
                let left = match m.state.as_str() {
                    "post-copy" => format!(", {} still at the source", m.remote_pages),
                    "post-copy-paused" => format!(
                        ", {} still at the source; {}",
                        m.remote_pages,
                        m.error.as_deref().unwrap_or("reconnecting")
                    ),
                    _ => String::new(),
                };
                eprintln!(
                    "memvisor: {} round {}: {} pages sent ({} on the wire, {:.0} MB/s), last round changed {}{left}",
                    m.state,
                    m.rounds,
                    m.pages,
                    format_bytes(m.wire_bytes),
                    m.wire_bytes as f64 / 1e3 / m.elapsed_ms.max(1) as f64,
                    m.last_round_changed_pages
                );
            }
            std::thread::sleep(poll);
        }
    }

    /// After a failure: cancel both migrations (waiting, 30 s at most, until the source's
    /// memory migration has stopped); the source guest runs again if it ran. Not after a
    /// post-copy switch-over: the destination's guest may run, so the source guest must not,
    /// and the push is left to finish if it still can.
    fn roll_back(&mut self) {
        if self.switched_over {
            eprintln!(
                "memvisor: after the post-copy switch-over nothing is rolled back: the source \
                 guest stays paused; the destination's guest waits on the pages not yet there"
            );
            return;
        }
        if self.qemu_started && self.device_state_may_have_gone() {
            // `migrate-continue` went through (or its answer was lost, or a step after QEMU's
            // completion failed): the destination's guest may run, so the source's must not.
            eprintln!(
                "memvisor: the source QEMU sent (or may have sent) the device state: nothing is \
                 rolled back, the source guest stays paused; check the destination's state"
            );
            return;
        }
        if self.control.migrate(&Request::MigrateCancel).is_ok() {
            let until = Instant::now() + Duration::from_secs(30);
            while Instant::now() < until {
                match self.control.status().map(|s| s.migration) {
                    Ok(Some(m)) if !m.is_over() => std::thread::sleep(POLL),
                    _ => break,
                }
            }
        }
        if self.qemu_started {
            let _ = self.src.migrate_cancel();
            let _ = self.src.wait_migration_status(
                &["cancelled", "failed", "completed"],
                Duration::from_secs(10),
            );
        }
        if self.was_running {
            if let Ok(s) = self.src.query_status() {
                if !s.running {
                    let _ = self.src.execute("cont", None);
                }
            }
        }
        self.restore_settings();
    }
}

fn print_summary(s: &Summary, total: Duration) {
    let m = &s.memory;
    println!(
        "migrated in {:.2} s: {} rounds, {} pages of memory ({} sent as zero), {} on the wire",
        total.as_secs_f64(),
        m.rounds,
        m.pages,
        m.zero_pages,
        format_bytes(m.wire_bytes),
    );
    println!(
        "QEMU: downtime {} ms, device state {}; destination is {}",
        s.downtime_ms.map_or("?".into(), |d| d.to_string()),
        s.device_bytes.map_or("?".into(), format_bytes),
        s.destination_state
    );
    println!(
        "paused: last memory round {} ms ({} pages changed), device state and switch-over {} ms",
        s.last_round.as_millis(),
        m.last_round_changed_pages,
        s.switchover.as_millis()
    );
    if let Some((named, took)) = s.post_copy {
        println!(
            "post-copy: {named} pages named at the pause, all in place {} ms after the \
             switch-over ({} asked for by waiting faults)",
            took.as_millis(),
            m.wanted_pages
        );
    }
}
