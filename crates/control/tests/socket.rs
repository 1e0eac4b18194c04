//! The control server and client over a real Unix socket: status and set round trips, bad
//! requests, socket permissions, and the SO_PEERCRED check against another user.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use memvisor_control::{
    socket_dir, ControlClient, ControlError, ControlHandler, ControlServer, ProcessStatus,
    RegionStatus,
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
