//! `memvisor scrub --once` end to end: the real binary, a real image file in the host page cache
//! and a real process holding guest RAM in a `memory-backend-memfd` memfd, as QEMU does.

mod common;

use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::{memvisor_as as memvisor, page, NOBODY};
use memvisor_dedup::{ChildBacking, PagesChild};
use memvisor_scrub::{cachestat, resident_pages};

fn image(seeds: std::ops::RangeInclusive<u64>, mode: u32) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
    for s in seeds {
        f.write_all(&page(s)).unwrap();
    }
    f.as_file().sync_all().unwrap();
    std::fs::set_permissions(f.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    assert_eq!(cachestat(f.as_file().as_fd(), 0, 0).unwrap().nr_dirty, 0);
    f
}

fn guest(seeds: &[u64], uid: Option<u32>) -> PagesChild {
    let mem: Vec<u8> = seeds.iter().flat_map(|&s| page(s)).collect();
    PagesChild::spawn_as(
        &mem,
        ChildBacking::Memfd("memory-backend-memfd".into()),
        uid,
    )
    .unwrap()
}

fn resident(f: &tempfile::NamedTempFile) -> Vec<bool> {
    resident_pages(f.as_file(), f.as_file().metadata().unwrap().len()).unwrap()
}

#[test]
fn once_drops_the_image_pages_the_guest_holds() {
    let img = image(1..=32, 0o600);
    // Image page p holds seed p + 1; the guest holds pages 4..8 and 20.
    let child = guest(&[5, 6, 7, 8, 999, 21], None);
    let o = memvisor(
        &[
            "scrub".into(),
            "--once".into(),
            "--json".into(),
            "--image".into(),
            img.path().to_str().unwrap().into(),
            child.pid().to_string(),
        ],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let i = v[0]["images"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["path"] == img.path().to_str().unwrap())
        .unwrap();
    assert_eq!(i["dropped"], 5, "{v:#}");
    assert_eq!(i["kept_not_in_guest"], 27);
    assert_eq!(
        v[0]["guest_pages"], 6,
        "guest RAM is the memory-backend-memfd mapping"
    );
    let after = resident(&img);
    for (p, &r) in after.iter().enumerate() {
        assert_eq!(r, !matches!(p, 4..=7 | 20), "page {p}");
    }
    // The text report.
    let o = memvisor(
        &[
            "scrub".into(),
            "--once".into(),
            "--dry-run".into(),
            "--image".into(),
            img.path().to_str().unwrap().into(),
            child.pid().to_string(),
        ],
        None,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("VM {}", child.pid())) && out.contains("dropped 0"),
        "{out}"
    );
}

#[test]
fn permission_denied_on_a_vm_or_an_image_leaves_the_rest_scrubbed() {
    // memvisor runs as nobody: it may read nobody's guest and nobody's image, not root's guest
    // or root's private image; root's world-readable image it may read but not cachestat(2)
    // (the kernel wants write access or ownership), so it cannot tell dirty pages: refused.
    let public = image(1..=8, 0o644);
    std::os::unix::fs::chown(public.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let private = image(101..=108, 0o600);
    let readable = image(201..=208, 0o644);
    let mine = guest(&[1, 2, 3, 101, 201], Some(NOBODY));
    let roots = guest(&[4], None);
    let o = memvisor(
        &[
            "scrub".into(),
            "--once".into(),
            "--json".into(),
            "--image".into(),
            public.path().to_str().unwrap().into(),
            "--image".into(),
            private.path().to_str().unwrap().into(),
            "--image".into(),
            readable.path().to_str().unwrap().into(),
            roots.pid().to_string(),
            mine.pid().to_string(),
        ],
        Some(NOBODY),
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("pid {}: permission denied", roots.pid())),
        "{err}"
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let vm = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"] == mine.pid())
        .unwrap();
    let imgs = vm["images"].as_array().unwrap();
    let find = |p: &std::path::Path| {
        imgs.iter()
            .find(|i| i["path"] == p.to_str().unwrap())
            .unwrap()
    };
    assert_eq!(find(public.path())["dropped"], 3, "{vm:#}");
    let e = find(private.path())["error"].as_str().unwrap();
    assert!(
        e.contains("opening") && e.contains("Permission denied"),
        "{e}"
    );
    assert_eq!(resident(&private), vec![true; 8]);
    let e = find(readable.path())["error"].as_str().unwrap();
    assert!(e.contains("cachestat") && e.contains("write access"), "{e}");
    assert_eq!(resident(&readable), vec![true; 8]);
}

#[test]
fn bad_arguments_are_refused() {
    for args in [
        vec!["scrub", "--once", "--th-frac-cached", "2"],
        vec!["scrub", "--once", "--tick=0"],
        vec!["scrub", "--once", "--image", "/x"],
    ] {
        let o = memvisor(
            &args.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            None,
        );
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(!o.stderr.is_empty());
    }
}

#[test]
fn the_foreground_loop_scrubs_on_its_timer() {
    let img = image(1..=16, 0o600);
    let child = guest(&[1, 2, 3], None);
    let mut fg = Command::new(env!("CARGO_BIN_EXE_memvisor"))
        .args([
            "scrub",
            "--image",
            img.path().to_str().unwrap(),
            "--tick=0.05",
            "--initial-period=0.1",
            "--min-period=0.05",
            "--max-period=1",
            // No pressure scrubs: only the timer (cached memory is never above 100%, free
            // memory never below 0).
            "--th-frac-cached=1",
            "--th-frac-free=0",
            &child.pid().to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while resident(&img)[..3] != [false; 3] && t.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    fg.kill().unwrap();
    let out = fg.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(&resident(&img)[..4], &[false, false, false, true], "{text}");
    assert!(
        text.contains("scrub #1 (Timer): 1 VMs, dropped 3 pages"),
        "{text}"
    );
}
