//! Prometheus text exposition (format 0.0.4) of managed processes' status.

use std::fmt::Write;

use crate::process_status::{ImageStatus, ProcessStatus, RegionStatus};

/// One metric family: name, type, help, and the value per region.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: fn(&RegionStatus) -> u64,
}

const FAMILIES: &[Family] = &[
    Family {
        name: "memvisor_region_size_bytes",
        kind: "gauge",
        help: "Virtual size of the managed region.",
        value: |r| r.size_bytes,
    },
    Family {
        name: "memvisor_region_mapped_bytes",
        kind: "gauge",
        help: "Bytes of the region the program has mapped.",
        value: |r| r.mapped_bytes,
    },
    Family {
        name: "memvisor_budget_bytes",
        kind: "gauge",
        help: "Resident budget of the region.",
        value: |r| r.budget_bytes,
    },
    Family {
        name: "memvisor_resident_bytes",
        kind: "gauge",
        help: "Bytes of the region in memory.",
        value: |r| r.resident_bytes,
    },
    Family {
        name: "memvisor_swapped_bytes",
        kind: "gauge",
        help: "Bytes of the region only in its swap file.",
        value: |r| r.swapped_bytes,
    },
    Family {
        name: "memvisor_missing_faults_total",
        kind: "counter",
        help: "userfaultfd missing faults served.",
        value: |r| r.missing_faults,
    },
    Family {
        name: "memvisor_minor_faults_total",
        kind: "counter",
        help: "userfaultfd minor faults served.",
        value: |r| r.minor_faults,
    },
    Family {
        name: "memvisor_page_ins_total",
        kind: "counter",
        help: "Chunks read from swap.",
        value: |r| r.page_ins,
    },
    Family {
        name: "memvisor_page_outs_total",
        kind: "counter",
        help: "Chunks written to swap.",
        value: |r| r.page_outs,
    },
    Family {
        name: "memvisor_clean_evictions_total",
        kind: "counter",
        help: "Chunks evicted without a write.",
        value: |r| r.clean_evictions,
    },
    Family {
        name: "memvisor_swap_read_bytes_total",
        kind: "counter",
        help: "Bytes read from swap.",
        value: |r| r.bytes_read,
    },
    Family {
        name: "memvisor_swap_written_bytes_total",
        kind: "counter",
        help: "Bytes written to swap.",
        value: |r| r.bytes_written,
    },
    Family {
        name: "memvisor_swap_read_errors_total",
        kind: "counter",
        help: "Failed swap reads and checksum mismatches.",
        value: |r| r.read_errors,
    },
    Family {
        name: "memvisor_swap_write_errors_total",
        kind: "counter",
        help: "Failed swap writes.",
        value: |r| r.write_errors,
    },
    Family {
        name: "memvisor_poisoned_chunks",
        kind: "gauge",
        help: "Chunks whose page-in failed (accesses raise SIGBUS).",
        value: |r| r.poisoned_chunks,
    },
    Family {
        name: "memvisor_overrun_chunks",
        kind: "gauge",
        help: "Resident chunks over the budget after failed page-outs.",
        value: |r| r.overrun_chunks,
    },
    Family {
        name: "memvisor_swap_full",
        kind: "gauge",
        help: "1 while page-outs fail because the swap filesystem is full, else 0.",
        value: |r| u64::from(r.swap_full),
    },
    Family {
        name: "memvisor_swap_full_episodes_total",
        kind: "counter",
        help: "Episodes of a full swap filesystem.",
        value: |r| r.swap_full_episodes,
    },
    Family {
        name: "memvisor_swap_full_write_failures_total",
        kind: "counter",
        help: "Page-outs that failed for lack of space on the swap filesystem.",
        value: |r| r.swap_full_failures,
    },
    Family {
        name: "memvisor_image_bytes",
        kind: "gauge",
        help: "Bytes of guest pages associated with a disk-image block (swap mapper).",
        value: |r| r.image_bytes,
    },
    Family {
        name: "memvisor_swap_write_avoided_bytes_total",
        kind: "counter",
        help: "Bytes evicted without a swap write because a disk image holds them.",
        value: |r| r.swap_write_bytes_avoided,
    },
    Family {
        name: "memvisor_image_read_bytes_total",
        kind: "counter",
        help: "Bytes paged in from disk images instead of swap.",
        value: |r| r.image_read_bytes,
    },
    Family {
        name: "memvisor_false_read_avoided_bytes_total",
        kind: "counter",
        help: "Bytes not read from swap because a file read was about to overwrite them.",
        value: |r| r.false_read_bytes_avoided,
    },
    Family {
        name: "memvisor_pinned_evictions_skipped_total",
        kind: "counter",
        help: "Evictions put off while a direct-I/O read filled the chunk.",
        value: |r| r.pinned_evictions_skipped,
    },
    Family {
        name: "memvisor_image_associations_ended_by_guest_total",
        kind: "counter",
        help: "Image associations ended because the program wrote the page.",
        value: |r| r.image_associations_ended_by_guest,
    },
    Family {
        name: "memvisor_image_associations_ended_by_image_total",
        kind: "counter",
        help: "Image associations ended because the image block was written.",
        value: |r| r.image_associations_ended_by_image,
    },
    Family {
        name: "memvisor_own_chunks_spared_total",
        kind: "counter",
        help:
            "Chunks of the program's own memory that eviction passed over to take one an image holds.",
        value: |r| r.own_chunks_spared,
    },
    Family {
        name: "memvisor_page_in_p99_seconds",
        kind: "gauge",
        help: "99th percentile page-in service time (log2 bucket upper bound).",
        value: |r| r.page_in_p99_nanos,
    },
];

/// One metric family of disk images: name, type, help, and the value per image.
struct ImageFamily {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: fn(&ImageStatus) -> u64,
}

/// Per disk image a program reads into guest RAM (`ProcessStatus::images`), labelled with
/// `image` (its path) and `host_cache` (the mode).
const IMAGE_FAMILIES: &[ImageFamily] = &[
    ImageFamily {
        name: "memvisor_image_guest_read_bytes_total",
        kind: "counter",
        help: "Bytes the program read from the image into guest RAM.",
        value: |i| i.guest_read_bytes,
    },
    ImageFamily {
        name: "memvisor_image_host_cached_bytes",
        kind: "gauge",
        help: "Bytes of the image in the host page cache (cachestat).",
        value: |i| i.cached_bytes,
    },
    ImageFamily {
        name: "memvisor_image_host_cache_dropped_bytes_total",
        kind: "counter",
        help: "Bytes dropped from the host page cache because the guest holds them (exclusive host cache).",
        value: |i| i.host_cache_dropped_bytes,
    },
    ImageFamily {
        name: "memvisor_image_host_cache_kept_dirty_bytes_total",
        kind: "counter",
        help: "Bytes the guest holds that stayed in the host cache because they were dirty or under writeback.",
        value: |i| i.host_cache_kept_dirty_bytes,
    },
    ImageFamily {
        name: "memvisor_image_host_cache_demoted_bytes_total",
        kind: "counter",
        help: "Bytes let back into the host page cache when memvisor evicted the guest's copy.",
        value: |i| i.host_cache_demoted_bytes,
    },
    ImageFamily {
        name: "memvisor_image_cache_limit_bytes",
        kind: "gauge",
        help: "Limit on the image's host page cache (0: none).",
        value: |i| i.cache_limit_bytes.unwrap_or(0),
    },
    ImageFamily {
        name: "memvisor_image_cache_model_bytes",
        kind: "gauge",
        help: "Bytes the image cache's CAR model holds under the limit.",
        value: |i| i.cache_model_bytes,
    },
    ImageFamily {
        name: "memvisor_image_cache_guest_held_bytes",
        kind: "gauge",
        help: "Of the model's bytes, those the guest holds too (exclusive host cache under a limit).",
        value: |i| i.cache_guest_held_bytes,
    },
    ImageFamily {
        name: "memvisor_image_cache_guest_released_bytes_total",
        kind: "counter",
        help: "Bytes the guest let go while the host cache still held them (kept as blocks only the host holds).",
        value: |i| i.cache_guest_released_bytes,
    },
    ImageFamily {
        name: "memvisor_image_cache_hits_total",
        kind: "counter",
        help: "Block accesses of the image found in its cache model.",
        value: |i| i.cache_hits,
    },
    ImageFamily {
        name: "memvisor_image_cache_misses_total",
        kind: "counter",
        help: "Block accesses of the image not found in its cache model.",
        value: |i| i.cache_misses,
    },
    ImageFamily {
        name: "memvisor_image_cache_evicted_dropped_bytes_total",
        kind: "counter",
        help: "Bytes dropped from the host page cache because the image cache model evicted them.",
        value: |i| i.cache_evicted_dropped_bytes,
    },
    ImageFamily {
        name: "memvisor_image_cache_reconciled_bytes_total",
        kind: "counter",
        help: "Bytes dropped from the host page cache because the model did not hold them (reconciliation with cachestat).",
        value: |i| i.cache_reconciled_bytes,
    },
    ImageFamily {
        name: "memvisor_image_cache_folio_dropped_bytes_total",
        kind: "counter",
        help: "Bytes dropped from the host page cache in 2 MiB windows around large folios that held blocks of the model, to bring the cache within its limit.",
        value: |i| i.cache_folio_dropped_bytes,
    },
    ImageFamily {
        name: "memvisor_image_host_cache_errors_total",
        kind: "counter",
        help: "Failed host-cache drops or demotions.",
        value: |i| i.host_cache_errors,
    },
];

/// Escapes a label value (backslash, double quote, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders every region of every process, one sample per (family, region).
pub fn render(processes: &[ProcessStatus]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# HELP memvisor_process_budget_bytes Process budget.");
    let _ = writeln!(out, "# TYPE memvisor_process_budget_bytes gauge");
    for p in processes {
        let _ = writeln!(
            out,
            "memvisor_process_budget_bytes{{pid=\"{}\",program=\"{}\",policy=\"{}\"}} {}",
            p.pid,
            escape(&p.program),
            escape(&p.policy),
            p.budget_bytes
        );
    }
    let _ = writeln!(
        out,
        "# HELP memvisor_refaults_saved_total Page-ins that a budget larger by extra_bytes would have saved (refault distances; cumulative over sizes)."
    );
    let _ = writeln!(out, "# TYPE memvisor_refaults_saved_total counter");
    for p in processes {
        for r in &p.regions {
            let c = &r.refaults;
            let n = c.refaults.len();
            // 16 points of the curve (every bucket if there are fewer).
            let every = n.div_ceil(16).max(1);
            for k in (every..=n).step_by(every) {
                let extra = c.scale().upper(k - 1);
                let _ = writeln!(
                    out,
                    "memvisor_refaults_saved_total{{pid=\"{}\",program=\"{}\",region=\"{}\",kind=\"{}\",extra_bytes=\"{extra}\"}} {}",
                    p.pid,
                    escape(&p.program),
                    escape(&r.name),
                    escape(&r.kind),
                    c.saved_with(extra)
                );
            }
        }
    }
    for f in FAMILIES {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for p in processes {
            for r in &p.regions {
                let v = (f.value)(r);
                let labels = format!(
                    "pid=\"{}\",program=\"{}\",region=\"{}\",kind=\"{}\"",
                    p.pid,
                    escape(&p.program),
                    escape(&r.name),
                    escape(&r.kind)
                );
                if f.name.ends_with("_seconds") {
                    let _ = writeln!(out, "{}{{{labels}}} {}", f.name, v as f64 / 1e9);
                } else {
                    let _ = writeln!(out, "{}{{{labels}}} {v}", f.name);
                }
            }
        }
    }
    for f in IMAGE_FAMILIES {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for p in processes {
            for i in &p.images {
                let _ = writeln!(
                    out,
                    "{}{{pid=\"{}\",program=\"{}\",image=\"{}\",host_cache=\"{}\"}} {}",
                    f.name,
                    p.pid,
                    escape(&p.program),
                    escape(&i.path),
                    escape(&i.host_cache),
                    (f.value)(i)
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_families_and_escapes() {
        let p = ProcessStatus {
            pid: 42,
            program: "a\"b".into(),
            budget_bytes: 100,
            policy: "clock".into(),
            regions: vec![RegionStatus {
                name: "arena#0".into(),
                kind: "arena".into(),
                resident_bytes: 4096,
                page_outs: 3,
                pinned_evictions_skipped: 7,
                page_in_p99_nanos: 2_000_000,
                refaults: crate::RefaultStatus {
                    unit_bytes: 1 << 20,
                    sub_buckets: 16,
                    refaults: (0..32).collect(),
                    beyond: 0,
                    evicted_bytes: 0,
                },
                ..Default::default()
            }],
            images: vec![crate::ImageStatus {
                path: "/var/lib/disk.img".into(),
                host_cache: "exclusive".into(),
                host_cache_dropped_bytes: 8192,
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = render(&[p]);
        assert!(
            text.contains(
                "memvisor_image_host_cache_dropped_bytes_total{pid=\"42\",program=\"a\\\"b\",image=\"/var/lib/disk.img\",host_cache=\"exclusive\"} 8192\n"
            ),
            "{text}"
        );

        assert!(text.contains(
            "memvisor_process_budget_bytes{pid=\"42\",program=\"a\\\"b\",policy=\"clock\"} 100"
        ));
        assert!(text.contains(
            "memvisor_resident_bytes{pid=\"42\",program=\"a\\\"b\",region=\"arena#0\",kind=\"arena\"} 4096"
        ));
        assert!(text.contains("memvisor_page_outs_total{") && text.contains("} 3\n"));
        assert!(
            text.contains(
                "memvisor_pinned_evictions_skipped_total{pid=\"42\",program=\"a\\\"b\",region=\"arena#0\",kind=\"arena\"} 7\n"
            ),
            "{text}"
        );
        assert!(text.contains("} 0.002\n"));
        // 16 points of 32 buckets: every second one, cumulative.
        assert_eq!(text.matches("memvisor_refaults_saved_total{").count(), 16);
        assert!(
            text.contains("kind=\"arena\",extra_bytes=\"2097152\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("extra_bytes=\"33554432\"} 496\n"), "{text}");
        assert_eq!(
            text.matches("# TYPE").count(),
            FAMILIES.len() + IMAGE_FAMILIES.len() + 2
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let value = line.rsplit(' ').next().unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
