//! [`TraceFormat`]: which reader parses a trace file, and how; spelled as a spec.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use crate::spec_params::{split_spec, SpecParams};
use crate::trace_error::TraceError;

const WHAT: &str = "trace format";

/// A trace format and its options, spelled as a spec:
///
/// | spec | format |
/// |---|---|
/// | `lackey[:instructions=true\|false][:page-size=4096]` | valgrind lackey output |
/// | `text` | one decimal or `0x`-hex id per line; blank lines and `#` comments skipped |
/// | `csv:column=N[:time-column=M][:header=true\|false][:delimiter=,]` | CSV, columns 1-based |
/// | `oracle-general` | libCacheSim oracleGeneral binary records |
///
/// Names are case-insensitive, `_` reads as `-`; `oracleGeneral` and `txt` are accepted too.
/// `Display` prints the canonical spec with every option, which parses back to an equal value.
///
/// Any format may be zstd-compressed: readers recognize the zstd magic bytes (`28 B5 2F FD`),
/// whatever the file is called.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    /// Valgrind lackey output (`valgrind --tool=lackey --trace-mem=yes PROG`); requests are
    /// pages.
    ///
    /// Lines look like `I  04222cac,3` (instruction fetch), ` L 04222cac,8` (load),
    /// ` S 7ff000398,8` (store) and ` M 0421d2c8,4` (modify). The address is hexadecimal (an
    /// optional `0x` is accepted), the size decimal bytes (at most 1 MiB). Lines starting with
    /// `==` (valgrind's own messages) and blank lines are skipped; anything else is an error.
    /// Each access becomes one request per page it touches (page = address / page size), in
    /// address order; `M` is one access. Request times are request indices.
    Lackey {
        /// Whether instruction fetches (`I` lines) are requests (default true).
        instructions: bool,
        /// Bytes per page, at least 1 (default 4096).
        page_size: u64,
    },
    /// One unit id per line, decimal (`123`) or `0x`-hexadecimal (`0x7b`); blank lines are
    /// skipped, and `#` starts a comment running to the end of the line. Request times are
    /// request indices.
    Text,
    /// Comma (or otherwise) separated values.
    ///
    /// Fields are trimmed of surrounding blanks. A field may be quoted (`"a,b"`); the id is
    /// then the text between the quotes, taken as is (a doubled `""` stays doubled); quoted
    /// fields cannot span lines. Ids that look numeric (all decimal digits, or a `0x` prefix)
    /// must be valid `u64`s; any other text is hashed with [`crate::hash_unit_id`]. Times are
    /// decimal `u64`; without a time column, request times are request indices. Blank lines
    /// are skipped; with `header`, so is the first non-blank line. In a spec the delimiter is
    /// one printable ASCII character other than `"`, or a name: `comma`, `tab`, `space`,
    /// `semicolon`, `pipe`, `colon` (a literal `:` would end the parameter).
    Csv {
        /// The id column, 1-based.
        column: usize,
        /// The timestamp column, 1-based, if any.
        time_column: Option<usize>,
        /// Whether the first non-blank line is a header to skip (default false).
        header: bool,
        /// The field delimiter, an ASCII byte (default `,`).
        delimiter: u8,
    },
    /// libCacheSim's oracleGeneral binary trace: 24-byte little-endian records of `u32` time,
    /// `u64` object id, `u32` object size (ignored: memvisor's units have one size) and `i64`
    /// next access.
    ///
    /// The next-access field is a virtual time: libCacheSim's converter (`traceConv`) stores
    /// the 1-based number of the next request for the same object, i.e. request index `j`
    /// (0-based) as `j + 1`; `-1` (and `i64::MAX`, which libCacheSim also reads as "never")
    /// mean no further access. The reader converts it to a 0-based request index in
    /// [`Request::next_access`](crate::Request::next_access), and rejects values that do not
    /// point after the current request. Request times are the time field. Unlike libCacheSim,
    /// size-0 records are not skipped, as that would shift the numbering next accesses refer
    /// to.
    OracleGeneral,
}

impl TraceFormat {
    /// Every format name the parser accepts.
    pub const NAMES: &'static [&'static str] = &["lackey", "text", "csv", "oracle-general"];

    /// Lackey with default options.
    pub const LACKEY: TraceFormat = TraceFormat::Lackey {
        instructions: true,
        page_size: 4096,
    };

    /// The format's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Lackey { .. } => "lackey",
            Self::Text => "text",
            Self::Csv { .. } => "csv",
            Self::OracleGeneral => "oracle-general",
        }
    }

    /// The format a file name suggests, by extension (case-insensitive, after an optional
    /// `.zst`): `.oracleGeneral` or `.oracleGeneral.bin` → oracle-general, `.lackey` →
    /// lackey (defaults), `.csv` → `csv:column=1`, `.txt` → text.
    pub fn detect(path: &Path) -> Option<TraceFormat> {
        let name = path.file_name()?.to_string_lossy().to_ascii_lowercase();
        let name = name.strip_suffix(".zst").unwrap_or(&name);
        if name.ends_with(".oraclegeneral") || name.ends_with(".oraclegeneral.bin") {
            Some(Self::OracleGeneral)
        } else if name.ends_with(".lackey") {
            Some(Self::LACKEY)
        } else if name.ends_with(".csv") {
            Some(Self::Csv {
                column: 1,
                time_column: None,
                header: false,
                delimiter: b',',
            })
        } else if name.ends_with(".txt") {
            Some(Self::Text)
        } else {
            None
        }
    }
}

/// Delimiters that have a name, since some cannot be written literally in a spec.
const DELIMITER_NAMES: &[(&str, u8)] = &[
    ("comma", b','),
    ("tab", b'\t'),
    ("space", b' '),
    ("semicolon", b';'),
    ("pipe", b'|'),
    ("colon", b':'),
];

fn parse_delimiter(s: &str) -> Result<u8, String> {
    if let Some(&(_, b)) = DELIMITER_NAMES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(s))
    {
        return Ok(b);
    }
    if s == "\\t" {
        return Ok(b'\t');
    }
    match s.as_bytes() {
        [b] if b.is_ascii_graphic() && *b != b'"' => Ok(*b),
        _ => Err(
            "expected one printable ASCII character other than '\"', or one of comma, tab, \
             space, semicolon, pipe, colon"
                .into(),
        ),
    }
}

impl fmt::Display for TraceFormat {
    /// The canonical spec, with every option spelled out; it parses back to an equal format.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match self {
            Self::Lackey {
                instructions,
                page_size,
            } => write!(f, ":instructions={instructions}:page-size={page_size}"),
            Self::Text | Self::OracleGeneral => Ok(()),
            Self::Csv {
                column,
                time_column,
                header,
                delimiter,
            } => {
                write!(f, ":column={column}")?;
                if let Some(t) = time_column {
                    write!(f, ":time-column={t}")?;
                }
                write!(f, ":header={header}:delimiter=")?;
                match delimiter {
                    b'\t' => f.write_str("tab"),
                    b' ' => f.write_str("space"),
                    b':' => f.write_str("colon"),
                    b => write!(f, "{}", char::from(*b)),
                }
            }
        }
    }
}

impl FromStr for TraceFormat {
    type Err = TraceError;

    fn from_str(s: &str) -> Result<Self, TraceError> {
        let (name, rest) = split_spec(s);
        let name = match name.as_str() {
            "oraclegeneral" | "oracle" => "oracle-general".to_string(),
            "txt" => "text".to_string(),
            _ => name,
        };
        let Some(&canonical) = Self::NAMES.iter().find(|n| **n == name) else {
            return Err(TraceError::UnknownName {
                what: WHAT,
                name,
                known: Self::NAMES.join(", "),
            });
        };
        let mut p = SpecParams::parse(WHAT, canonical, rest)?;
        let format = match canonical {
            "lackey" => {
                let instructions = p.take("instructions", true)?;
                let page_size: u64 = p.take("page-size", 4096)?;
                p.check(page_size >= 1, "page-size", page_size, "must be at least 1")?;
                Self::Lackey {
                    instructions,
                    page_size,
                }
            }
            "text" => Self::Text,
            "csv" => {
                let column: usize = p.require("column")?;
                p.check(column >= 1, "column", column, "columns are 1-based")?;
                let time_column: Option<usize> = p.take_opt("time-column")?;
                if let Some(t) = time_column {
                    p.check(t >= 1, "time-column", t, "columns are 1-based")?;
                }
                let header = p.take("header", false)?;
                let delimiter = match p.take_str("delimiter") {
                    None => b',',
                    Some(d) => parse_delimiter(d).map_err(|why| p.error("delimiter", d, &why))?,
                };
                Self::Csv {
                    column,
                    time_column,
                    header,
                    delimiter,
                }
            }
            "oracle-general" => Self::OracleGeneral,
            _ => unreachable!("every name in NAMES has a parser"),
        };
        p.finish()?;
        Ok(format)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> TraceFormat {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn parses_and_round_trips() {
        assert_eq!(parse("lackey"), TraceFormat::LACKEY);
        assert_eq!(
            parse("lackey:instructions=false:page-size=65536"),
            TraceFormat::Lackey {
                instructions: false,
                page_size: 65536
            }
        );
        assert_eq!(parse("oracleGeneral"), TraceFormat::OracleGeneral);
        assert_eq!(parse("oracle_general"), TraceFormat::OracleGeneral);
        assert_eq!(parse("txt"), TraceFormat::Text);
        assert_eq!(
            parse("csv:column=2:time-column=1:header=true:delimiter=tab"),
            TraceFormat::Csv {
                column: 2,
                time_column: Some(1),
                header: true,
                delimiter: b'\t'
            }
        );
        for s in [
            "lackey",
            "lackey:instructions=false",
            "text",
            "oracle-general",
            "csv:column=3",
            "csv:column=1:delimiter=;",
            "csv:column=1:delimiter=colon",
            "csv:column=1:delimiter=space:header=true",
            "csv:column=1:delimiter=\\t:time-column=9",
        ] {
            let f = parse(s);
            assert_eq!(parse(&f.to_string()), f, "{s} -> {f}");
        }
        assert_eq!(
            parse("csv:column=2").to_string(),
            "csv:column=2:header=false:delimiter=,"
        );
        assert_eq!(
            TraceFormat::LACKEY.to_string(),
            "lackey:instructions=true:page-size=4096"
        );
    }

    #[test]
    fn bad_specs_are_errors() {
        for (s, needle) in [
            ("bogus", "unknown trace format \"bogus\""),
            ("csv", "\"column\": required parameter is missing"),
            ("csv:column=0", "columns are 1-based"),
            ("csv:column=1:time-column=0", "columns are 1-based"),
            ("csv:column=x", "\"column=x\""),
            ("csv:column=1:delimiter=ab", "\"delimiter=ab\""),
            ("csv:column=1:delimiter=\"", "\"delimiter=\\\"\""),
            ("lackey:page-size=0", "\"page-size=0\""),
            ("lackey:instructions=yes", "\"instructions=yes\""),
            ("text:x=1", "unknown parameter"),
        ] {
            let e = s.parse::<TraceFormat>().unwrap_err().to_string();
            assert!(e.contains(needle), "{s}: {e}");
        }
    }

    #[test]
    fn detects_by_extension() {
        let d = |s: &str| TraceFormat::detect(Path::new(s));
        assert_eq!(
            d("/x/1351.oracleGeneral.zst"),
            Some(TraceFormat::OracleGeneral)
        );
        assert_eq!(d("a.oracleGeneral.bin"), Some(TraceFormat::OracleGeneral));
        assert_eq!(d("a.ORACLEGENERAL"), Some(TraceFormat::OracleGeneral));
        assert_eq!(
            d("a.oracleGeneral.bin.zst"),
            Some(TraceFormat::OracleGeneral)
        );
        assert_eq!(d("run.lackey"), Some(TraceFormat::LACKEY));
        assert_eq!(d("ids.txt"), Some(TraceFormat::Text));
        assert_eq!(d("ids.txt.zst"), Some(TraceFormat::Text));
        assert!(matches!(
            d("t.csv"),
            Some(TraceFormat::Csv { column: 1, .. })
        ));
        assert_eq!(d("a.bin"), None);
        assert_eq!(d("noext"), None);
        assert_eq!(d("/"), None);
    }
}
