//! A managed program that changes its user and group ids while keeping capabilities
//! (`setpriv`, as service managers do) runs on: the library's threads follow the program's
//! credential changes instead of making glibc abort the process.

mod common;

use common::*;

#[test]
fn setpriv_with_kept_capabilities_runs_under_memvisor() {
    if !userfaultfd_usable() {
        return;
    }
    if !Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        eprintln!("SKIPPED: setpriv (util-linux) not installed");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    // setpriv sets PR_SET_KEEPCAPS, changes the user id, raises its capabilities again on
    // its own thread and then changes the group id and groups: without the library's threads
    // following, glibc aborted here (SIGABRT, status 134).
    let o = memvisor(&t.path().join("ctl"))
        .args(["run", "--budget", "32M", "--swap-dir"])
        .arg(t.path())
        .args([
            "--",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ])
        .args(["sh", "-c", "id -u; id -g"])
        .output()
        .unwrap();
    assert!(o.status.success(), "status {:?}: {}", o.status, stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "65534\n65534\n");
}

use std::process::Command;
