//! `memvisor broker`: divides one memory total among every process under memvisor on this
//! host (their budgets, and the host cache limits of their disk images that have one), one
//! decision per interval, until interrupted (or once, with `--once`).

use std::time::Duration;

use clap::Args;
use memvisor_broker::{Broker, BrokerError, BrokerOptions, Limits, Mode, ProcessLimit};
use memvisor_control::{
    format_bytes, interrupt, parse_duration, ByteSize, MetricsServer, MIN_IMAGE_CACHE_BYTES,
};

use crate::host_memory::mem_total_bytes;

/// Arguments of `memvisor broker`.
#[derive(Debug, Args)]
pub struct BrokerArgs {
    /// The memory to divide: bytes (8G) or a percentage of host RAM (host RAM less a reserve
    /// for the host itself).
    #[arg(long, value_name = "SIZE|PCT")]
    total: String,
    /// How: `static` (equal shares), `proportional` (to guest RAM size, image size for an
    /// image cache) or `utility` (by the time more memory saves each process's page-ins or
    /// image reads, measured from its refault curves).
    #[arg(long, default_value = "utility", value_name = "MODE")]
    mode: String,
    /// Time between decisions (curves are measured over it).
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    interval: String,
    /// Budgets and image cache limits move in multiples of this (default: a 64th of the
    /// total rounded down to a power of two, 1M to 16M; 16M from a 1G total up).
    #[arg(long, value_name = "SIZE")]
    step: Option<String>,
    /// The most one decision moves (utility) or changes one budget or limit (static,
    /// proportional). In utility mode a budget or limit also gives another at most an
    /// eighth of itself in one decision (not when fitting a smaller total or a bound).
    #[arg(long, default_value = "256M", value_name = "SIZE")]
    max_change: String,
    /// Changes smaller than this are not made (except to fit the total or a bound; default:
    /// two steps).
    #[arg(long, value_name = "SIZE")]
    hysteresis: Option<String>,
    /// Least budget of a process (at least one of its chunks; default: four steps, at most
    /// --max).
    #[arg(long, value_name = "SIZE")]
    min: Option<String>,
    /// Most budget of a process (default: its guest RAM, plus a third of it, at most the code
    /// regions' size, for TCG's code buffer; else the total).
    #[arg(long, value_name = "SIZE")]
    max: Option<String>,
    /// Bounds of one process's budget, by pid or name (QEMU's `-name guest=NAME`, else the
    /// program's name): `vm1=512M:2G`, `1234=:1G`. Repeatable; the last match wins. A limit
    /// by name that several processes carry applies to none of them. Image caches have
    /// --image-min and --image-max.
    #[arg(long = "limit", value_name = "NAME=MIN:MAX")]
    limits: Vec<String>,
    /// Least host cache limit of a disk image (at least 1M; default: one step, at most
    /// --image-max). Only images that have a limit (`memvisor run --image-cache`, `memvisor
    /// set --image-cache`) are divided with the budgets; the others are left to the kernel.
    #[arg(long, value_name = "SIZE")]
    image_min: Option<String>,
    /// Most host cache limit of a disk image (default: the total; never more than the image's
    /// size, rounded up to a step).
    #[arg(long, value_name = "SIZE")]
    image_max: Option<String>,
    /// Utility: a move must save at least this many milliseconds of waiting (page-ins, image
    /// reads) per second...
    #[arg(long, default_value_t = 1.0, value_name = "RATE")]
    min_gain: f64,
    /// ...and save per byte more than the donor loses per byte by this factor (0.5: 50%).
    #[arg(long, default_value_t = 0.5, value_name = "FACTOR")]
    margin: f64,
    /// Serve the split and every curve (budgets' and image caches') for Prometheus at
    /// `[ADDR:]PORT` (loopback unless --metrics-allow-remote).
    #[arg(long, value_name = "[ADDR:]PORT")]
    metrics: Option<String>,
    /// Allow --metrics on a non-loopback address.
    #[arg(long, requires = "metrics")]
    metrics_allow_remote: bool,
    /// One decision, then exit.
    #[arg(long)]
    once: bool,
    /// Decide and log, but change no budget or image cache limit.
    #[arg(long)]
    dry_run: bool,
}

fn size(option: &str, text: &str) -> Result<u64, BrokerError> {
    match ByteSize::parse(text) {
        Ok(ByteSize::Bytes(b)) => Ok(b),
        Ok(ByteSize::Percent(_)) => Err(BrokerError::Option {
            option: format!("{option} {text}"),
            reason: "a size, not a percentage".into(),
        }),
        Err(e) => Err(BrokerError::Option {
            option: format!("{option} {text}"),
            reason: e.to_string(),
        }),
    }
}

/// The step an omitted `--step` gets: a 64th of the total rounded down to a power of two,
/// from 1M to 16M (16M from a 1G total up). The hysteresis (two steps) and the minimums (a
/// process four steps, an image cache one) follow the step, so a small total (a few guests of
/// a few hundred MiB) is divided as finely as a large one. A fixed 16M step with a 64M minimum
/// left four guests sharing 320M all at their minimums, and an image cache at 16M could never
/// give the 32M hysteresis: the broker moved nothing (`docs/benchmarks.md`, density).
pub fn default_step(total: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    let share = (total / 64).clamp(MIB, 16 * MIB);
    // The largest power of two not above the share.
    1u64 << (63 - share.leading_zeros())
}

/// The broker's options from the command line, checked.
fn options(args: &BrokerArgs, host_ram: u64) -> Result<(BrokerOptions, Duration), BrokerError> {
    let refuse = |option: String, reason: &str| BrokerError::Option {
        option,
        reason: reason.to_string(),
    };
    let total = ByteSize::parse(&args.total)
        .map_err(|e| refuse(format!("--total {}", args.total), &e.to_string()))?
        .resolve(host_ram);
    if total > host_ram {
        return Err(refuse(
            format!("--total {}", args.total),
            &format!("more than this host's RAM ({})", format_bytes(host_ram)),
        ));
    }
    let interval = match parse_duration(&args.interval) {
        Ok(Some(d)) if d >= Duration::from_millis(200) => d,
        Ok(_) => {
            return Err(refuse(
                format!("--interval {}", args.interval),
                "at least 200ms",
            ))
        }
        Err(e) => return Err(refuse(format!("--interval {}", args.interval), e)),
    };
    let given = |option: &str, text: &Option<String>, default: u64| {
        text.as_deref().map_or(Ok(default), |t| size(option, t))
    };
    let step = given("--step", &args.step, default_step(total))?;
    if step < 4096 {
        return Err(refuse(
            format!("--step {}", args.step.as_deref().unwrap_or("")),
            "at least one page (4K)",
        ));
    }
    if step > total {
        return Err(refuse(
            format!("--step {}", args.step.as_deref().unwrap_or("")),
            "more than --total",
        ));
    }
    if !(args.min_gain >= 0.0 && args.min_gain.is_finite()) {
        return Err(refuse(
            format!("--min-gain {}", args.min_gain),
            "a rate of 0 or more",
        ));
    }
    if !(args.margin >= 0.0 && args.margin.is_finite()) {
        return Err(refuse(
            format!("--margin {}", args.margin),
            "a factor of 0 or more",
        ));
    }
    let max = args.max.as_deref().map(|m| size("--max", m)).transpose()?;
    let min = given(
        "--min",
        &args.min,
        (4 * step).min(max.unwrap_or(u64::MAX)).min(total),
    )?;
    if min > total {
        return Err(refuse(
            format!("--min {}", args.min.as_deref().unwrap_or("")),
            "more than --total",
        ));
    }
    if max.is_some_and(|m| m < min) {
        return Err(refuse(
            format!("--max {}", args.max.as_deref().unwrap_or("")),
            "less than --min",
        ));
    }
    let image_max = args
        .image_max
        .as_deref()
        .map(|m| size("--image-max", m))
        .transpose()?;
    let image_min = given(
        "--image-min",
        &args.image_min,
        step.max(MIN_IMAGE_CACHE_BYTES)
            .min(image_max.unwrap_or(u64::MAX)),
    )?;
    if image_min < MIN_IMAGE_CACHE_BYTES {
        return Err(refuse(
            format!("--image-min {}", args.image_min.as_deref().unwrap_or("")),
            &format!(
                "at least {} (the smallest image cache limit)",
                format_bytes(MIN_IMAGE_CACHE_BYTES)
            ),
        ));
    }
    if image_min > total {
        return Err(refuse(
            format!("--image-min {}", args.image_min.as_deref().unwrap_or("")),
            "more than --total",
        ));
    }
    if image_max.is_some_and(|m| m < image_min) {
        return Err(refuse(
            format!("--image-max {}", args.image_max.as_deref().unwrap_or("")),
            "less than --image-min",
        ));
    }
    let process_limits = args
        .limits
        .iter()
        .map(|l| l.parse::<ProcessLimit>())
        .collect::<Result<Vec<_>, _>>()?;
    let options = BrokerOptions {
        mode: args.mode.parse::<Mode>()?,
        limits: Limits {
            total,
            step,
            max_move: size("--max-change", &args.max_change)?,
            hysteresis: given("--hysteresis", &args.hysteresis, 2 * step)?,
            min_gain: args.min_gain,
            margin: args.margin,
        },
        min,
        max,
        process_limits,
        image_min,
        image_max,
        host_ram,
        dry_run: args.dry_run,
    };
    Ok((options, interval))
}

/// Runs the broker until SIGINT/SIGTERM/SIGHUP (each process keeps the budget last set).
pub fn run(args: BrokerArgs) -> Result<(), BrokerError> {
    let host_ram = mem_total_bytes().map_err(|reason| BrokerError::Option {
        option: "host RAM".into(),
        reason,
    })?;
    let (options, interval) = options(&args, host_ram)?;
    println!(
        "broker: dividing {} ({} mode) every {:?}",
        format_bytes(options.limits.total),
        options.mode,
        interval
    );
    let server = match &args.metrics {
        Some(addr) => Some(MetricsServer::bind(addr, args.metrics_allow_remote)?),
        None => None,
    };
    let mut broker = Broker::new(options, None);
    if let Some(server) = server {
        if let Some(a) = server.local_addr() {
            println!("broker: metrics at http://{a}/metrics");
        }
        let text = broker.metrics();
        server
            .serve(move || text.lock().map(|t| t.clone()).unwrap_or_default())
            .map_err(|e| BrokerError::Option {
                option: "--metrics".into(),
                reason: format!("cannot start the server thread: {e}"),
            })?;
    }
    if args.once {
        let round = broker.decide()?;
        round.lines.iter().for_each(|l| println!("{l}"));
        return Ok(());
    }
    interrupt::install();
    broker.run(interval, interrupt::requested)?;
    println!("broker: stopped; every process keeps its budget and image cache limits");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: BrokerArgs,
    }

    fn parse(line: &str) -> Result<(BrokerOptions, Duration), String> {
        let argv = std::iter::once("broker").chain(line.split_whitespace());
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        options(&cli.args, 8 << 30).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_percentages() {
        let (o, interval) = parse("--total 50%").unwrap();
        assert_eq!(o.limits.total, 4 << 30);
        assert_eq!(o.mode, Mode::Utility);
        assert_eq!(interval, Duration::from_secs(5));
        assert_eq!((o.limits.step, o.min, o.max), (16 << 20, 64 << 20, None));
        assert_eq!((o.image_min, o.image_max), (16 << 20, None));
        let (o, _) = parse("--total 1G --image-min 4M --image-max 256M").unwrap();
        assert_eq!((o.image_min, o.image_max), (4 << 20, Some(256 << 20)));
        let (o, _) = parse("--total 2G --mode static --limit vm1=128M:1G --max 1G").unwrap();
        assert_eq!(o.mode, Mode::Static);
        assert_eq!(o.process_limits.len(), 1);
    }

    #[test]
    fn sizes_above_the_total_are_refused() {
        for (line, what) in [
            ("--total 1G --step 2G", "--step 2G"),
            ("--total 1G --step 8000000T", "--step 8000000T"),
            ("--total 1G --min 2G", "--min 2G"),
            ("--total 1G --image-min 2G", "--image-min 2G"),
        ] {
            let e = parse(line).unwrap_err();
            assert!(e.contains(what), "{line}: {e}");
        }
        // A small total's default minimum is the total.
        let (o, _) = parse("--total 2M").unwrap();
        assert_eq!(o.min, 2 << 20);
    }

    #[test]
    fn defaults_follow_the_total_and_the_step() {
        let m = 1u64 << 20;
        for (total, step) in [
            (8u64 << 30, 16 * m),
            (1 << 30, 16 * m),
            (640 * m, 8 * m),
            (320 * m, 4 * m),
            (100 * m, m),
            (16 * m, m),
        ] {
            assert_eq!(default_step(total), step, "total {total}");
        }
        let (o, _) = parse("--total 320M").unwrap();
        let l = o.limits;
        assert_eq!(
            (l.step, l.hysteresis, o.min, o.image_min),
            (4 * m, 8 * m, 16 * m, 4 * m)
        );
        // A given step moves the others; a given minimum or hysteresis stays.
        let (o, _) = parse("--total 320M --step 2M --min 48M").unwrap();
        let l = o.limits;
        assert_eq!(
            (l.step, l.hysteresis, o.min, o.image_min),
            (2 * m, 4 * m, 48 * m, 2 * m)
        );
        // Default minimums never pass a given maximum.
        let (o, _) = parse("--total 4G --max 32M --image-max 8M").unwrap();
        assert_eq!((o.min, o.image_min), (32 * m, 8 * m));
        // The smallest image cache limit is 1M whatever the step.
        let (o, _) = parse("--total 4G --step 64K").unwrap();
        assert_eq!(o.image_min, m);
    }

    #[test]
    fn bad_options_name_themselves() {
        for (line, want) in [
            ("--total 9G", "--total 9G: more than this host's RAM"),
            ("--total lots", "--total lots"),
            ("--total 1G --mode greedy", "--mode greedy"),
            (
                "--total 1G --interval 10ms",
                "--interval 10ms: at least 200ms",
            ),
            ("--total 1G --interval 5", "--interval 5"),
            ("--total 1G --step 1", "--step 1"),
            ("--total 1G --min 10%", "--min 10%: a size"),
            ("--total 1G --min 1G --max 512M", "less than --min"),
            ("--total 1G --limit vm1", "--limit vm1"),
            ("--total 1G --margin=-1", "--margin -1"),
            ("--total 1G --min-gain=NaN", "--min-gain NaN"),
            (
                "--total 1G --image-min 512K",
                "--image-min 512K: at least 1M (the smallest image cache limit)",
            ),
            ("--total 1G --image-min 5%", "--image-min 5%: a size"),
            (
                "--total 1G --image-min 64M --image-max 32M",
                "--image-max 32M: less than --image-min",
            ),
        ] {
            let e = parse(line).unwrap_err();
            assert!(e.contains(want), "{line}: {e}");
        }
    }
}
