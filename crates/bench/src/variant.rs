//! [`Variant`]: what holds the workload's memory — the kernel (plain anonymous memory in a
//! memory cgroup limited to the budget, swapping to a swap file) or a memvisor region — and,
//! for memvisor, the region options passed through to [`RegionConfig`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use memvisor_pager::{PageInUnit, PageOut, RegionConfig, ResolveMode};
use memvisor_policy::PolicySpec;

use crate::bench_error::BenchError;
use crate::byte_size::{format_bytes, parse_bytes, parse_interval};

/// Options of a memvisor variant, spelled `memvisor[:KEY=VALUE...]`. Unset keys keep the
/// [`RegionConfig`] defaults. Keys: `chunk` (size, e.g. `64K`), `policy` (a policy spec),
/// `sample` (access sampling interval: `1s`, `100ms`, `off`), `resolve` (`copy` |
/// `alias-continue`), `dirty` (`on` | `off`: dirty tracking), `pageout` (`sync` | `threads` |
/// `io-uring`), `depth` (writer threads or io_uring depth), `headroom` (chunks kept free by
/// asynchronous page-out), `readahead` (`on` | `off`), `overlap` (`on` | `off`: overlapped page-in
/// reads), `async-in` (`on` | `off`: asynchronous page-in), `unit` (`adaptive` | `chunk` |
/// `page`: how much a page-in reads), `parallel` (`on` | `off`: parallel page-in), `poll` (busy-polling window: `50us`, `off`), `wake` (`on` | `off`: idle CPUs asked to poll while the handler polls). New pager settings are added here
/// (one key each) and reach the workload child unchanged through the variant's spelling.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RegionOptions {
    /// Chunk size in bytes.
    pub chunk_size: Option<usize>,
    /// Eviction policy.
    pub policy: Option<PolicySpec>,
    /// Access sampling interval (`Some(None)`: sampling off).
    pub sample_interval: Option<Option<Duration>>,
    /// Fault resolution mode.
    pub resolve: Option<ResolveMode>,
    /// Dirty tracking on or off.
    pub dirty_tracking: Option<bool>,
    /// Page-out engine: `sync`, `threads` or `io-uring`.
    pub page_out: Option<String>,
    /// Writer threads or io_uring depth.
    pub depth: Option<usize>,
    /// Asynchronous page-out headroom in chunks.
    pub headroom: Option<usize>,
    /// Sequential readahead on or off.
    pub readahead: Option<bool>,
    /// Overlapped page-in reads on or off.
    pub overlap: Option<bool>,
    /// Asynchronous page-in on or off.
    pub async_page_in: Option<bool>,
    /// How much a page-in reads.
    pub page_in_unit: Option<PageInUnit>,
    /// Parallel page-in on or off.
    pub parallel: Option<bool>,
    /// Busy-polling window (`Some(None)`: off).
    pub busy_poll: Option<Option<Duration>>,
    /// CPU wake-latency request while busy polling on or off.
    pub cpu_wake_latency: Option<bool>,
}

impl RegionOptions {
    /// Applies the options that are set to `config`.
    pub fn apply(&self, mut config: RegionConfig) -> RegionConfig {
        if let Some(c) = self.chunk_size {
            config = config.chunk_size(c);
        }
        if let Some(p) = &self.policy {
            config = config.policy(p.clone());
        }
        if let Some(s) = self.sample_interval {
            config = config.sample_interval(s);
        }
        if let Some(r) = self.resolve {
            config = config.resolve(r);
        }
        if let Some(d) = self.dirty_tracking {
            config = config.dirty_tracking(d);
        }
        if self.page_out.is_some() || self.depth.is_some() {
            let engine = self.page_out.as_deref().unwrap_or("threads");
            let spelled = match (engine, self.depth) {
                ("sync", _) => "sync".to_string(),
                (e, Some(n)) => format!("{e}:{n}"),
                (e, None) => e.to_string(),
            };
            // Validated when the key was set.
            if let Ok(p) = spelled.parse::<PageOut>() {
                config = config.page_out(p);
            }
        }
        if let Some(h) = self.headroom {
            config = config.headroom(h);
        }
        if let Some(r) = self.readahead {
            config = config.readahead(r);
        }
        if let Some(o) = self.overlap {
            config = config.overlapped_page_in(o);
        }
        if let Some(a) = self.async_page_in {
            config = config.async_page_in(a);
        }
        if let Some(u) = self.page_in_unit {
            config = config.page_in_unit(u);
        }
        if let Some(p) = self.parallel {
            config = config.parallel_page_in(p);
        }
        if let Some(b) = self.busy_poll {
            config = config.busy_poll(b);
        }
        if let Some(w) = self.cpu_wake_latency {
            config = config.cpu_wake_latency(w);
        }
        config
    }

    fn set(&mut self, spec: &str, key: &str, value: &str) -> Result<(), BenchError> {
        let bad = |reason: String| BenchError::bad("variant", spec, reason);
        let on_off = || match value {
            "on" => Ok(true),
            "off" => Ok(false),
            _ => Err(bad(format!("{key} must be on or off"))),
        };
        match key {
            "chunk" => self.chunk_size = Some(parse_bytes("variant chunk", value)?),
            "policy" => {
                let p: PolicySpec = value.parse().map_err(|e| bad(format!("policy: {e}")))?;
                self.policy = Some(p);
            }
            "sample" => self.sample_interval = Some(parse_interval("variant sample", value)?),
            "poll" => self.busy_poll = Some(parse_interval("variant poll", value)?),
            "resolve" => {
                self.resolve = Some(match value {
                    "copy" => ResolveMode::Copy,
                    "alias-continue" => ResolveMode::AliasContinue,
                    _ => return Err(bad("resolve must be copy or alias-continue".into())),
                })
            }
            "dirty" => self.dirty_tracking = Some(on_off()?),
            "overlap" => self.overlap = Some(on_off()?),
            "async-in" => self.async_page_in = Some(on_off()?),
            "unit" => self.page_in_unit = Some(value.parse().map_err(bad)?),
            "parallel" => self.parallel = Some(on_off()?),
            "wake" => self.cpu_wake_latency = Some(on_off()?),
            "readahead" => self.readahead = Some(on_off()?),
            "pageout" => {
                value
                    .parse::<PageOut>()
                    .map_err(|e| bad(format!("pageout: {e}")))?;
                self.page_out = Some(value.to_string());
            }
            "depth" | "headroom" => {
                let n: usize = value
                    .parse()
                    .ok()
                    .filter(|&n| (key == "headroom" || n >= 1) && n <= 64)
                    .ok_or_else(|| bad(format!("{key} {value:?} is not a count up to 64")))?;
                if key == "depth" {
                    self.depth = Some(n);
                } else {
                    self.headroom = Some(n);
                }
            }
            _ => {
                return Err(bad(format!(
                    "unknown key {key:?} (known: chunk, policy, sample, resolve, dirty, \
                     pageout, depth, headroom, readahead, overlap, async-in, unit, parallel, poll, \
                     wake)"
                )))
            }
        }
        Ok(())
    }
}

/// Who manages the workload's memory.
#[derive(Debug, Clone, PartialEq)]
pub enum Variant {
    /// Plain anonymous memory; the driver runs the process in a memory cgroup limited to the
    /// budget with a swap file on the swap directory's filesystem. Spelled `kernel`, or
    /// `kernel:wake=on` for a host tuned for wake-up latency: the driver holds the CPU latency
    /// QoS at 0 (idle CPUs poll, `CpuWakeLatency`) for the whole run.
    Kernel {
        /// Whether idle CPUs are kept polling during the run.
        cpu_wake_latency: bool,
    },
    /// A memvisor region with the budget, swapping to the swap directory.
    Memvisor(RegionOptions),
}

impl Variant {
    /// The kernel's swap as the host has it: the baseline of every speedup.
    pub const KERNEL: Variant = Variant::Kernel {
        cpu_wake_latency: false,
    };

    /// Whether the kernel pages this variant (in a memory cgroup).
    pub fn is_kernel(&self) -> bool {
        matches!(self, Self::Kernel { .. })
    }

    /// Whether this is the baseline: the kernel with the host's own idle settings.
    pub fn is_baseline(&self) -> bool {
        *self == Self::KERNEL
    }
}

impl FromStr for Variant {
    type Err = BenchError;

    fn from_str(spec: &str) -> Result<Self, BenchError> {
        let mut parts = spec.trim().split(':');
        match parts.next().unwrap_or("") {
            "kernel" => {
                let mut cpu_wake_latency = false;
                for kv in parts {
                    cpu_wake_latency = match kv.trim() {
                        "wake=on" => true,
                        "wake=off" => false,
                        _ => {
                            return Err(BenchError::bad(
                                "variant",
                                spec,
                                format!("{kv:?}: kernel takes only wake=on or wake=off"),
                            ))
                        }
                    };
                }
                Ok(Self::Kernel { cpu_wake_latency })
            }
            "memvisor" => {
                let mut o = RegionOptions::default();
                for kv in parts {
                    let (k, v) = kv.split_once('=').ok_or_else(|| {
                        BenchError::bad("variant", spec, format!("{kv:?} is not KEY=VALUE"))
                    })?;
                    o.set(spec, k.trim(), v.trim())?;
                }
                Ok(Self::Memvisor(o))
            }
            other => Err(BenchError::bad(
                "variant",
                spec,
                format!("unknown variant {other:?} (kernel[:wake=on] or memvisor[:KEY=VALUE...])"),
            )),
        }
    }
}

impl fmt::Display for Variant {
    /// The canonical spelling; it parses back to an equal variant.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Kernel {
                cpu_wake_latency: false,
            } => write!(f, "kernel"),
            Self::Kernel {
                cpu_wake_latency: true,
            } => write!(f, "kernel:wake=on"),
            Self::Memvisor(o) => {
                write!(f, "memvisor")?;
                if let Some(c) = o.chunk_size {
                    write!(f, ":chunk={}", format_bytes(c))?;
                }
                if let Some(p) = &o.policy {
                    write!(f, ":policy={p}")?;
                }
                if let Some(s) = o.sample_interval {
                    match s {
                        None => write!(f, ":sample=off")?,
                        Some(d) if d.subsec_nanos() == 0 => write!(f, ":sample={}s", d.as_secs())?,
                        Some(d) if d.subsec_nanos() % 1_000_000 == 0 => {
                            write!(f, ":sample={}ms", d.as_millis())?
                        }
                        Some(d) => write!(f, ":sample={}us", d.as_micros())?,
                    }
                }
                if let Some(r) = o.resolve {
                    write!(f, ":resolve={}", r.name())?;
                }
                if let Some(d) = o.dirty_tracking {
                    write!(f, ":dirty={}", on_off_word(d))?;
                }
                if let Some(p) = &o.page_out {
                    write!(f, ":pageout={p}")?;
                }
                if let Some(n) = o.depth {
                    write!(f, ":depth={n}")?;
                }
                if let Some(n) = o.headroom {
                    write!(f, ":headroom={n}")?;
                }
                if let Some(r) = o.readahead {
                    write!(f, ":readahead={}", on_off_word(r))?;
                }
                if let Some(v) = o.overlap {
                    write!(f, ":overlap={}", on_off_word(v))?;
                }
                if let Some(a) = o.async_page_in {
                    write!(f, ":async-in={}", on_off_word(a))?;
                }
                if let Some(u) = o.page_in_unit {
                    write!(f, ":unit={u}")?;
                }
                if let Some(p) = o.parallel {
                    write!(f, ":parallel={}", on_off_word(p))?;
                }
                if let Some(b) = o.busy_poll {
                    match b {
                        None => write!(f, ":poll=off")?,
                        Some(d) => write!(f, ":poll={}us", d.as_micros())?,
                    }
                }
                if let Some(w) = o.cpu_wake_latency {
                    write!(f, ":wake={}", on_off_word(w))?;
                }
                Ok(())
            }
        }
    }
}

/// `on` or `off`, as the keys are spelled.
fn on_off_word(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_parse_and_round_trip() {
        assert_eq!("kernel".parse::<Variant>().unwrap(), Variant::KERNEL);
        let tuned: Variant = "kernel:wake=on".parse().unwrap();
        assert!(tuned.is_kernel() && !tuned.is_baseline());
        assert_eq!(tuned.to_string().parse::<Variant>().unwrap(), tuned);
        assert!(Variant::KERNEL.is_baseline());
        assert_eq!(
            "memvisor".parse::<Variant>().unwrap(),
            Variant::Memvisor(RegionOptions::default())
        );
        for s in [
            "memvisor:chunk=64K",
            "memvisor:chunk=1M:policy=clock:sample=off:resolve=alias-continue:dirty=off",
            "memvisor:pageout=io-uring:depth=8:headroom=4",
            "memvisor:pageout=sync",
            "memvisor:readahead=off",
            "memvisor:sample=100ms",
            "memvisor:sample=1500us",
            "memvisor:sample=2s",
            "memvisor:chunk=4K:overlap=off:async-in=on:poll=100us",
            "memvisor:unit=chunk",
            "memvisor:parallel=off:unit=page",
            "memvisor:chunk=64K:unit=page",
            "memvisor:pageout=auto:poll=off",
            "memvisor:wake=off",
        ] {
            let v: Variant = s.parse().unwrap();
            assert_eq!(v.to_string().parse::<Variant>().unwrap(), v, "{s}");
        }
        let v: Variant = "memvisor:chunk=64K:sample=off".parse().unwrap();
        let c = match v {
            Variant::Memvisor(o) => o.apply(RegionConfig::new(1 << 20, 1 << 20, "/tmp")),
            Variant::Kernel { .. } => unreachable!(),
        };
        assert_eq!(c.chunk_size, 64 << 10);
        assert_eq!(c.sample_interval, None);
    }

    #[test]
    fn bad_variants_name_the_problem() {
        for (s, needle) in [
            ("swap", "unknown variant"),
            ("kernel:x=1", "kernel takes only wake=on or wake=off"),
            ("memvisor:wake=yes", "wake must be on or off"),
            ("memvisor:chunk", "KEY=VALUE"),
            ("memvisor:speed=9", "unknown key"),
            ("memvisor:async-in=yes", "async-in must be on or off"),
            ("memvisor:poll=fast", "duration"),
            ("memvisor:chunk=1Q", "size"),
            ("memvisor:policy=nope", "policy"),
            ("memvisor:dirty=maybe", "on or off"),
            ("memvisor:pageout=lazy", "pageout"),
            ("memvisor:depth=0", "count up to 64"),
        ] {
            let e = s.parse::<Variant>().unwrap_err().to_string();
            assert!(e.contains(needle), "{s}: {e}");
        }
    }
}
