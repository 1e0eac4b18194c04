//! `memvisor migrate` refuses bad arguments with one line naming the option, before it touches
//! any process: here `--post-copy` (never, auto, always; `--post-copy` alone is always).

use std::process::Command;

/// `memvisor migrate` with `extra` after arguments that would otherwise be checked later (the
/// process, key and sockets do not exist).
fn migrate(extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memvisor"))
        .args([
            "migrate",
            "999999",
            "--to",
            "127.0.0.1:1",
            "--key",
            "/nonexistent/memvisor-test.key",
            "--qmp",
            "/nonexistent/src.qmp",
            "--dest-qmp",
            "/nonexistent/dst.qmp",
            "--device-uri",
            "tcp:127.0.0.1:2",
        ])
        .args(extra)
        .output()
        .unwrap()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_bad_post_copy_mode_is_named() {
    let out = migrate(&["--post-copy=sometimes"]);
    assert!(!out.status.success());
    let e = stderr(&out);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains(
            "--post-copy: 'sometimes' is not a post-copy mode: expected one of never, auto, always"
        ),
        "{e}"
    );
}

#[test]
fn good_post_copy_modes_pass_to_the_next_check() {
    // Each mode (and the bare flag) is accepted: what fails next is the key file.
    for extra in [
        &[][..],
        &["--post-copy"],
        &["--post-copy=never"],
        &["--post-copy=auto"],
        &["--post-copy=always"],
    ] {
        let out = migrate(extra);
        assert!(!out.status.success());
        let e = stderr(&out);
        assert!(e.contains("--key"), "{extra:?}: {e}");
        assert!(!e.contains("post-copy"), "{extra:?}: {e}");
    }
}
