//! The client against real QEMU processes (`qemu-system-x86_64` from scripts/install, TCG,
//! 64 MiB of RAM in a shared `memory-backend-memfd`, started paused with `-S`), and against
//! std listeners that misbehave in ways QEMU does not (silence, endless lines).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memvisor_qmp::{QmpAddress, QmpClient, QmpError, MAX_LINE_BYTES};

const TIMEOUT: Duration = Duration::from_secs(10);
const RAM_BYTES: u64 = 64 << 20;

/// A QEMU process with a QMP socket, killed when dropped.
struct Qemu {
    child: Child,
    address: QmpAddress,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Qemu {
    /// Starts QEMU with QMP on a Unix socket in a fresh directory, plus `extra` arguments, and
    /// waits for the socket.
    fn start(extra: &[&str]) -> Qemu {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("qmp.sock");
        let qemu = Qemu::spawn(dir, &format!("unix:{}", socket.display()), extra);
        qemu.wait_until(|| socket.exists());
        qemu
    }

    /// Starts QEMU with QMP on `tcp:127.0.0.1:PORT` and waits until it accepts.
    fn start_tcp(extra: &[&str]) -> Qemu {
        let port = free_port();
        let qemu = Qemu::spawn(
            tempfile::tempdir().unwrap(),
            &format!("tcp:127.0.0.1:{port}"),
            extra,
        );
        qemu.wait_until(|| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
        qemu
    }

    fn spawn(dir: tempfile::TempDir, qmp: &str, extra: &[&str]) -> Qemu {
        let log = dir.path().join("qemu.log");
        let child = Command::new("qemu-system-x86_64")
            .args([
                "-nodefaults",
                "-no-user-config",
                "-display",
                "none",
                "-machine",
                "pc,memory-backend=ram",
                "-accel",
                "tcg",
                "-m",
                "64M",
                "-object",
                "memory-backend-memfd,id=ram,size=64M,share=on",
                "-S",
                "-qmp",
            ])
            .arg(format!("{qmp},server=on,wait=off"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::options().append(true).open(&log).unwrap())
            .spawn()
            .expect("qemu-system-x86_64 (scripts/install installs qemu-system-x86)");
        let address = qmp.parse().unwrap();
        Qemu {
            child,
            address,
            log,
            _dir: dir,
        }
    }

    fn wait_until(&self, ready: impl Fn() -> bool) {
        let start = Instant::now();
        while !ready() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "QEMU did not open its QMP socket: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn connect(&self) -> QmpClient {
        QmpClient::connect(&self.address, TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}; QEMU log: {}", self.log_text()))
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP port that was free a moment ago.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn migration_statuses(events: &[memvisor_qmp::QmpEvent]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.name == "MIGRATION")
        .map(|e| e.data["status"].as_str().unwrap_or("?").to_string())
        .collect()
}

#[test]
fn query_status_and_qemus_errors() {
    let qemu = Qemu::start(&[]);
    let mut qmp = qemu.connect();
    assert!(qmp.greeting()["version"]["qemu"]["major"].is_u64());
    let state = qmp.query_status().unwrap();
    assert_eq!(state.status, "prelaunch");
    assert!(!state.running);

    let e = qmp.execute("no-such-command", None).unwrap_err();
    let text = e.to_string();
    match &e {
        QmpError::Command {
            command,
            class,
            desc,
            ..
        } => {
            assert_eq!(command, "no-such-command");
            assert_eq!(class, "CommandNotFound");
            assert!(desc.contains("no-such-command"), "{desc}");
        }
        other => panic!("{other:?}"),
    }
    assert!(text.contains(&qemu.address.to_string()), "{text}");
    assert!(
        text.contains("'no-such-command'") && text.contains("CommandNotFound"),
        "{text}"
    );
    eprintln!("unknown command: {text}");

    // Bad arguments: QEMU's GenericError, and the connection stays usable.
    let e = qmp.migrate_continue("no-such-state").unwrap_err();
    assert!(
        matches!(&e, QmpError::Command { class, .. } if class == "GenericError"),
        "{e:?}"
    );
    eprintln!("bad argument: {e}");
    let e = qmp.migrate_continue("pre-switchover").unwrap_err();
    eprintln!("migrate-continue with no migration: {e}");
    assert_eq!(qmp.query_migrate().unwrap().status, "none");
    qmp.execute("cont", None).unwrap();
    let state = qmp.query_status().unwrap();
    assert_eq!((state.status.as_str(), state.running), ("running", true));
    qmp.execute("stop", None).unwrap();
    assert_eq!(qmp.wait_event("STOP", TIMEOUT).unwrap().name, "STOP");
    let events = qmp.take_events();
    assert!(events.iter().any(|e| e.name == "RESUME"), "{events:?}");
    assert!(qmp.take_events().is_empty());
}

/// `getfd` with a descriptor riding on the command: QEMU files it under the name (`closefd`
/// finds it once); over TCP no descriptor can be passed, and the refusal says so.
#[test]
fn passes_a_descriptor_by_name() {
    use std::os::fd::AsFd;
    let qemu = Qemu::start(&[]);
    let mut qmp = qemu.connect();
    assert!(qmp.can_pass_fds());
    let (mine, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
    qmp.pass_fd("memvisor-test", mine.as_fd()).unwrap();
    qmp.execute(
        "closefd",
        Some(serde_json::json!({"fdname": "memvisor-test"})),
    )
    .unwrap();
    let e = qmp
        .execute(
            "closefd",
            Some(serde_json::json!({"fdname": "memvisor-test"})),
        )
        .unwrap_err();
    assert!(e.to_string().contains("memvisor-test"), "{e}");
    // The connection is still in step after the descriptor's command.
    assert_eq!(qmp.query_status().unwrap().status, "prelaunch");

    let tcp = Qemu::start_tcp(&[]);
    let mut over_tcp = tcp.connect();
    assert!(!over_tcp.can_pass_fds());
    let e = over_tcp.pass_fd("memvisor-test", mine.as_fd()).unwrap_err();
    assert!(e.to_string().contains("Unix socket"), "{e}");
}

#[test]
fn connects_over_tcp_and_quits() {
    let mut qemu = Qemu::start_tcp(&[]);
    assert!(matches!(qemu.address, QmpAddress::Tcp(_)));
    let mut qmp = qemu.connect();
    assert_eq!(qmp.query_status().unwrap().status, "prelaunch");
    qmp.quit().unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = qemu.child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(start.elapsed() < TIMEOUT, "QEMU did not quit");
        std::thread::sleep(Duration::from_millis(20));
    }
    let e = qmp.query_status().unwrap_err();
    assert!(matches!(e, QmpError::Closed { .. }), "{e:?}");
    assert!(e.to_string().contains("'query-status'"), "{e}");
    // quit on a closed connection is success too.
    qmp.quit().unwrap();
}

#[test]
fn device_state_only_migration_with_pause_before_switchover() {
    let source = Qemu::start(&[]);
    let destination = Qemu::start(&["-incoming", "defer"]);
    let mut src = source.connect();
    let mut dst = destination.connect();
    src.execute("cont", None).unwrap();
    assert_eq!(dst.query_status().unwrap().status, "inmigrate");

    dst.set_migration_capabilities(&[
        ("x-ignore-shared", true),
        ("return-path", true),
        ("events", true),
    ])
    .unwrap();
    src.set_migration_capabilities(&[
        ("x-ignore-shared", true),
        ("return-path", true),
        ("pause-before-switchover", true),
        ("events", true),
    ])
    .unwrap();
    src.set_migration_parameters(serde_json::json!({"downtime-limit": 300}))
        .unwrap();
    let caps = src.execute("query-migrate-capabilities", None).unwrap();
    let mut enabled: Vec<&str> = caps
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["state"] == true)
        .filter_map(|c| c["capability"].as_str())
        .collect();
    enabled.sort_unstable();
    assert_eq!(
        enabled,
        [
            "events",
            "pause-before-switchover",
            "return-path",
            "x-ignore-shared"
        ]
    );

    let uri = format!("tcp:127.0.0.1:{}", free_port());
    dst.migrate_incoming(&uri).unwrap();
    let started = Instant::now();
    src.migrate(&uri).unwrap();

    let paused = src
        .wait_migration_status(&["pre-switchover"], Duration::from_secs(30))
        .unwrap();
    let at_pause = src.query_status().unwrap();
    let dst_at_pause = dst.query_status().unwrap();
    let dst_migration_at_pause = dst.query_migrate().unwrap();
    eprintln!(
        "at pre-switchover after {:?}: source {at_pause:?}, destination {dst_at_pause:?}, \
         destination migration '{}', source {paused:?}",
        started.elapsed(),
        dst_migration_at_pause.status
    );
    assert!(!at_pause.running, "the source is stopped before switchover");
    // The source stays in pre-switchover until told to continue.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(src.query_migrate().unwrap().status, "pre-switchover");

    src.migrate_continue("pre-switchover").unwrap();
    let done = src
        .wait_migration_status(&["completed"], Duration::from_secs(30))
        .unwrap();
    eprintln!("source completed after {:?}: {done:?}", started.elapsed());
    let transferred = done.ram_transferred.expect("ram.transferred");
    assert!(
        transferred < RAM_BYTES / 16,
        "x-ignore-shared: {transferred} bytes of RAM sent"
    );
    assert!(
        done.total_time_ms.is_some() && done.downtime_ms.is_some(),
        "{done:?}"
    );
    assert_eq!(done.error_desc, None);

    let dst_done = dst
        .wait_migration_status(&["completed"], Duration::from_secs(30))
        .unwrap();
    eprintln!("destination migration: {dst_done:?}");
    // The destination leaves `inmigrate` once it has loaded the device state.
    let start = Instant::now();
    let dst_state = loop {
        let state = dst.query_status().unwrap();
        if state.status != "inmigrate" || start.elapsed() > TIMEOUT {
            break state;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let src_state = src.query_status().unwrap();
    eprintln!("after: source {src_state:?}, destination {dst_state:?}");
    assert_eq!(src_state.status, "postmigrate");
    assert!(!src_state.running);
    assert_eq!(
        dst_state.status, "paused",
        "-S on the destination: no autostart"
    );
    assert!(!dst_state.running);
    dst.execute("cont", None).unwrap();
    assert!(dst.query_status().unwrap().running);

    // The MIGRATION events were queued while polling.
    let src_events = src.take_events();
    let statuses = migration_statuses(&src_events);
    eprintln!(
        "source MIGRATION events: {statuses:?}; all events: {:?}",
        src_events.iter().map(|e| &e.name).collect::<Vec<_>>()
    );
    let expected = ["setup", "active", "pre-switchover", "device", "completed"];
    let mut rest = statuses.iter();
    for want in expected {
        assert!(
            rest.any(|s| s == want),
            "{want} missing or out of order in {statuses:?}"
        );
    }
    assert!(src.take_events().is_empty());
    let first = dst.wait_event("MIGRATION", TIMEOUT).unwrap();
    let mut dst_statuses = vec![first.data["status"].as_str().unwrap().to_string()];
    while dst_statuses.last().map(String::as_str) != Some("completed") {
        let event = dst.wait_event("MIGRATION", TIMEOUT).unwrap();
        dst_statuses.push(event.data["status"].as_str().unwrap().to_string());
    }
    let dst_other: Vec<String> = dst.take_events().into_iter().map(|e| e.name).collect();
    eprintln!("destination MIGRATION events: {dst_statuses:?}; other events: {dst_other:?}");
    let e = dst
        .wait_event("MIGRATION", Duration::from_millis(100))
        .unwrap_err();
    assert!(matches!(e, QmpError::TimedOut { .. }), "{e:?}");
    assert!(e.to_string().contains("event 'MIGRATION'"), "{e}");
}

#[test]
fn a_failed_migration_is_an_error_with_qemus_description() {
    let source = Qemu::start(&[]);
    let mut src = source.connect();
    let port = free_port(); // nobody listens
    src.migrate(&format!("tcp:127.0.0.1:{port}")).unwrap();
    let e = src
        .wait_migration_status(&["completed"], TIMEOUT)
        .unwrap_err();
    eprintln!("{e}");
    match &e {
        QmpError::MigrationFailed { status, desc, .. } => {
            assert_eq!(status, "failed");
            assert!(desc.contains("onnection refused"), "{desc}");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains(&source.address.to_string()));
}

#[test]
fn a_paused_migration_is_cancelled_and_waiting_for_another_status_times_out() {
    let source = Qemu::start(&[]);
    let mut src = source.connect();
    src.set_migration_capabilities(&[("pause-before-switchover", true)])
        .unwrap();
    // A destination that swallows everything.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sink = std::thread::spawn(move || {
        let (mut peer, _) = listener.accept().unwrap();
        let mut buf = vec![0; 1 << 16];
        let mut total = 0u64;
        while let Ok(n) = peer.read(&mut buf) {
            if n == 0 {
                break;
            }
            total += n as u64;
        }
        total
    });
    src.migrate(&format!("tcp:127.0.0.1:{port}")).unwrap();
    let e = src
        .wait_migration_status(&["completed"], Duration::from_millis(300))
        .unwrap_err();
    eprintln!("{e}");
    match &e {
        QmpError::MigrationTimedOut { last, wanted, .. } => {
            assert_eq!(wanted, "completed");
            assert!(
                ["setup", "active", "pre-switchover"].contains(&last.as_str()),
                "{last}"
            );
        }
        other => panic!("{other:?}"),
    }
    src.wait_migration_status(&["pre-switchover"], TIMEOUT)
        .unwrap();
    src.migrate_cancel().unwrap();
    let cancelled = src.wait_migration_status(&["cancelled"], TIMEOUT).unwrap();
    assert_eq!(cancelled.status, "cancelled");
    let e = src
        .wait_migration_status(&["completed"], TIMEOUT)
        .unwrap_err();
    assert!(
        matches!(&e, QmpError::MigrationFailed { status, .. } if status == "cancelled"),
        "{e:?}"
    );
    eprintln!("{e}");
    let sent = sink.join().unwrap();
    eprintln!(
        "cancelled migration sent {sent} bytes; source now {:?}",
        src.query_status().unwrap()
    );
}

/// A Unix listener in a fresh directory; `serve` runs on the first connection.
fn fake_server(
    serve: impl FnOnce(std::os::unix::net::UnixStream) + Send + 'static,
) -> (tempfile::TempDir, QmpAddress, std::thread::JoinHandle<()>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let server = std::thread::spawn(move || {
        let (peer, _) = listener.accept().unwrap();
        serve(peer);
    });
    (dir, QmpAddress::Unix(path), server)
}

#[test]
fn a_silent_server_times_out_naming_the_address() {
    let (_dir, address, server) = fake_server(|peer| {
        std::thread::sleep(Duration::from_secs(3));
        drop(peer);
    });
    let start = Instant::now();
    let e = QmpClient::connect(&address, Duration::from_millis(500)).unwrap_err();
    let waited = start.elapsed();
    let text = e.to_string();
    eprintln!("after {waited:?}: {text}");
    assert!(matches!(e, QmpError::TimedOut { .. }), "{e:?}");
    assert!(
        text.contains(&address.to_string()) && text.contains("greeting"),
        "{text}"
    );
    assert!(
        waited >= Duration::from_millis(450) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    server.join().unwrap();
}

#[test]
fn a_dribbling_server_cannot_stretch_the_deadline() {
    let (_dir, address, server) = fake_server(|mut peer| {
        for _ in 0..40 {
            if peer.write_all(b" ").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let start = Instant::now();
    let e = QmpClient::connect(&address, Duration::from_millis(500)).unwrap_err();
    assert!(matches!(e, QmpError::TimedOut { .. }), "{e:?}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    server.join().unwrap();
}

#[test]
fn an_endless_line_is_refused_as_too_long() {
    let (_dir, address, server) = fake_server(|mut peer| {
        peer.write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n{\"return\": \"")
            .unwrap();
        let chunk = vec![b'a'; 1 << 16];
        let mut sent = 0usize;
        while peer.write_all(&chunk).is_ok() {
            sent += chunk.len();
            assert!(sent < 64 * MAX_LINE_BYTES, "the client kept reading");
        }
    });
    let start = Instant::now();
    let e = QmpClient::connect(&address, TIMEOUT).unwrap_err();
    let text = e.to_string();
    eprintln!("after {:?}: {text}", start.elapsed());
    assert!(matches!(e, QmpError::TooLong { .. }), "{e:?}");
    assert!(
        text.contains("too long")
            && text.contains(&address.to_string())
            && text.contains("'qmp_capabilities'"),
        "{text}"
    );
    server.join().unwrap();
}

#[test]
fn garbage_from_the_server_is_a_protocol_error() {
    let (_dir, address, server) = fake_server(|mut peer| {
        peer.write_all(b"{\"QMP\": {}}\n").unwrap();
        let mut line = Vec::new();
        let mut byte = [0];
        while peer.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
            line.push(byte[0]);
        }
        let command: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(command["execute"], "qmp_capabilities");
        let id = &command["id"];
        // An event, a reply to some other id, then the reply.
        writeln!(peer, "{{\"event\": \"X\", \"timestamp\": {{}}}}").unwrap();
        writeln!(peer, "{{\"return\": {{}}, \"id\": 999}}").unwrap();
        writeln!(peer, "{{\"return\": {{}}, \"id\": {id}}}").unwrap();
        writeln!(peer, "\n[1]").unwrap();
        std::thread::sleep(Duration::from_millis(200));
    });
    let mut qmp = QmpClient::connect(&address, TIMEOUT).unwrap();
    assert_eq!(qmp.take_events()[0].name, "X");
    let e = qmp.query_status().unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, QmpError::Protocol { .. }), "{e:?}");
    assert!(
        text.contains("'query-status'") && text.contains("JSON array"),
        "{text}"
    );
    server.join().unwrap();
    let e = qmp.query_status().unwrap_err();
    assert!(matches!(e, QmpError::Closed { .. }), "{e:?}");
}

#[test]
fn a_missing_socket_is_an_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path: &Path = &dir.path().join("nobody-here.sock");
    let address = QmpAddress::Unix(path.to_path_buf());
    let e = QmpClient::connect(&address, TIMEOUT).unwrap_err();
    let text = e.to_string();
    eprintln!("{text}");
    assert!(matches!(e, QmpError::Connect { .. }), "{e:?}");
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("No such file"), "{text}");
}
