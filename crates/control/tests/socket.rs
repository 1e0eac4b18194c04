//! The control server and client over a real Unix socket: status and set round trips, bad
//! requests, socket permissions, the SO_PEERCRED check against another user, and the attacks
//! a local user could try: dribbling clients, many slow connections, out-of-range requests;
//! and the client's messages for stale sockets and unreachable directories.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memvisor_control::{
    socket_dir, ControlClient, ControlError, ControlHandler, ControlServer, ProcessStatus,
    RegionStatus, MAX_CONNECTIONS, REQUEST_DEADLINE,
};

/// A handler keeping its state in memory, as a managed process keeps its regions.
struct Table(Mutex<ProcessStatus>);

impl ControlHandler for Table {
    fn status(&self) -> ProcessStatus {
        self.0.lock().unwrap().clone()
    }
    fn set(&self, budget: Option<u64>, policy: Option<&str>) -> Result<(), String> {
        let mut s = self.0.lock().unwrap();
        if policy == Some("bogus") {
            return Err("policy 'bogus': unknown".into());
        }
        if let Some(b) = budget {
            s.budget_bytes = b;
        }
        if let Some(p) = policy {
            s.policy = p.into();
        }
        Ok(())
    }
}

fn start(dir: &std::path::Path) -> ControlServer {
    let status = ProcessStatus {
        pid: std::process::id(),
        program: "test".into(),
        budget_bytes: 1 << 20,
        policy: "clock".into(),
        chunk_size: 64 << 10,
        regions: vec![RegionStatus {
            name: "arena".into(),
            resident_bytes: 4096,
            ..Default::default()
        }],
        ..Default::default()
    };
    ControlServer::start(dir, Arc::new(Table(Mutex::new(status))), || {}).unwrap()
}

#[test]
fn status_set_and_errors_over_the_socket() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("run");
    let server = start(&dir);
    let meta = std::fs::metadata(server.path()).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    let pid = std::process::id();
    assert_eq!(socket_dir::list_managed_pids(&dir).unwrap(), vec![pid]);

    let mut c = ControlClient::connect(&dir, pid).unwrap();
    let s = c.status().unwrap();
    assert_eq!(
        (s.pid, s.budget_bytes, s.resident_bytes()),
        (pid, 1 << 20, 4096)
    );
    let s = c.set(Some(2 << 20), Some("lru".into())).unwrap();
    assert_eq!((s.budget_bytes, s.policy.as_str()), (2 << 20, "lru"));
    match c.set(None, Some("bogus".into())) {
        Err(ControlError::Remote { message, .. }) => assert!(message.contains("bogus")),
        other => panic!("{other:?}"),
    }
    // The connection survives an error answer.
    assert_eq!(c.status().unwrap().policy, "lru");

    // Garbage and overlong lines get an error line, then the connection is closed.
    for bad in [&b"hello\n"[..], &vec![b'x'; 5000][..]] {
        let mut raw = UnixStream::connect(server.path()).unwrap();
        raw.write_all(bad).unwrap();
        let mut line = String::new();
        BufReader::new(&raw).read_line(&mut line).unwrap();
        assert!(line.contains("\"ok\":false"), "{line}");
    }

    assert!(matches!(
        ControlClient::connect(&dir, 1),
        Err(ControlError::NoSuchProcess { pid: 1, .. })
    ));
    server.remove_socket();
    assert!(socket_dir::list_managed_pids(&dir).unwrap().is_empty());
}

#[test]
fn other_users_are_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: needs root to act as another user");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("run");
    let server = start(&dir);
    // Open the file permissions so that only the SO_PEERCRED check stands in the way.
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(server.path(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg("sh")
        .arg("-c")
        .arg(format!(
            "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); \
             s.sendall(b\"{{\\\"v\\\":1,\\\"op\\\":\\\"status\\\"}}\\n\"); print(s.recv(4096).decode())' {}",
            server.path().display()
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("permission denied"),
        "{text} / {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("\"ok\":true"));
}

/// Writes `byte` to `stream` every `every` until a write fails or `stop` is set; returns when
/// the server closed the connection (a write failed) or `for_at_most` passed.
fn dribble(
    mut stream: UnixStream,
    every: Duration,
    for_at_most: Duration,
) -> std::thread::JoinHandle<Option<Duration>> {
    std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < for_at_most {
            if stream.write_all(b" ").is_err() {
                return Some(start.elapsed());
            }
            std::thread::sleep(every);
        }
        None
    })
}

#[test]
fn a_slow_client_does_not_hold_up_others() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("run");
    let server = start(&dir);
    let slow = UnixStream::connect(server.path()).unwrap();
    let _slow = dribble(slow, Duration::from_millis(300), Duration::from_secs(3));
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    let s = ControlClient::connect(&dir, std::process::id())
        .unwrap()
        .status()
        .unwrap();
    assert_eq!(s.policy, "clock");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_request_has_one_deadline_however_slowly_it_arrives() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("run");
    let server = start(&dir);
    let slow = UnixStream::connect(server.path()).unwrap();
    let reader = slow.try_clone().unwrap();
    let start = Instant::now();
    // A byte a second: each read finishes well within 5 s, the request never does.
    let writer = dribble(slow, Duration::from_secs(1), Duration::from_secs(15));
    let mut line = String::new();
    let _ = BufReader::new(reader).read_line(&mut line);
    let dropped_after = start.elapsed();
    assert!(
        dropped_after < REQUEST_DEADLINE + Duration::from_secs(3),
        "kept for {dropped_after:?}"
    );
    assert!(line.contains("not received within 5 s"), "{line}");
    let closed = writer.join().unwrap();
    assert!(
        closed.is_some(),
        "the server kept reading past its deadline"
    );
}

#[test]
fn slow_clients_of_one_user_get_busy_and_leave_room_for_others() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("run");
    let server = start(&dir);
    // More slow connections than the server serves: the first ones take this user's places.
    let slow: Vec<_> = (0..MAX_CONNECTIONS)
        .map(|_| {
            let s = UnixStream::connect(server.path()).unwrap();
            s.set_nonblocking(true).unwrap();
            // A connection beyond this user's places may already have been answered busy and
            // closed by the server (EPIPE here, seen once in CI): it takes no place either way.
            let _ = (&s).write_all(b"{");
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let busy = ControlClient::connect(&dir, std::process::id())
        .unwrap()
        .status();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    match busy {
        Err(e @ ControlError::Busy { .. }) => {
            let text = e.to_string();
            assert!(text.contains("is busy"), "{text}");
            assert!(text.contains("per user"), "{text}");
        }
        other => panic!("{other:?}"),
    }

    // Another user still gets an answer (here a refusal, as it does not own the process),
    // not a busy one and not a hang.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(server.path(), std::fs::Permissions::from_mode(0o666)).unwrap();
        let text = status_as_nobody(server.path());
        assert!(text.contains("permission denied"), "{text}");
    }
    drop(slow);
    // Places come back when the slow clients go.
    std::thread::sleep(Duration::from_millis(300));
    let mut c = ControlClient::connect(&dir, std::process::id()).unwrap();
    assert_eq!(c.status().unwrap().policy, "clock");
}

#[test]
fn out_of_range_budgets_and_unknown_policies_are_refused_by_the_server() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("run");
    let server = start(&dir);
    let raw = UnixStream::connect(server.path()).unwrap();
    let mut lines = BufReader::new(raw.try_clone().unwrap());
    let mut ask = |request: &str| {
        (&raw).write_all(request.as_bytes()).unwrap();
        let mut line = String::new();
        lines.read_line(&mut line).unwrap();
        line
    };
    let huge = ask("{\"v\":1,\"op\":\"set\",\"budget_bytes\":18446744073709551615}\n");
    assert!(huge.contains("\"ok\":false"), "{huge}");
    assert!(huge.contains("more than this host's RAM"), "{huge}");
    let tiny = ask("{\"v\":1,\"op\":\"set\",\"budget_bytes\":4096}\n");
    assert!(tiny.contains("less than one chunk (64K)"), "{tiny}");
    let policy = ask("{\"v\":1,\"op\":\"set\",\"budget_bytes\":2097152,\"policy\":\"nonsense\"}\n");
    assert!(policy.contains("policy 'nonsense'"), "{policy}");
    let offline = ask("{\"v\":1,\"op\":\"set\",\"policy\":\"opt\"}\n");
    assert!(offline.contains("offline policy"), "{offline}");
    // Nothing reached the handler: neither the refused budgets nor the half-good request.
    let s = ControlClient::connect(&dir, std::process::id())
        .unwrap()
        .status()
        .unwrap();
    assert_eq!((s.budget_bytes, s.policy.as_str()), (1 << 20, "clock"));
}

#[test]
fn stale_sockets_are_reported_and_removed() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("run");
    socket_dir::prepare_control_dir(&dir).unwrap();
    // A pid above the kernel's limit (at most 2^22) is never running.
    let pid = 1 << 30;
    let path = socket_dir::socket_path(&dir, pid);
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let e = ControlClient::connect(&dir, pid).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "process {pid} is not running (stale socket {} removed)",
            path.display()
        )
    );
    assert!(!path.exists());
    assert!(matches!(
        ControlClient::connect(&dir, pid),
        Err(ControlError::NoSuchProcess { .. })
    ));
}

#[test]
fn an_unreachable_control_directory_is_permission_denied() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: needs root to act as another user");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("run");
    let _server = start(&dir);
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // As nobody, the 0700 directory cannot be searched: that is not "does not exist".
    let pid = std::process::id();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "connect_as_child", "--nocapture"])
        .env("CONNECT_AS_CHILD", format!("{}:{pid}", dir.display()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("permission denied on")
            && text.contains("run as root or as the process's user"),
        "{text} / {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Not a test of its own: the child half of
/// [`an_unreachable_control_directory_is_permission_denied`], run as another user.
#[test]
fn connect_as_child() {
    let Ok(target) = std::env::var("CONNECT_AS_CHILD") else {
        return;
    };
    let (dir, pid) = target.rsplit_once(':').unwrap();
    match ControlClient::connect(std::path::Path::new(dir), pid.parse().unwrap()) {
        Ok(_) => println!("connected"),
        Err(e) => println!("error: {e}"),
    }
}

/// A status request sent as uid 65534 to `path`; what came back.
fn status_as_nobody(path: &std::path::Path) -> String {
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg("sh")
        .arg("-c")
        .arg(format!(
            "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.settimeout(3); s.connect(sys.argv[1]); \
             s.sendall(b\"{{\\\"v\\\":1,\\\"op\\\":\\\"status\\\"}}\\n\"); print(s.recv(4096).decode())' {}",
            path.display()
        ))
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A local user can put a socket under any name in a directory of their own, which root's
/// tools read (the broker walks every user's control directory): the client believes only a
/// socket the named process itself serves, follows no symlink, and does not hang on a
/// listener that never accepts.
#[test]
fn sockets_not_served_by_their_process_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("run");
    socket_dir::prepare_control_dir(&dir).unwrap();

    // Pid 1 is always running; its name on a socket this test serves.
    let borrowed = socket_dir::socket_path(&dir, 1);
    let _impostor = std::os::unix::net::UnixListener::bind(&borrowed).unwrap();
    match ControlClient::connect(&dir, 1) {
        Err(ControlError::WrongServer { pid: 1, server, .. }) => {
            assert_eq!(server as u32, std::process::id())
        }
        other => panic!("{other:?}"),
    }
    let e = ControlClient::connect(&dir, 1).unwrap_err().to_string();
    assert!(
        e.contains("is served by process") && e.contains("not by process 1"),
        "{e}"
    );

    // A symlink under a pid's name, to a socket the process does serve: not followed.
    let me = std::process::id();
    let other = t.path().join("other");
    let server = start(&other);
    let link = socket_dir::socket_path(&dir, me);
    std::os::unix::fs::symlink(server.path(), &link).unwrap();
    assert!(matches!(
        ControlClient::connect(&dir, me),
        Err(ControlError::NotASocket { .. })
    ));
    std::fs::remove_file(&link).unwrap();

    // A listener that never accepts, its backlog full: the client gives up in time.
    let listener = std::os::unix::net::UnixListener::bind(&link).unwrap();
    let _pending = UnixStream::connect(&link).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
    // SAFETY: listen(2) on a live listening socket only changes its backlog.
    let r = unsafe { libc::listen(fd, 0) };
    assert_eq!(r, 0);
    let start = Instant::now();
    match ControlClient::connect(&dir, me) {
        Err(ControlError::TimedOut { pid, .. }) => assert_eq!(pid, me),
        other => panic!("{other:?}"),
    }
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}
