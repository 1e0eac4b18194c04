//! The workload's `MEMVISOR-RESULT` console lines, parsed into typed results.
//!
//! Grammar: the marker `MEMVISOR-RESULT ` (anywhere in the line: kernel messages may precede
//! it), then space-separated tokens, each a bare word or `key=value`; a value is either bare
//! (no spaces, no quotes) or `"..."` with `\"` and `\\` escapes. The first token names the
//! kind: a bare word (`start`, `error`, `done`, ...) or `phase=NAME`. Trailing `\r` (serial
//! consoles) is ignored. Unknown kinds become [`WorkloadResult::Other`]; unknown fields of
//! known kinds are ignored, so the guest can add fields without breaking older parsers.

use std::fmt;

use crate::error::{Result, TestVmError};

/// What starts every result line.
pub const RESULT_MARKER: &str = "MEMVISOR-RESULT ";

/// A phase of the `mem` workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemPhaseKind {
    /// Every page written once, in order.
    Write,
    /// Every page read in order.
    Seq,
    /// Every page read in reverse order.
    Rev,
    /// As many uniformly random page reads as there are pages.
    Random,
    /// As many Zipf-distributed page reads as there are pages.
    Zipf,
    /// The final full sequential verification.
    Verify,
}

impl MemPhaseKind {
    /// The name the workload prints.
    pub fn as_str(self) -> &'static str {
        match self {
            MemPhaseKind::Write => "write",
            MemPhaseKind::Seq => "seq",
            MemPhaseKind::Rev => "rev",
            MemPhaseKind::Random => "random",
            MemPhaseKind::Zipf => "zipf",
            MemPhaseKind::Verify => "verify",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "write" => MemPhaseKind::Write,
            "seq" => MemPhaseKind::Seq,
            "rev" => MemPhaseKind::Rev,
            "random" => MemPhaseKind::Random,
            "zipf" => MemPhaseKind::Zipf,
            "verify" => MemPhaseKind::Verify,
            _ => return None,
        })
    }
}

impl fmt::Display for MemPhaseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The order in which the `disk` workload picks blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DiskPattern {
    /// Block 0, 1, 2, ... wrapping around at the end of the device.
    Seq,
    /// Uniformly random blocks.
    Random,
    /// Zipf-distributed blocks (popular blocks scattered over the device).
    Zipf,
}

impl DiskPattern {
    /// The name the workload prints.
    pub fn as_str(self) -> &'static str {
        match self {
            DiskPattern::Seq => "seq",
            DiskPattern::Random => "random",
            DiskPattern::Zipf => "zipf",
        }
    }
}

impl fmt::Display for DiskPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One phase of the `mem` workload.
#[derive(Debug, Clone, PartialEq)]
pub struct MemPhase {
    /// Which phase.
    pub kind: MemPhaseKind,
    /// The pass (1-based) for read patterns; `None` for `write` and `verify`.
    pub pass: Option<u32>,
    /// Size of the workload's memory in MiB.
    pub mib: u64,
    /// Number of 4 KiB pages.
    pub pages: u64,
    /// Pages read (or written) in this phase.
    pub reads: u64,
    /// Guest wall time of the phase in milliseconds.
    pub ms: f64,
    /// Throughput in MB/s (10^6 bytes).
    pub mbps: f64,
    /// True if every page read back correctly.
    pub ok: bool,
    /// Pages that read back wrong.
    pub errors: u64,
    /// The first page that read back wrong.
    pub first_bad_page: Option<u64>,
    /// On the `write` phase: the guest's `AnonHugePages` (KiB) after writing, i.e. how much of
    /// the memory transparent huge pages back (see `--thp`).
    pub anon_huge_kib: Option<u64>,
}

/// The result of one `disk` workload run.
#[derive(Debug, Clone, PartialEq)]
pub struct DiskPhase {
    /// Block order.
    pub pattern: DiskPattern,
    /// The guest device read, e.g. `/dev/vda`.
    pub dev: String,
    /// Bytes per read.
    pub block: u64,
    /// Blocks on the device.
    pub blocks: u64,
    /// Reads done.
    pub reads: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Guest wall time in milliseconds.
    pub ms: f64,
    /// Throughput in MB/s (10^6 bytes).
    pub mbps: f64,
    /// True if every block read was checked against the image pattern.
    pub verified: bool,
    /// True if no verified block was wrong.
    pub ok: bool,
    /// Blocks that read back wrong.
    pub errors: u64,
    /// The first block that read back wrong.
    pub first_bad_block: Option<u64>,
    /// With `--rate`: the schedule and the reads' latencies.
    pub paced: Option<DiskPacing>,
}

/// A paced `disk` run's schedule and latencies (`--rate R`: read k due at k/R seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiskPacing {
    /// Reads a second asked for.
    pub rate: f64,
    /// Median latency in microseconds, from when a read was due (or its wake-up, when the
    /// workload waited for it) to its end: the upper edge of a bucket about 4% wide.
    pub p50_us: f64,
    /// 99th percentile latency in microseconds, measured the same way.
    pub p99_us: f64,
}

/// The workload's final line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    /// True if every command succeeded and every read verified.
    pub ok: bool,
    /// Bad reads over the whole run.
    pub errors: u64,
    /// The first bad page (mem), if any.
    pub first_bad_page: Option<u64>,
    /// The first bad block (disk), if any.
    pub first_bad_block: Option<u64>,
}

/// One parsed result line.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkloadResult {
    /// The workload started: the guest's uptime then, and the command it runs.
    Start {
        /// Guest uptime in milliseconds (negative if unknown).
        uptime_ms: f64,
        /// The guest's `MemAvailable` in KiB when the workload started, if reported.
        mem_available_kib: Option<u64>,
        /// The `memvisor.run` value, when one was found.
        command: Option<String>,
    },
    /// A `mem` phase.
    Mem(MemPhase),
    /// A `disk` run.
    Disk(DiskPhase),
    /// An error reported by the workload or the guest's init.
    Error {
        /// The message.
        message: String,
    },
    /// The final line.
    Done(Done),
    /// A kind this parser does not know, kept as raw fields.
    Other {
        /// The first token (a bare word, or `phase=NAME` for unknown phases).
        kind: String,
        /// The `key=value` fields.
        fields: Vec<(String, String)>,
    },
}

/// Parses one console line. Returns `None` if the line carries no result marker.
///
/// `line_no` is only used in error messages (1-based; 0 if unknown).
pub fn parse_result_line(line: &str, line_no: usize) -> Option<Result<WorkloadResult>> {
    let at = line.find(RESULT_MARKER)?;
    let body = line[at + RESULT_MARKER.len()..].trim_end_matches(['\r', '\n']);
    Some(parse_body(body).map_err(|reason| TestVmError::ResultLine {
        line: line_no,
        text: line.trim_end_matches(['\r', '\n']).to_string(),
        reason,
    }))
}

/// Parses every result line of a console transcript, in order.
pub fn parse_console(text: &str) -> Result<Vec<WorkloadResult>> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| parse_result_line(line, i + 1))
        .collect()
}

enum Token {
    Word(String),
    Pair(String, String),
}

fn tokenize(body: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut chars = body.chars().peekable();
    loop {
        while chars.next_if(|c| *c == ' ' || *c == '\t').is_some() {}
        if chars.peek().is_none() {
            return Ok(tokens);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| !matches!(c, ' ' | '\t' | '=')) {
            if c == '"' {
                return Err(format!("unexpected quote in key {key:?}"));
            }
            key.push(c);
        }
        if chars.next_if_eq(&'=').is_none() {
            tokens.push(Token::Word(key));
            continue;
        }
        if key.is_empty() {
            return Err("empty key before '='".to_string());
        }
        let mut value = String::new();
        if chars.next_if_eq(&'"').is_some() {
            loop {
                match chars.next() {
                    None => return Err(format!("unterminated quoted value of {key}")),
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some(c @ ('"' | '\\')) => value.push(c),
                        Some(c) => return Err(format!("bad escape \\{c} in value of {key}")),
                        None => return Err(format!("unterminated quoted value of {key}")),
                    },
                    Some(c) => value.push(c),
                }
            }
            if chars.peek().is_some_and(|c| *c != ' ' && *c != '\t') {
                return Err(format!("text after the closing quote of {key}"));
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ' ' && *c != '\t') {
                if c == '"' {
                    return Err(format!("unexpected quote in value of {key}"));
                }
                value.push(c);
            }
        }
        tokens.push(Token::Pair(key, value));
    }
}

/// The `key=value` fields of a line, with typed getters that name the field on failure.
struct Fields(Vec<(String, String)>);

impl Fields {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn str(&self, key: &str) -> Result<String, String> {
        self.get(key)
            .map(str::to_string)
            .ok_or_else(|| format!("missing field {key}"))
    }

    fn opt_u64(&self, key: &str) -> Result<Option<u64>, String> {
        self.get(key)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("field {key}={v} is not an unsigned integer"))
            })
            .transpose()
    }

    /// An optional count the guest prints as -1 when it could not read it.
    fn opt_count(&self, key: &str) -> Result<Option<u64>, String> {
        match self.get(key) {
            Some("-1") => Ok(None),
            _ => self.opt_u64(key),
        }
    }

    fn u64(&self, key: &str) -> Result<u64, String> {
        self.opt_u64(key)?
            .ok_or_else(|| format!("missing field {key}"))
    }

    fn f64(&self, key: &str) -> Result<f64, String> {
        let v = self
            .get(key)
            .ok_or_else(|| format!("missing field {key}"))?;
        match v.parse::<f64>() {
            Ok(x) if x.is_finite() => Ok(x),
            _ => Err(format!("field {key}={v} is not a finite number")),
        }
    }

    fn bool(&self, key: &str) -> Result<bool, String> {
        match self.get(key) {
            Some("1") => Ok(true),
            Some("0") => Ok(false),
            Some(v) => Err(format!("field {key}={v} is not 0 or 1")),
            None => Err(format!("missing field {key}")),
        }
    }
}

fn parse_body(body: &str) -> Result<WorkloadResult, String> {
    let mut tokens = tokenize(body)?.into_iter();
    let first = tokens.next().ok_or("no tokens after the marker")?;
    let mut pairs = Vec::new();
    for token in tokens {
        match token {
            Token::Pair(k, v) => pairs.push((k, v)),
            Token::Word(w) => return Err(format!("bare word {w:?} where key=value was expected")),
        }
    }
    let fields = Fields(pairs);
    match first {
        Token::Word(kind) => match kind.as_str() {
            "start" => Ok(WorkloadResult::Start {
                uptime_ms: fields.f64("uptime_ms")?,
                mem_available_kib: fields.opt_count("mem_available_kib")?,
                command: fields.get("command").map(str::to_string),
            }),
            "error" => Ok(WorkloadResult::Error {
                message: fields.str("message")?,
            }),
            "done" => Ok(WorkloadResult::Done(Done {
                ok: fields.bool("ok")?,
                errors: fields.u64("errors")?,
                first_bad_page: fields.opt_u64("first_bad_page")?,
                first_bad_block: fields.opt_u64("first_bad_block")?,
            })),
            _ => Ok(WorkloadResult::Other {
                kind,
                fields: fields.0,
            }),
        },
        Token::Pair(key, phase) if key == "phase" => {
            if let Some(kind) = MemPhaseKind::from_name(&phase) {
                let pass = fields
                    .opt_u64("pass")?
                    .map(|p| u32::try_from(p).map_err(|_| format!("field pass={p} is too large")))
                    .transpose()?;
                Ok(WorkloadResult::Mem(MemPhase {
                    kind,
                    pass,
                    mib: fields.u64("mib")?,
                    pages: fields.u64("pages")?,
                    reads: fields.u64("reads")?,
                    ms: fields.f64("ms")?,
                    mbps: fields.f64("mbps")?,
                    ok: fields.bool("ok")?,
                    errors: fields.u64("errors")?,
                    first_bad_page: fields.opt_u64("first_bad_page")?,
                    anon_huge_kib: fields.opt_count("anon_huge_kib")?,
                }))
            } else if phase == "disk" {
                let pattern = match fields.get("pattern") {
                    Some("seq") => DiskPattern::Seq,
                    Some("random") => DiskPattern::Random,
                    Some("zipf") => DiskPattern::Zipf,
                    Some(p) => return Err(format!("unknown disk pattern {p:?}")),
                    None => return Err("missing field pattern".to_string()),
                };
                Ok(WorkloadResult::Disk(DiskPhase {
                    pattern,
                    dev: fields.str("dev")?,
                    block: fields.u64("block")?,
                    blocks: fields.u64("blocks")?,
                    reads: fields.u64("reads")?,
                    bytes: fields.u64("bytes")?,
                    ms: fields.f64("ms")?,
                    mbps: fields.f64("mbps")?,
                    verified: fields.bool("verified")?,
                    ok: fields.bool("ok")?,
                    errors: fields.u64("errors")?,
                    first_bad_block: fields.opt_u64("first_bad_block")?,
                    paced: match fields.get("rate") {
                        None => None,
                        Some(_) => Some(DiskPacing {
                            rate: fields.f64("rate")?,
                            p50_us: fields.f64("p50_us")?,
                            p99_us: fields.f64("p99_us")?,
                        }),
                    },
                }))
            } else {
                Ok(WorkloadResult::Other {
                    kind: format!("phase={phase}"),
                    fields: fields.0,
                })
            }
        }
        Token::Pair(key, _) => Err(format!(
            "first token must be a kind word or phase=NAME, got key {key:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> WorkloadResult {
        parse_result_line(line, 1)
            .expect("marker present")
            .expect("valid line")
    }

    fn reason(line: &str) -> String {
        match parse_result_line(line, 7) {
            Some(Err(TestVmError::ResultLine { line, reason, .. })) => {
                assert_eq!(line, 7);
                reason
            }
            other => panic!("expected a parse error for {line:?}, got {other:?}"),
        }
    }

    #[test]
    fn lines_without_marker_are_not_results() {
        assert!(parse_result_line("[    1.7] reboot: Power down", 1).is_none());
        assert!(parse_result_line("MEMVISOR-INIT workload exited with status 0", 1).is_none());
        assert!(parse_result_line("MEMVISOR-RESULT", 1).is_none());
    }

    #[test]
    fn mem_phase_with_carriage_return() {
        let r = parse(
            "MEMVISOR-RESULT phase=seq pass=2 mib=256 pages=65536 reads=65536 ms=74.5 mbps=3601.7 ok=1 errors=0\r",
        );
        assert_eq!(
            r,
            WorkloadResult::Mem(MemPhase {
                kind: MemPhaseKind::Seq,
                pass: Some(2),
                mib: 256,
                pages: 65536,
                reads: 65536,
                ms: 74.5,
                mbps: 3601.7,
                ok: true,
                errors: 0,
                first_bad_page: None,
                anon_huge_kib: None,
            })
        );
        let WorkloadResult::Mem(write) = parse(
            "MEMVISOR-RESULT phase=write mib=8 pages=2048 reads=2048 ms=1 mbps=2 ok=1 errors=0 anon_huge_kib=4096",
        ) else {
            panic!("not a mem phase")
        };
        assert_eq!(write.anon_huge_kib, Some(4096));
        let WorkloadResult::Mem(unknown) = parse(
            "MEMVISOR-RESULT phase=write mib=8 pages=2048 reads=2048 ms=1 mbps=2 ok=1 errors=0 anon_huge_kib=-1",
        ) else {
            panic!("not a mem phase")
        };
        assert_eq!(unknown.anon_huge_kib, None);
    }

    #[test]
    fn mem_phase_with_corruption() {
        let WorkloadResult::Mem(p) = parse(
            "MEMVISOR-RESULT phase=verify mib=8 pages=2048 reads=2048 ms=1 mbps=2 ok=0 errors=3 first_bad_page=17",
        ) else {
            panic!("not a mem phase")
        };
        assert_eq!(
            (p.kind, p.pass, p.ok, p.errors),
            (MemPhaseKind::Verify, None, false, 3)
        );
        assert_eq!(p.first_bad_page, Some(17));
    }

    #[test]
    fn disk_phase() {
        let WorkloadResult::Disk(d) = parse(
            "MEMVISOR-RESULT phase=disk pattern=zipf dev=/dev/vda block=4096 blocks=32768 reads=20000 bytes=81920000 ms=939.1 mbps=87.2 verified=1 ok=1 errors=0",
        ) else {
            panic!("not a disk phase")
        };
        assert_eq!(d.pattern, DiskPattern::Zipf);
        assert_eq!(d.dev, "/dev/vda");
        assert_eq!(
            (d.block, d.blocks, d.reads, d.bytes),
            (4096, 32768, 20000, 81920000)
        );
        assert!(d.verified && d.ok);
        assert_eq!(d.first_bad_block, None);
        assert_eq!(d.paced, None);
    }

    #[test]
    fn paced_disk_phase() {
        let line = "MEMVISOR-RESULT phase=disk pattern=zipf dev=/dev/vda block=4096 blocks=16384 reads=4000 bytes=16384000 ms=1999.6 mbps=8.2 verified=1 rate=2000.0 p50_us=2 p99_us=10 ok=1 errors=0";
        let WorkloadResult::Disk(d) = parse(line) else {
            panic!("not a disk phase")
        };
        assert_eq!(
            d.paced,
            Some(DiskPacing {
                rate: 2000.0,
                p50_us: 2.0,
                p99_us: 10.0
            })
        );
        // A rate without its latencies is a broken line, not an unpaced one.
        let broken = line.replace(" p99_us=10", "");
        let e = parse_result_line(&broken, 0).unwrap().unwrap_err();
        assert!(e.to_string().contains("p99_us"), "{e}");
    }

    #[test]
    fn start_error_done() {
        assert_eq!(
            parse(
                r#"MEMVISOR-RESULT start uptime_ms=1740 mem_available_kib=440000 command="mem 8 --patterns \"x\\y\"""#
            ),
            WorkloadResult::Start {
                uptime_ms: 1740.0,
                mem_available_kib: Some(440000),
                command: Some(r#"mem 8 --patterns "x\y""#.to_string()),
            }
        );
        assert_eq!(
            parse(r#"MEMVISOR-RESULT error message="unknown workload command 'x'""#),
            WorkloadResult::Error {
                message: "unknown workload command 'x'".to_string()
            }
        );
        assert_eq!(
            parse("MEMVISOR-RESULT done ok=0 errors=2 first_bad_block=777"),
            WorkloadResult::Done(Done {
                ok: false,
                errors: 2,
                first_bad_page: None,
                first_bad_block: Some(777),
            })
        );
    }

    #[test]
    fn marker_after_kernel_noise_and_extra_fields() {
        assert_eq!(
            parse("[  2.0] xyz MEMVISOR-RESULT done ok=1 errors=0 future=42"),
            WorkloadResult::Done(Done {
                ok: true,
                errors: 0,
                first_bad_page: None,
                first_bad_block: None,
            })
        );
    }

    #[test]
    fn unknown_kinds_are_kept() {
        assert_eq!(
            parse("MEMVISOR-RESULT image path=/tmp/x mib=4"),
            WorkloadResult::Other {
                kind: "image".to_string(),
                fields: vec![
                    ("path".to_string(), "/tmp/x".to_string()),
                    ("mib".to_string(), "4".to_string())
                ],
            }
        );
        assert!(matches!(
            parse("MEMVISOR-RESULT phase=later ms=1"),
            WorkloadResult::Other { kind, .. } if kind == "phase=later"
        ));
    }

    #[test]
    fn malformed_lines_name_the_problem() {
        assert_eq!(reason("MEMVISOR-RESULT done ok=1"), "missing field errors");
        assert_eq!(
            reason("MEMVISOR-RESULT done ok=yes errors=0"),
            "field ok=yes is not 0 or 1"
        );
        assert_eq!(
            reason("MEMVISOR-RESULT done ok=1 errors=-1"),
            "field errors=-1 is not an unsigned integer"
        );
        assert_eq!(
            reason(r#"MEMVISOR-RESULT error message="open"#),
            "unterminated quoted value of message"
        );
        assert_eq!(
            reason(r#"MEMVISOR-RESULT error message="a"b"#),
            "text after the closing quote of message"
        );
        assert_eq!(
            reason(r#"MEMVISOR-RESULT error message="\n""#),
            "bad escape \\n in value of message"
        );
        assert_eq!(reason("MEMVISOR-RESULT  "), "no tokens after the marker");
        assert_eq!(reason("MEMVISOR-RESULT =1"), "empty key before '='");
        assert_eq!(
            reason("MEMVISOR-RESULT done ok=1 stray errors=0"),
            "bare word \"stray\" where key=value was expected"
        );
        assert_eq!(
            reason("MEMVISOR-RESULT ok=1"),
            "first token must be a kind word or phase=NAME, got key \"ok\""
        );
        assert_eq!(
            reason("MEMVISOR-RESULT phase=seq mib=1 pages=1 reads=1 ms=nan mbps=1 ok=1 errors=0"),
            "field ms=nan is not a finite number"
        );
        assert_eq!(
            reason("MEMVISOR-RESULT phase=disk pattern=rev"),
            "unknown disk pattern \"rev\""
        );
    }

    #[test]
    fn console_transcript_keeps_order_and_line_numbers() {
        let console = "boot noise\r\nMEMVISOR-RESULT start uptime_ms=5\r\n\
                       MEMVISOR-RESULT done ok=1 errors=0\r\n[ 1.0] reboot: Power down\r\n";
        let results = parse_console(console).unwrap();
        assert_eq!(results.len(), 2);
        assert!(matches!(results[0], WorkloadResult::Start { .. }));
        assert!(matches!(
            results[1],
            WorkloadResult::Done(Done { ok: true, .. })
        ));
        let err = parse_console("x\nMEMVISOR-RESULT done\n").unwrap_err();
        assert!(
            matches!(err, TestVmError::ResultLine { line: 2, .. }),
            "{err}"
        );
    }
}
