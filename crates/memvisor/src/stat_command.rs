//! `memvisor stat PID`: one managed process's budget, policy and regions, as a table or JSON.

use std::fmt::Write;

use clap::Args;
use memvisor_control::{
    format_bytes, socket_dir, ControlClient, ControlError, MigrationStatus, ProcessStatus,
};

/// Arguments of `memvisor stat`.
#[derive(Debug, Args)]
pub struct StatArgs {
    /// Process id of a program started by `memvisor run`.
    pid: u32,
    /// Print the full status as JSON.
    #[arg(long)]
    json: bool,
}

/// Prints the status of one process.
pub fn run(args: StatArgs) -> Result<(), ControlError> {
    let dir = socket_dir::find_socket_dir(args.pid);
    let status = ControlClient::connect(&dir, args.pid)?.status()?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&status)
                .map_err(|e| ControlError::Decode(e.to_string()))?
        );
    } else {
        print!("{}", render_table(&status));
    }
    Ok(())
}

/// Nanoseconds as a short duration.
pub fn format_nanos(ns: u64) -> String {
    match ns {
        0 => "-".into(),
        n if n < 1_000_000 => format!("{:.0}us", n as f64 / 1e3),
        n => format!("{:.1}ms", n as f64 / 1e6),
    }
}

/// The process line and one row per region.
pub fn render_table(s: &ProcessStatus) -> String {
    let mut out = String::new();
    let up = s.at_unix_ms.saturating_sub(s.started_unix_ms) / 1000;
    let _ = writeln!(
        out,
        "pid {} ({})  budget {}  resident {}  swapped {}  policy {}  chunk {}  min-region {}  up {}s  unmanaged mappings {}",
        s.pid,
        s.program,
        format_bytes(s.budget_bytes),
        format_bytes(s.resident_bytes()),
        format_bytes(s.swapped_bytes()),
        s.policy,
        format_bytes(s.chunk_size),
        format_bytes(s.min_region_bytes),
        up,
        s.unmanaged_mappings
    );
    let header = [
        "region",
        "kind",
        "size",
        "mapped",
        "budget",
        "resident",
        "swapped",
        "faults",
        "page-ins",
        "page-outs",
        "read",
        "written",
        "errors",
        "p99-in",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for r in &s.regions {
        rows.push(vec![
            r.name.clone(),
            r.kind.clone(),
            format_bytes(r.size_bytes),
            format_bytes(r.mapped_bytes),
            format_bytes(r.budget_bytes),
            format_bytes(r.resident_bytes),
            format_bytes(r.swapped_bytes),
            (r.missing_faults + r.minor_faults).to_string(),
            r.page_ins.to_string(),
            r.page_outs.to_string(),
            format_bytes(r.bytes_read),
            format_bytes(r.bytes_written),
            (r.read_errors + r.write_errors + r.poisoned_chunks).to_string(),
            format_nanos(r.page_in_p99_nanos),
        ]);
    }
    out.push_str(&align(&rows));
    for r in &s.regions {
        if r.swap_full_episodes > 0 {
            let _ = writeln!(
                out,
                "{}: swap full {}: {} episode(s), {} page-outs failed for lack of space",
                r.name,
                if r.swap_full { "NOW" } else { "earlier" },
                r.swap_full_episodes,
                r.swap_full_failures,
            );
        }
        if r.image_bytes + r.swap_write_bytes_avoided + r.false_read_bytes_avoided > 0 {
            let _ = writeln!(
                out,
                "{}: swap mapper: {} associated with disk-image blocks, {} of swap writes \
                 avoided, {} paged in from images, {} of false reads avoided, associations \
                 ended by guest writes {} and by image writes {}",
                r.name,
                format_bytes(r.image_bytes),
                format_bytes(r.swap_write_bytes_avoided),
                format_bytes(r.image_read_bytes),
                format_bytes(r.false_read_bytes_avoided),
                r.image_associations_ended_by_guest,
                r.image_associations_ended_by_image,
            );
        }
        if r.pinned_evictions_skipped > 0 {
            let _ = writeln!(
                out,
                "{}: {} evictions put off while direct-I/O reads filled their chunks",
                r.name, r.pinned_evictions_skipped,
            );
        }
        if r.overrun_chunks > 0 {
            let _ = writeln!(
                out,
                "{}: {} resident over the budget (overrun: page-outs failed, retried at the next \
                 page-in)",
                r.name,
                format_bytes(r.overrun_chunks * s.chunk_size),
            );
        }
    }
    if let Some(m) = &s.migration {
        let _ = writeln!(out, "{}", migration_line(m));
    }
    out
}

/// One line on the process's end of a live migration: its state, peer and progress, and the
/// last incident it went on after or failed with.
pub fn migration_line(m: &MigrationStatus) -> String {
    let mut line = format!("migration {:#018x}: {} {}", m.migration, m.role, m.state);
    if !m.peer.is_empty() {
        let _ = write!(
            line,
            " ({} {})",
            if m.role == "source" { "to" } else { "from" },
            m.peer
        );
    }
    let _ = write!(
        line,
        ", {} rounds, {} pages ({} as zero), {} on the wire, {:.1} s",
        m.rounds,
        m.pages,
        m.zero_pages,
        format_bytes(m.wire_bytes),
        m.elapsed_ms as f64 / 1e3
    );
    if m.post_copy_pages > 0 || m.remote_pages > 0 {
        let _ = write!(
            line,
            "; post-copy: {} pages still at the source, {} asked for by waiting faults",
            m.remote_pages, m.wanted_pages
        );
    }
    if let Some(e) = &m.error {
        let _ = write!(line, "; {e}");
    }
    line
}

/// Left-aligns the first column and right-aligns the others.
pub fn align(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|v| v.len())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if c < 2 {
                    format!("{v:<w$}", w = widths[c])
                } else {
                    format!("{v:>w$}", w = widths[c])
                }
            })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_migration_is_one_line_with_its_state_and_incident() {
        let m = MigrationStatus {
            role: "destination".into(),
            migration: 0xabc,
            state: "post-copy-paused".into(),
            peer: "10.0.0.1:4000".into(),
            rounds: 3,
            pages: 1000,
            zero_pages: 10,
            wire_bytes: 5 << 20,
            remote_pages: 42,
            wanted_pages: 2,
            elapsed_ms: 2500,
            error: Some("post-copy connection lost after the switch-over (reset)".into()),
            ..Default::default()
        };
        let line = migration_line(&m);
        assert_eq!(line.lines().count(), 1);
        assert!(
            line.starts_with(
                "migration 0x0000000000000abc: destination post-copy-paused (from 10.0.0.1:4000), \
                 3 rounds, 1000 pages (10 as zero)"
            ),
            "{line}"
        );
        assert!(
            line.contains("; post-copy: 42 pages still at the source, 2 asked for by"),
            "{line}"
        );
        assert!(
            line.ends_with("; post-copy connection lost after the switch-over (reset)"),
            "{line}"
        );
        let status = ProcessStatus {
            migration: Some(m),
            ..Default::default()
        };
        assert!(render_table(&status).contains("migration 0x0000000000000abc: destination"));
        // A precopy source without incidents: no post-copy part, no trailing reason.
        let source = MigrationStatus {
            role: "source".into(),
            state: "sending".into(),
            peer: "10.0.0.2:7070".into(),
            ..Default::default()
        };
        let line = migration_line(&source);
        assert!(
            line.contains("source sending (to 10.0.0.2:7070), 0 rounds"),
            "{line}"
        );
        assert!(
            !line.contains("post-copy") && !line.contains("; "),
            "{line}"
        );
    }
}
