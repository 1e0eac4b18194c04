//! `memvisor trace convert` end to end: the real binary, real files; also outputs in shared
//! directories (planted symlinks, devices) and the messages for inputs in the wrong format.

mod common;

use std::fs;
use std::os::unix::fs::{symlink, FileTypeExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

use common::NOBODY;

fn memvisor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memvisor"))
        .args(args)
        .output()
        .expect("run memvisor")
}

fn misses(table: &str, policy: &str) -> u64 {
    let line = table.lines().find(|l| l.starts_with(policy)).unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

#[test]
fn converted_traces_replay_like_their_source() {
    let dir = tempfile::tempdir().unwrap();
    let workload = "zipf:n=3000:alpha=0.8:len=30000";
    let mut tables = Vec::new();
    for (to, name) in [
        ("oracle-general", "w.oracleGeneral"),
        ("oracle-general", "w.oracleGeneral.zst"),
        ("text", "w.txt"),
    ] {
        let out = dir.path().join(name);
        let o = memvisor(&[
            "trace",
            "convert",
            "--workload",
            workload,
            "--to",
            to,
            "--output",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(!dir.path().join(format!("{name}.partial")).exists());
        let o = memvisor(&[
            "sim",
            "--trace",
            out.to_str().unwrap(),
            "--policy",
            "lru,arc",
            "--size",
            "300",
            "-q",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        tables.push(String::from_utf8(o.stdout).unwrap());
    }
    let o = memvisor(&[
        "sim",
        "--workload",
        workload,
        "--policy",
        "lru,arc",
        "--size",
        "300",
        "-q",
    ]);
    tables.push(String::from_utf8(o.stdout).unwrap());
    for p in ["lru", "arc", "opt"] {
        let m: Vec<u64> = tables.iter().map(|t| misses(t, p)).collect();
        assert!(m.iter().all(|&x| x == m[0]), "{p}: {m:?}");
        assert!(m[0] > 0);
    }
}

#[test]
fn a_malformed_trace_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.lackey");
    std::fs::write(&input, "I  04000000,3\n L 04000100,8\n Q garbage\n").unwrap();
    let out = dir.path().join("out.oracleGeneral");
    let o = memvisor(&[
        "trace",
        "convert",
        "--trace",
        input.to_str().unwrap(),
        "--to",
        "oracle-general",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(e.contains("in.lackey:3"), "{e}");
    assert!(!out.exists(), "output written despite the error");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "leftovers"
    );
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A world-writable sticky directory (like /tmp) and, outside it, a root-owned victim file.
fn sticky_dir_and_victim() -> (tempfile::TempDir, tempfile::TempDir, std::path::PathBuf) {
    let shared = tempfile::tempdir().unwrap();
    fs::set_permissions(shared.path(), fs::Permissions::from_mode(0o1777)).unwrap();
    let private = tempfile::tempdir().unwrap();
    let victim = private.path().join("victim");
    fs::write(&victim, b"precious\n").unwrap();
    (shared, private, victim)
}

/// Plants a symlink `link` -> `target` as user `nobody` (as an attacker sharing the directory).
fn plant_symlink_as_nobody(target: &Path, link: &Path) {
    use std::os::unix::process::CommandExt;
    let st = Command::new("ln")
        .arg("-s")
        .arg(target)
        .arg(link)
        .uid(NOBODY)
        .gid(NOBODY)
        .status()
        .unwrap();
    assert!(st.success(), "ln -s as nobody");
}

fn convert_workload(to: &str, out: &Path) -> Output {
    memvisor(&[
        "trace",
        "convert",
        "--workload",
        "seq:n=50:len=100",
        "--to",
        to,
        "--output",
        out.to_str().unwrap(),
    ])
}

#[test]
fn a_planted_partial_symlink_in_a_sticky_dir_leaves_the_victim_intact() {
    if !is_root() {
        eprintln!("SKIPPED: needs root to act as root beside nobody");
        return;
    }
    let (shared, _private, victim) = sticky_dir_and_victim();
    // Every temporary name memvisor used before: OUT.partial and OUT.partial.zst.
    for (to, name, planted) in [
        (
            "oracle-general",
            "out.oracleGeneral",
            "out.oracleGeneral.partial",
        ),
        (
            "oracle-general",
            "out.oracleGeneral.zst",
            "out.oracleGeneral.partial.zst",
        ),
        ("text", "out.txt", "out.txt.partial"),
    ] {
        let link = shared.path().join(planted);
        plant_symlink_as_nobody(&victim, &link);
        let out = shared.path().join(name);
        let o = convert_workload(to, &out);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        assert_eq!(
            fs::read(&victim).unwrap(),
            b"precious\n",
            "{name}: victim overwritten"
        );
        let meta = fs::symlink_metadata(&out).unwrap();
        assert!(meta.file_type().is_file(), "{name}: not a regular file");
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
    }
    let names: Vec<String> = fs::read_dir(shared.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(names.is_empty(), "temporary files left: {names:?}");
}

#[test]
fn an_output_that_is_a_symlink_is_refused() {
    let (shared, _private, victim) = sticky_dir_and_victim();
    let out = shared.path().join("out.txt");
    if is_root() {
        plant_symlink_as_nobody(&victim, &out);
    } else {
        symlink(&victim, &out).unwrap();
    }
    let o = convert_workload("text", &out);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(
        e.contains("out.txt: is a symbolic link; refusing to write through it"),
        "{e}"
    );
    assert_eq!(fs::read(&victim).unwrap(), b"precious\n");
    assert!(fs::symlink_metadata(&out).unwrap().file_type().is_symlink());
}

#[test]
fn dev_null_output_stays_a_character_device() {
    let o = convert_workload("oracle-general", Path::new("/dev/null"));
    assert!(o.status.success(), "{}", stderr(&o));
    let meta = fs::symlink_metadata("/dev/null").unwrap();
    assert!(meta.file_type().is_char_device(), "/dev/null replaced");
}

#[test]
fn a_device_node_output_is_written_in_place_not_replaced() {
    if !is_root() {
        eprintln!("SKIPPED: mknod needs root");
        return;
    }
    // A private null device (1:3), so a failure cannot damage the real /dev/null.
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("null");
    let st = Command::new("mknod")
        .args(["-m", "666"])
        .arg(&node)
        .args(["c", "1", "3"])
        .status()
        .unwrap();
    assert!(st.success(), "mknod");
    for to in ["text", "oracle-general"] {
        let o = convert_workload(to, &node);
        assert!(o.status.success(), "{}", stderr(&o));
        let meta = fs::symlink_metadata(&node).unwrap();
        assert!(
            meta.file_type().is_char_device(),
            "{to}: device node replaced"
        );
    }
    // `-` is standard output.
    let o = convert_workload("text", Path::new("-"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 100);
}

#[test]
fn inputs_in_the_wrong_shape_get_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.txt");
    let convert = |input: &Path, format: Option<&str>| {
        let mut args = vec!["trace", "convert", "--trace", input.to_str().unwrap()];
        if let Some(f) = format {
            args.extend(["--format", f]);
        }
        args.extend(["--to", "text", "--output", out.to_str().unwrap()]);
        let o = memvisor(&args);
        assert!(!o.status.success(), "{input:?} accepted");
        let e = stderr(&o);
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        e
    };
    // A directory is named as one.
    let e = convert(dir.path(), Some("text"));
    assert!(
        e.contains(&format!("{}: is a directory", dir.path().display())),
        "{e}"
    );
    // A CSV file read as oracleGeneral: text where binary records are expected.
    let csv = dir.path().join("a.csv");
    fs::write(
        &csv,
        "1,100\n2,200\n3,300\n4,400\n5,500\n6,600\n7,700\n8,800\n",
    )
    .unwrap();
    let e = convert(&csv, Some("oracle-general"));
    assert!(
        e.contains("a.csv: byte offset 0: not libCacheSim oracleGeneral")
            && e.contains("looks like text"),
        "{e}"
    );
    // A binary file that is not a whole number of records, refused before any record.
    let odd = dir.path().join("odd.oracleGeneral");
    let mut bytes = Vec::new();
    for i in 0u32..10 {
        bytes.extend_from_slice(&i.to_le_bytes());
        bytes.extend_from_slice(&u64::from(i).to_le_bytes());
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&(-1i64).to_le_bytes());
    }
    bytes.extend_from_slice(&[0; 7]);
    fs::write(&odd, &bytes).unwrap();
    let e = convert(&odd, None);
    assert!(
        e.contains("odd.oracleGeneral: byte offset 240:")
            && e.contains("247 bytes, is not a whole number of 24-byte records"),
        "{e}"
    );
    // A truncated .zst says so, with where it stopped.
    let whole = dir.path().join("w.oracleGeneral.zst");
    let o = memvisor(&[
        "trace",
        "convert",
        "--workload",
        "zipf:n=100000:alpha=0.6:len=400000",
        "--to",
        "oracle-general",
        "--output",
        whole.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let data = fs::read(&whole).unwrap();
    let cut = dir.path().join("cut.oracleGeneral.zst");
    fs::write(&cut, &data[..data.len() / 2]).unwrap();
    let e = convert(&cut, None);
    let at = format!(
        "cut.oracleGeneral.zst: the zstd-compressed stream is truncated: it ends at compressed byte {0} of {0}, after ",
        data.len() / 2
    );
    assert!(e.contains(&at), "{e}");
    assert!(!e.contains("after 0 complete requests"), "{e}");
    assert!(!out.exists());
}
