//! The messages of the migration stream and their payload encoding.

use std::fmt;

use crate::frame_header::MAX_PAYLOAD;
use crate::message_kind::MessageKind;
use crate::migration_error::MigrationError;
use crate::payload_reader::PayloadReader;
use crate::region_info::{RegionInfo, MAX_REGIONS, MAX_REGION_NAME_LEN, MIN_PAGE_SIZE};

/// The largest page size a `Pages` message may carry (2 MiB huge pages).
pub const MAX_PAGES_PAGE_SIZE: u32 = 2 * 1024 * 1024;
/// The longest `Abort` reason, in bytes of UTF-8.
pub const MAX_ABORT_REASON_LEN: usize = 1024;
/// Bytes of a `Pages` payload before its runs: region, page size, run count, page count.
pub(crate) const PAGES_FIELDS_LEN: usize = 4 + 4 + 4 + 4;
/// Bytes of one run in a `Pages` or `Remote` payload: first page (u64), page count (u32).
const RUN_LEN: usize = 8 + 4;
/// Most runs in one `Remote` message.
pub const MAX_REMOTE_RUNS: usize = 65_536;
/// Most pages in one `Want` message.
pub const MAX_WANT_PAGES: usize = 4096;

/// One message of the migration stream. Payloads are little-endian with explicit lengths; see
/// the crate documentation for the layouts.
#[derive(Clone, PartialEq, Eq)]
pub enum Message {
    /// Source → destination, first message: the guest memory regions, at most
    /// [`MAX_REGIONS`].
    Begin {
        /// A random number naming this migration: a post-copy source reconnecting after a
        /// broken connection resumes it by this number ([`Message::Resume`]).
        migration: u64,
        /// The regions, in order; messages name them by index.
        regions: Vec<RegionInfo>,
    },
    /// Destination → source: the regions match; go on (after `Begin`), or the pages still
    /// remote here follow no more (after `Resume`).
    Ready,
    /// Pages of a region, in runs of consecutive pages, with the CRC32C of each page. Build
    /// one with [`Message::pages`] (one run) or [`Message::page_runs`].
    Pages {
        /// The region's index in `Begin`.
        region: u32,
        /// The page size: a power of two from 4096 to [`MAX_PAGES_PAGE_SIZE`].
        page_size: u32,
        /// The runs `(first page, page count)`: at least one, each of at least one page, in
        /// ascending order, none overlapping another. A round of scattered changes sends many
        /// short runs in one message rather than a message each (one MAC, one hand-over).
        runs: Vec<(u64, u32)>,
        /// The CRC32C (Castagnoli) of each page, the runs' pages in order.
        crcs: Vec<u32>,
        /// The pages' bytes, the runs' pages in order: `crcs.len() * page_size` of them.
        data: Vec<u8>,
    },
    /// These pages are zero now (never touched, or discarded since sent).
    Zero {
        /// The region's index in `Begin`.
        region: u32,
        /// The first page's number within the region.
        first_page: u64,
        /// How many consecutive pages; at least one.
        pages: u64,
    },
    /// The end of a pass over memory.
    RoundEnd {
        /// The pass's number, from 0.
        round: u32,
        /// Pages sent in it (`Pages` and `Zero`).
        pages: u64,
    },
    /// Source: nothing more will be sent; the destination answers `Done`.
    Finish,
    /// Destination: everything received is in place.
    Done {
        /// Pages received in all (`Pages` and `Zero`).
        pages: u64,
        /// Page bytes received in all (`Pages` data).
        bytes: u64,
    },
    /// Either side gives up, then closes.
    Abort {
        /// Why, at most [`MAX_ABORT_REASON_LEN`] bytes of UTF-8.
        reason: String,
    },
    /// Source → destination, post-copy, while the guest is paused: these pages changed since
    /// they were sent and their content follows after the switch-over; until it comes, the
    /// destination's accesses to them wait. Destination → source after `Resume`: these pages
    /// are still remote here.
    Remote {
        /// The region's index in `Begin`.
        region: u32,
        /// The runs `(first page, page count)`: as in `Pages` (at least one, each of at
        /// least one page, ascending, not overlapping), at most [`MAX_REMOTE_RUNS`].
        runs: Vec<(u64, u32)>,
    },
    /// Destination → source, post-copy: accesses wait for these remote pages; send them
    /// first.
    Want {
        /// The region's index in `Begin`.
        region: u32,
        /// Page numbers, at least one and at most [`MAX_WANT_PAGES`], in any order.
        pages: Vec<u64>,
    },
    /// Source → destination, first message of a connection that resumes a post-copy push
    /// after the last one broke; the destination answers with its remote pages (`Remote`)
    /// and `Ready`, or `Abort` if it waits for no such migration.
    Resume {
        /// The number the migration's `Begin` gave.
        migration: u64,
    },
}

impl Message {
    /// A `Pages` message for `data`, computing the CRC32C of each `page_size` bytes. `data`
    /// should hold whole pages; if it does not (or breaks another rule), [`Message::validate`]
    /// and so [`crate::MemoryStream::send`] refuse the message.
    pub fn pages(region: u32, first_page: u64, page_size: u32, data: Vec<u8>) -> Message {
        let pages = data.len() / (page_size as usize).max(1);
        let count = u32::try_from(pages).unwrap_or(u32::MAX);
        Message::page_runs(region, page_size, vec![(first_page, count)], data)
    }

    /// `Remote` messages naming region `region`'s `runs` `(first page, count)`, at most
    /// [`MAX_REMOTE_RUNS`] runs each (none for no runs).
    pub fn remote(region: u32, runs: &[(usize, usize)]) -> Vec<Message> {
        runs.chunks(MAX_REMOTE_RUNS)
            .map(|piece| Message::Remote {
                region,
                runs: piece.iter().map(|&(f, n)| (f as u64, n as u32)).collect(),
            })
            .collect()
    }

    /// A `Pages` message of several runs `(first page, count)` whose pages' bytes, in run
    /// order, are `data`, computing the CRC32C of each page. A message breaking the rules is
    /// refused by [`Message::validate`], as for [`Message::pages`].
    pub fn page_runs(region: u32, page_size: u32, runs: Vec<(u64, u32)>, data: Vec<u8>) -> Message {
        let chunk = (page_size as usize).max(1);
        let crcs = data.chunks(chunk).map(crc32c::crc32c).collect();
        Message::Pages {
            region,
            page_size,
            runs,
            crcs,
            data,
        }
    }

    /// The message's type.
    pub fn kind(&self) -> MessageKind {
        match self {
            Message::Begin { .. } => MessageKind::Begin,
            Message::Ready => MessageKind::Ready,
            Message::Pages { .. } => MessageKind::Pages,
            Message::Zero { .. } => MessageKind::Zero,
            Message::RoundEnd { .. } => MessageKind::RoundEnd,
            Message::Finish => MessageKind::Finish,
            Message::Done { .. } => MessageKind::Done,
            Message::Abort { .. } => MessageKind::Abort,
            Message::Remote { .. } => MessageKind::Remote,
            Message::Want { .. } => MessageKind::Want,
            Message::Resume { .. } => MessageKind::Resume,
        }
    }

    /// The message type's name, for error messages ("Pages").
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// Checks the message rules that decoding enforces (lengths, counts, page sizes, no
    /// overflowing page ranges), except the `Pages` checksums, which [`Message::pages`]
    /// computes. [`crate::MemoryStream::send`] calls this before sending.
    pub fn validate(&self) -> Result<(), MigrationError> {
        match self.problem() {
            None => Ok(()),
            Some(problem) => Err(MigrationError::InvalidMessage {
                message: self.name(),
                problem,
            }),
        }
    }

    /// Which message rule this breaks, if any.
    fn problem(&self) -> Option<String> {
        match self {
            Message::Begin { regions, .. } => {
                if regions.len() > MAX_REGIONS {
                    return Some(format!(
                        "{} regions, over the limit of {MAX_REGIONS}",
                        regions.len()
                    ));
                }
                regions
                    .iter()
                    .enumerate()
                    .find_map(|(index, region)| region.problem(index))
            }
            Message::Pages {
                page_size,
                runs,
                crcs,
                data,
                ..
            } => pages_problem(*page_size, runs, crcs.len(), data.len()),
            Message::Zero {
                first_page, pages, ..
            } => {
                if *pages == 0 {
                    Some("covers no pages".into())
                } else if first_page.checked_add(*pages).is_none() {
                    Some(format!(
                        "pages {first_page} + {pages} run past the largest page number"
                    ))
                } else {
                    None
                }
            }
            Message::Abort { reason } if reason.len() > MAX_ABORT_REASON_LEN => Some(format!(
                "reason is {} bytes long, over the {MAX_ABORT_REASON_LEN}-byte limit",
                reason.len()
            )),
            Message::Remote { runs, .. } => {
                if runs.len() > MAX_REMOTE_RUNS {
                    Some(format!(
                        "{} runs, over the limit of {MAX_REMOTE_RUNS}",
                        runs.len()
                    ))
                } else {
                    runs_problem(runs, 1).err()
                }
            }
            Message::Want { pages, .. } => {
                if pages.is_empty() {
                    Some("names no pages".into())
                } else if pages.len() > MAX_WANT_PAGES {
                    Some(format!(
                        "{} pages, over the limit of {MAX_WANT_PAGES}",
                        pages.len()
                    ))
                } else {
                    None
                }
            }
            _ => None,
        }
    }
}

/// Which `Pages` rule `runs` of `page_size`-byte pages, with `count` checksums and `data_len`
/// bytes of data, break, if any.
fn pages_problem(
    page_size: u32,
    runs: &[(u64, u32)],
    count: usize,
    data_len: usize,
) -> Option<String> {
    if !page_size.is_power_of_two() || !(MIN_PAGE_SIZE..=MAX_PAGES_PAGE_SIZE).contains(&page_size) {
        return Some(format!(
            "page size {page_size} is not a power of two from {MIN_PAGE_SIZE} to \
             {MAX_PAGES_PAGE_SIZE}"
        ));
    }
    let pages_in_runs = match runs_problem(runs, page_size) {
        Ok(pages) => pages,
        Err(problem) => return Some(problem),
    };
    let count = count as u64;
    if pages_in_runs != count {
        return Some(format!(
            "its runs hold {pages_in_runs} pages but it carries {count} checksums"
        ));
    }
    let expected_data = count * u64::from(page_size);
    if data_len as u64 != expected_data {
        return Some(format!(
            "data is {data_len} bytes, expected {count} pages of {page_size} bytes \
             ({expected_data})"
        ));
    }
    let payload =
        PAGES_FIELDS_LEN as u64 + RUN_LEN as u64 * runs.len() as u64 + 4 * count + expected_data;
    if payload > MAX_PAYLOAD as u64 {
        return Some(format!(
            "{count} pages of {page_size} bytes in {} runs make a {payload}-byte payload, over \
             the {MAX_PAYLOAD}-byte limit",
            runs.len()
        ));
    }
    None
}

/// Which rule of runs of pages `runs` (of `page_size` bytes) break: at least one run, each of
/// at least one page, ascending without overlapping, ending inside the byte range of a u64.
/// How many pages they hold if none.
fn runs_problem(runs: &[(u64, u32)], page_size: u32) -> Result<u64, String> {
    if runs.is_empty() {
        return Err("has no runs of pages".into());
    }
    let mut pages_in_runs = 0u64;
    let mut previous_end = 0u64;
    for (index, &(first, pages)) in runs.iter().enumerate() {
        if pages == 0 {
            return Err(format!("run {index} (from page {first}) covers no pages"));
        }
        if index > 0 && first < previous_end {
            return Err(format!(
                "run {index} starts at page {first}, before the end of the run before it \
                 (page {previous_end}): runs must ascend without overlapping"
            ));
        }
        let end = first.checked_add(u64::from(pages));
        if end
            .and_then(|end| end.checked_mul(u64::from(page_size)))
            .is_none()
        {
            return Err(format!(
                "run {index}, pages {first}..+{pages} of {page_size} bytes, ends past the \
                 largest byte offset"
            ));
        }
        previous_end = end.unwrap_or(u64::MAX);
        pages_in_runs += u64::from(pages);
    }
    Ok(pages_in_runs)
}

/// Encodes a message's payload. This does not check the message rules ([`Message::validate`]
/// does): a message that breaks them encodes to a payload that does not decode.
pub fn encode_payload(message: &Message) -> Vec<u8> {
    let mut payload = Vec::new();
    encode_payload_into(message, &mut payload);
    payload
}

/// Appends a message's payload to `out` (see [`encode_payload`]).
pub fn encode_payload_into(message: &Message, out: &mut Vec<u8>) {
    let page_data = encode_payload_head(message, out);
    out.extend_from_slice(page_data);
}

/// Appends a message's payload to `out` except a `Pages` message's page data, which it returns
/// (empty for other messages): the payload is `out`'s new bytes followed by the returned ones.
/// The stream sends the page data from where it is, without copying it.
pub(crate) fn encode_payload_head<'a>(message: &'a Message, out: &mut Vec<u8>) -> &'a [u8] {
    match message {
        Message::Begin { migration, regions } => {
            out.extend_from_slice(&migration.to_le_bytes());
            out.extend_from_slice(&saturating_u32(regions.len()).to_le_bytes());
            for region in regions {
                put_string(out, &region.name);
                out.extend_from_slice(&region.bytes.to_le_bytes());
                out.extend_from_slice(&region.page_size.to_le_bytes());
            }
        }
        Message::Ready | Message::Finish => {}
        Message::Resume { migration } => out.extend_from_slice(&migration.to_le_bytes()),
        Message::Pages {
            region,
            page_size,
            runs,
            crcs,
            data,
        } => {
            out.reserve(PAGES_FIELDS_LEN + RUN_LEN * runs.len() + 4 * crcs.len());
            out.extend_from_slice(&region.to_le_bytes());
            out.extend_from_slice(&page_size.to_le_bytes());
            out.extend_from_slice(&saturating_u32(runs.len()).to_le_bytes());
            out.extend_from_slice(&saturating_u32(crcs.len()).to_le_bytes());
            for (first, pages) in runs {
                out.extend_from_slice(&first.to_le_bytes());
                out.extend_from_slice(&pages.to_le_bytes());
            }
            for crc in crcs {
                out.extend_from_slice(&crc.to_le_bytes());
            }
            return data;
        }
        Message::Zero {
            region,
            first_page,
            pages,
        } => {
            out.extend_from_slice(&region.to_le_bytes());
            out.extend_from_slice(&first_page.to_le_bytes());
            out.extend_from_slice(&pages.to_le_bytes());
        }
        Message::RoundEnd { round, pages } => {
            out.extend_from_slice(&round.to_le_bytes());
            out.extend_from_slice(&pages.to_le_bytes());
        }
        Message::Done { pages, bytes } => {
            out.extend_from_slice(&pages.to_le_bytes());
            out.extend_from_slice(&bytes.to_le_bytes());
        }
        Message::Abort { reason } => put_string(out, reason),
        Message::Remote { region, runs } => {
            out.reserve(8 + RUN_LEN * runs.len());
            out.extend_from_slice(&region.to_le_bytes());
            out.extend_from_slice(&saturating_u32(runs.len()).to_le_bytes());
            for (first, pages) in runs {
                out.extend_from_slice(&first.to_le_bytes());
                out.extend_from_slice(&pages.to_le_bytes());
            }
        }
        Message::Want { region, pages } => {
            out.reserve(8 + 8 * pages.len());
            out.extend_from_slice(&region.to_le_bytes());
            out.extend_from_slice(&saturating_u32(pages.len()).to_le_bytes());
            for page in pages {
                out.extend_from_slice(&page.to_le_bytes());
            }
        }
    }
    &[]
}

/// Where a `Pages` payload's page data starts, read from its first [`PAGES_FIELDS_LEN`] bytes
/// (the run and page counts): `None` if `fields` is shorter or the length overflows. The
/// receiver uses it, before the MAC is checked, only to read the page data into a buffer of
/// its own; nothing else trusts it ([`decode_pages_parts`] checks the split).
pub(crate) fn pages_head_len(fields: &[u8]) -> Option<usize> {
    let field = |at: usize| {
        let bytes = fields.get(at..at + 4)?;
        Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize)
    };
    let (runs, pages) = (field(8)?, field(12)?);
    runs.checked_mul(RUN_LEN)?
        .checked_add(pages.checked_mul(4)?)?
        .checked_add(PAGES_FIELDS_LEN)
}

/// Decodes a `Pages` payload given in two parts: `head` (the fields and checksums) and
/// `data` (the page data), which becomes the message's data without a copy. The same rules
/// and errors as [`decode_payload`] on the whole payload.
pub(crate) fn decode_pages_parts(head: &[u8], data: Vec<u8>) -> Result<Message, MigrationError> {
    let mut reader = PayloadReader::new(MessageKind::Pages.name(), head);
    let fields = decode_pages_fields(&mut reader, data.len())?;
    let message = finish_pages(&reader, fields, data)?;
    reader.finish()?;
    Ok(message)
}

/// Decodes a payload of message type `kind`. Refuses unknown types, payloads too short for
/// their fields, trailing bytes, over-long or non-UTF-8 strings, counts that do not fit the
/// payload (checked before allocating), anything [`Message::validate`] refuses, and `Pages`
/// whose data does not match its CRC32Cs ([`MigrationError::Checksum`] names the page).
pub fn decode_payload(kind: u8, payload: &[u8]) -> Result<Message, MigrationError> {
    let kind = MessageKind::from_byte(kind).ok_or(MigrationError::UnknownKind { kind })?;
    let mut reader = PayloadReader::new(kind.name(), payload);
    let message = match kind {
        MessageKind::Begin => decode_begin(&mut reader)?,
        MessageKind::Ready => Message::Ready,
        MessageKind::Pages => decode_pages(&mut reader)?,
        MessageKind::Zero => Message::Zero {
            region: reader.u32("region")?,
            first_page: reader.u64("first page")?,
            pages: reader.u64("page count")?,
        },
        MessageKind::RoundEnd => Message::RoundEnd {
            round: reader.u32("round")?,
            pages: reader.u64("page count")?,
        },
        MessageKind::Finish => Message::Finish,
        MessageKind::Done => Message::Done {
            pages: reader.u64("page count")?,
            bytes: reader.u64("byte count")?,
        },
        MessageKind::Abort => Message::Abort {
            reason: reader.string(MAX_ABORT_REASON_LEN, "reason")?,
        },
        MessageKind::Remote => decode_remote(&mut reader)?,
        MessageKind::Want => decode_want(&mut reader)?,
        MessageKind::Resume => Message::Resume {
            migration: reader.u64("migration")?,
        },
    };
    if let Some(problem) = message.problem() {
        return Err(reader.malformed(problem));
    }
    reader.finish()?;
    check_page_crcs(&message)?;
    Ok(message)
}

/// Decodes a `Begin` payload.
fn decode_begin(reader: &mut PayloadReader<'_>) -> Result<Message, MigrationError> {
    let migration = reader.u64("migration")?;
    let count = reader.u32("region count")?;
    if count as usize > MAX_REGIONS {
        return Err(reader.malformed(format!(
            "region count {count} at byte offset 8 is over the limit of {MAX_REGIONS}"
        )));
    }
    let mut regions = Vec::with_capacity(count as usize);
    for index in 0..count {
        let name = reader.string(MAX_REGION_NAME_LEN, &format!("region {index} name"))?;
        let bytes = reader.u64(&format!("region {index} size"))?;
        let page_size = reader.u32(&format!("region {index} page size"))?;
        regions.push(RegionInfo {
            name,
            bytes,
            page_size,
        });
    }
    Ok(Message::Begin { migration, regions })
}

/// Reads `count` items of `item_len` bytes each from `reader` after checking that they are
/// all there (before allocating for them); `limit`: most items allowed.
fn counted_items<'a>(
    reader: &mut PayloadReader<'a>,
    item_len: usize,
    limit: usize,
    what: &str,
) -> Result<std::slice::ChunksExact<'a, u8>, MigrationError> {
    let count_offset = reader.offset();
    let count = reader.u32(&format!("{what} count"))? as usize;
    if count > limit {
        return Err(reader.malformed(format!(
            "{what} count {count} at byte offset {count_offset} is over the limit of {limit}"
        )));
    }
    if count * item_len != reader.remaining() {
        return Err(reader.malformed(format!(
            "{what} count {count} at byte offset {count_offset} needs {} bytes, but {} follow",
            count * item_len,
            reader.remaining()
        )));
    }
    Ok(reader.take(count * item_len, what)?.chunks_exact(item_len))
}

/// One run's [`RUN_LEN`] bytes: first page (u64 LE), page count (u32 LE).
fn decode_run(run: &[u8]) -> (u64, u32) {
    let mut first = [0u8; 8];
    first.copy_from_slice(&run[..8]);
    (
        u64::from_le_bytes(first),
        u32::from_le_bytes([run[8], run[9], run[10], run[11]]),
    )
}

/// Decodes a `Remote` payload.
fn decode_remote(reader: &mut PayloadReader<'_>) -> Result<Message, MigrationError> {
    let region = reader.u32("region")?;
    let runs = counted_items(reader, RUN_LEN, MAX_REMOTE_RUNS, "run")?
        .map(decode_run)
        .collect();
    Ok(Message::Remote { region, runs })
}

/// Decodes a `Want` payload.
fn decode_want(reader: &mut PayloadReader<'_>) -> Result<Message, MigrationError> {
    let region = reader.u32("region")?;
    let pages = counted_items(reader, 8, MAX_WANT_PAGES, "page")?
        .map(|page| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(page);
            u64::from_le_bytes(bytes)
        })
        .collect();
    Ok(Message::Want { region, pages })
}

/// A `Pages` message's fields before its data: region, page size, runs, checksums.
struct PagesFields {
    region: u32,
    page_size: u32,
    runs: Vec<(u64, u32)>,
    crcs: Vec<u32>,
}

impl PagesFields {
    /// The message with these fields and `data`.
    fn with_data(self, data: Vec<u8>) -> Message {
        Message::Pages {
            region: self.region,
            page_size: self.page_size,
            runs: self.runs,
            crcs: self.crcs,
            data,
        }
    }
}

/// Decodes a `Pages` payload (checksums are checked by the caller).
fn decode_pages(reader: &mut PayloadReader<'_>) -> Result<Message, MigrationError> {
    let fields = decode_pages_fields(reader, 0)?;
    let data = reader
        .take(fields.crcs.len() * fields.page_size as usize, "page data")?
        .to_vec();
    Ok(fields.with_data(data))
}

/// Reads a `Pages` payload's fields, runs and checksums from `reader`, checking that the
/// counts fit what follows them (the rest of `reader` plus `outside` bytes given apart) before
/// allocating for them.
fn decode_pages_fields(
    reader: &mut PayloadReader<'_>,
    outside: usize,
) -> Result<PagesFields, MigrationError> {
    let region = reader.u32("region")?;
    let page_size = reader.u32("page size")?;
    let run_count = reader.u32("run count")?;
    let count_offset = reader.offset();
    let count = reader.u32("page count")?;
    // Check the page size and that the counts fit the payload before allocating for them.
    if let Some(problem) = pages_problem(page_size, &[(0, 1)], 1, page_size as usize) {
        return Err(reader.malformed(problem));
    }
    if run_count == 0 || count == 0 {
        return Err(reader.malformed(format!(
            "carries no pages ({run_count} runs, {count} pages at byte offset 8)"
        )));
    }
    let needed =
        u64::from(run_count) * RUN_LEN as u64 + u64::from(count) * (4 + u64::from(page_size));
    let follows = reader.remaining() as u64 + outside as u64;
    if needed != follows {
        return Err(reader.malformed(format!(
            "{run_count} runs and page count {count} at byte offset {count_offset} need \
             {needed} bytes of runs, checksums and {page_size}-byte pages, but {follows} bytes \
             follow"
        )));
    }
    let run_bytes = reader.take(RUN_LEN * run_count as usize, "runs")?;
    let runs = run_bytes.chunks_exact(RUN_LEN).map(decode_run).collect();
    let crc_bytes = reader.take(4 * count as usize, "checksums")?;
    let crcs = crc_bytes
        .chunks_exact(4)
        .map(|crc| u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]))
        .collect();
    Ok(PagesFields {
        region,
        page_size,
        runs,
        crcs,
    })
}

/// The `Pages` message of `fields` and `data`, checked against the message rules and its
/// checksums.
fn finish_pages(
    reader: &PayloadReader<'_>,
    fields: PagesFields,
    data: Vec<u8>,
) -> Result<Message, MigrationError> {
    let message = fields.with_data(data);
    if let Some(problem) = message.problem() {
        return Err(reader.malformed(problem));
    }
    check_page_crcs(&message)?;
    Ok(message)
}

/// Checks each page of a `Pages` message against its CRC32C (other messages have none).
fn check_page_crcs(message: &Message) -> Result<(), MigrationError> {
    let Message::Pages {
        region,
        page_size,
        runs,
        crcs,
        data,
    } = message
    else {
        return Ok(());
    };
    let page_numbers = runs
        .iter()
        .flat_map(|&(first, pages)| first..first + u64::from(pages));
    let pages = data.chunks(*page_size as usize).zip(crcs).zip(page_numbers);
    for ((page, &expected), number) in pages {
        let actual = crc32c::crc32c(page);
        if actual != expected {
            return Err(MigrationError::Checksum {
                region: *region,
                page: number,
                expected,
                actual,
            });
        }
    }
    Ok(())
}

/// Appends a u16 length and the bytes of `text` (cut at `u16::MAX` bytes; such a string breaks
/// the message rules anyway).
fn put_string(out: &mut Vec<u8>, text: &str) {
    let len = text.len().min(usize::from(u16::MAX));
    out.extend_from_slice(&(len as u16).to_le_bytes());
    out.extend_from_slice(&text.as_bytes()[..len]);
}

/// `len` as a u32, or `u32::MAX` if it does not fit (such a message breaks the rules anyway).
fn saturating_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::Begin { migration, regions } => f
                .debug_struct("Begin")
                .field("migration", &format_args!("{migration:#018x}"))
                .field("regions", regions)
                .finish(),
            Message::Resume { migration } => f
                .debug_struct("Resume")
                .field("migration", &format_args!("{migration:#018x}"))
                .finish(),
            Message::Ready => f.write_str("Ready"),
            Message::Pages {
                region,
                page_size,
                runs,
                crcs,
                data,
            } => f
                .debug_struct("Pages")
                .field("region", region)
                .field("page_size", page_size)
                .field("runs", &DebugRuns(runs))
                .field("crcs", &format_args!("<{} checksums>", crcs.len()))
                .field("data", &format_args!("<{} bytes>", data.len()))
                .finish(),
            Message::Zero {
                region,
                first_page,
                pages,
            } => f
                .debug_struct("Zero")
                .field("region", region)
                .field("first_page", first_page)
                .field("pages", pages)
                .finish(),
            Message::RoundEnd { round, pages } => f
                .debug_struct("RoundEnd")
                .field("round", round)
                .field("pages", pages)
                .finish(),
            Message::Finish => f.write_str("Finish"),
            Message::Done { pages, bytes } => f
                .debug_struct("Done")
                .field("pages", pages)
                .field("bytes", bytes)
                .finish(),
            Message::Abort { reason } => f.debug_struct("Abort").field("reason", reason).finish(),
            Message::Remote { region, runs } => f
                .debug_struct("Remote")
                .field("region", region)
                .field("runs", &DebugRuns(runs))
                .finish(),
            Message::Want { region, pages } => {
                let mut s = f.debug_struct("Want");
                s.field("region", region);
                if pages.len() <= 4 {
                    s.field("pages", pages);
                } else {
                    s.field("pages", &format_args!("<{} pages>", pages.len()));
                }
                s.finish()
            }
        }
    }
}

/// A `Pages` message's runs in `Debug` output: all of a few, the count of many.
struct DebugRuns<'a>(&'a [(u64, u32)]);

impl fmt::Debug for DebugRuns<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() <= 4 {
            f.debug_list().entries(self.0).finish()
        } else {
            write!(f, "<{} runs from page {}>", self.0.len(), self.0[0].0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of every message, valid.
    pub(crate) fn samples() -> Vec<Message> {
        let mut data = vec![0u8; 3 * 4096];
        for (index, byte) in data.iter_mut().enumerate() {
            *byte = (index * 7 % 251) as u8;
        }
        vec![
            Message::Begin {
                migration: 0x0123_4567_89ab_cdef,
                regions: vec![
                    RegionInfo {
                        name: "pc.ram".into(),
                        bytes: 4 << 30,
                        page_size: 4096,
                    },
                    RegionInfo {
                        name: "ünïcode".into(),
                        bytes: 2 << 20,
                        page_size: 2 << 20,
                    },
                ],
            },
            Message::Begin {
                migration: 0,
                regions: vec![],
            },
            Message::Ready,
            Message::pages(1, 77, 4096, data.clone()),
            Message::page_runs(0, 4096, vec![(3, 1), (4, 1), (10, 1)], data),
            Message::Zero {
                region: 0,
                first_page: 5,
                pages: 1000,
            },
            Message::RoundEnd {
                round: 3,
                pages: 123_456,
            },
            Message::Finish,
            Message::Done {
                pages: 9,
                bytes: 9 * 4096,
            },
            Message::Abort {
                reason: "the destination ran out of memory".into(),
            },
            Message::Abort {
                reason: String::new(),
            },
            Message::Remote {
                region: 1,
                runs: vec![(0, 3), (9, 1), (1 << 40, 7)],
            },
            Message::Want {
                region: 0,
                pages: vec![12, 3, 12],
            },
            Message::Resume {
                migration: u64::MAX,
            },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for message in samples() {
            message.validate().unwrap();
            let payload = encode_payload(&message);
            let decoded = decode_payload(message.kind().to_byte(), &payload).unwrap();
            assert_eq!(decoded, message);
        }
    }

    #[test]
    fn a_payload_split_at_the_page_data_decodes_as_the_whole() {
        for message in samples() {
            let mut head = Vec::new();
            let data = encode_payload_head(&message, &mut head).to_vec();
            let whole = encode_payload(&message);
            assert_eq!([head.as_slice(), &data].concat(), whole);
            if let Message::Pages { .. } = message {
                assert_eq!(pages_head_len(&head), Some(head.len()));
                assert_eq!(decode_pages_parts(&head, data).unwrap(), message);
            } else {
                assert!(data.is_empty());
            }
        }
        // Split anywhere else, or corrupted, the parts are refused as the whole payload is.
        let message = Message::pages(1, 9, 4096, vec![3u8; 2 * 4096]);
        let whole = encode_payload(&message);
        for at in [
            0,
            7,
            PAGES_FIELDS_LEN,
            PAGES_FIELDS_LEN + 4,
            whole.len() - 1,
        ] {
            let (head, data) = whole.split_at(at);
            let parts = decode_pages_parts(head, data.to_vec());
            assert!(parts.is_err(), "split at {at}: {parts:?}");
        }
        let mut corrupt = whole.clone();
        corrupt[PAGES_FIELDS_LEN + RUN_LEN + 8 + 5000] ^= 1;
        let (head, data) = corrupt.split_at(PAGES_FIELDS_LEN + RUN_LEN + 8);
        assert_eq!(
            decode_pages_parts(head, data.to_vec())
                .unwrap_err()
                .to_string(),
            decode_payload(MessageKind::Pages.to_byte(), &corrupt)
                .unwrap_err()
                .to_string()
        );
        // A count that does not fit: the same error as for the whole payload.
        let mut lying = whole.clone();
        lying[12..16].copy_from_slice(&3u32.to_le_bytes());
        let (head, data) = lying.split_at(PAGES_FIELDS_LEN + RUN_LEN + 8);
        assert_eq!(
            decode_pages_parts(head, data.to_vec())
                .unwrap_err()
                .to_string(),
            decode_payload(MessageKind::Pages.to_byte(), &lying)
                .unwrap_err()
                .to_string()
        );
        assert_eq!(pages_head_len(&lying[..PAGES_FIELDS_LEN - 1]), None);
    }

    #[test]
    fn crc32c_is_the_standard_castagnoli_crc() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn pages_computes_one_crc_per_page() {
        let mut data = vec![0u8; 2 * 4096];
        data[4096] = 1;
        let Message::Pages { crcs, .. } = Message::pages(0, 0, 4096, data.clone()) else {
            unreachable!()
        };
        assert_eq!(
            crcs,
            vec![crc32c::crc32c(&data[..4096]), crc32c::crc32c(&data[4096..])]
        );
        assert_ne!(crcs[0], crcs[1]);
    }

    #[test]
    fn wrong_crc_names_region_and_page() {
        let message = Message::pages(3, 40, 4096, vec![5u8; 3 * 4096]);
        let mut payload = encode_payload(&message);
        // Corrupt one byte of the third page's data.
        let data_start = PAGES_FIELDS_LEN + RUN_LEN + 3 * 4;
        payload[data_start + 2 * 4096 + 17] ^= 0x20;
        let error = decode_payload(MessageKind::Pages.to_byte(), &payload).unwrap_err();
        assert!(
            matches!(
                error,
                MigrationError::Checksum {
                    region: 3,
                    page: 42,
                    ..
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains("page 42 of region 3"));
        // In a message of several runs, the page is numbered within its run.
        let message = Message::page_runs(3, 4096, vec![(7, 1), (40, 2)], vec![5u8; 3 * 4096]);
        let mut payload = encode_payload(&message);
        let data_start = PAGES_FIELDS_LEN + 2 * RUN_LEN + 3 * 4;
        payload[data_start + 2 * 4096] ^= 1;
        let error = decode_payload(MessageKind::Pages.to_byte(), &payload).unwrap_err();
        assert!(error.to_string().contains("page 41 of region 3"), "{error}");
    }

    #[test]
    fn remote_runs_are_split_into_valid_messages() {
        assert!(Message::remote(3, &[]).is_empty());
        let runs: Vec<(usize, usize)> = (0..=MAX_REMOTE_RUNS).map(|i| (3 * i, 2)).collect();
        let messages = Message::remote(3, &runs);
        assert_eq!(messages.len(), 2);
        let mut back = Vec::new();
        for m in &messages {
            m.validate().unwrap();
            let Message::Remote { region: 3, runs } = m else {
                panic!("{m:?}");
            };
            back.extend(runs.iter().map(|&(f, n)| (f as usize, n as usize)));
        }
        assert_eq!(back, runs);
    }

    #[test]
    fn refuses_unknown_kinds_trailing_bytes_and_short_payloads() {
        assert!(matches!(
            decode_payload(0, &[]),
            Err(MigrationError::UnknownKind { kind: 0 })
        ));
        assert!(matches!(
            decode_payload(12, &[]),
            Err(MigrationError::UnknownKind { kind: 12 })
        ));
        let error = decode_payload(MessageKind::Ready.to_byte(), &[0]).unwrap_err();
        assert!(error.to_string().contains("1 trailing bytes"), "{error}");
        for message in samples() {
            let payload = encode_payload(&message);
            for cut in 0..payload.len().min(64) {
                assert!(decode_payload(message.kind().to_byte(), &payload[..cut]).is_err());
            }
            let mut longer = payload.clone();
            longer.push(0);
            assert!(decode_payload(message.kind().to_byte(), &longer).is_err());
        }
    }

    #[test]
    fn refuses_counts_that_do_not_fit_before_allocating() {
        // A Pages header claiming u32::MAX runs and pages of 2 MiB in a tiny payload.
        let mut payload = Vec::new();
        payload.extend_from_slice(&0u32.to_le_bytes());
        payload.extend_from_slice(&MAX_PAGES_PAGE_SIZE.to_le_bytes());
        payload.extend_from_slice(&u32::MAX.to_le_bytes());
        payload.extend_from_slice(&u32::MAX.to_le_bytes());
        let error = decode_payload(MessageKind::Pages.to_byte(), &payload).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("4294967295 runs and page count 4294967295 at byte offset 12"),
            "{error}"
        );
        assert_eq!(
            pages_head_len(&payload),
            Some(PAGES_FIELDS_LEN + (u32::MAX as usize) * (RUN_LEN + 4))
        );
        // A Begin claiming many regions.
        let mut payload = 7u64.to_le_bytes().to_vec();
        payload.extend_from_slice(&u32::MAX.to_le_bytes());
        let error = decode_payload(MessageKind::Begin.to_byte(), &payload)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("region count 4294967295 at byte offset 8 is over the limit of 64"),
            "{error}"
        );
    }

    #[test]
    fn refuses_bad_strings_and_page_rules() {
        let abort = |reason: &[u8]| {
            let mut payload = (reason.len() as u16).to_le_bytes().to_vec();
            payload.extend_from_slice(reason);
            decode_payload(MessageKind::Abort.to_byte(), &payload)
        };
        assert!(abort(&[b'x'; 1024]).is_ok());
        assert!(abort(&[b'x'; 1025])
            .unwrap_err()
            .to_string()
            .contains("over the 1024-byte limit"));
        assert!(abort(b"ok\xc3")
            .unwrap_err()
            .to_string()
            .contains("not valid UTF-8"));

        let invalid = [
            Message::pages(0, 0, 4096, vec![]),
            Message::pages(0, 0, 4096, vec![0; 4097]),
            Message::pages(0, 0, 8192 + 4096, vec![0; 12288]),
            Message::pages(0, 0, 4 << 20, vec![0; 4 << 20]),
            Message::pages(0, 0, 2048, vec![0; 2048]),
            Message::pages(0, u64::MAX, 4096, vec![0; 4096]),
            Message::pages(0, 0, 4096, vec![0; MAX_PAYLOAD]),
            Message::page_runs(0, 4096, vec![], vec![]),
            Message::page_runs(0, 4096, vec![(0, 1), (1, 0)], vec![0; 4096]),
            Message::page_runs(0, 4096, vec![(5, 2), (6, 1)], vec![0; 3 * 4096]),
            Message::page_runs(0, 4096, vec![(5, 1), (2, 1)], vec![0; 2 * 4096]),
            Message::page_runs(0, 4096, vec![(5, 1), (7, 1)], vec![0; 3 * 4096]),
            Message::page_runs(0, 4096, vec![(1, 1), (u64::MAX, 1)], vec![0; 2 * 4096]),
            Message::Zero {
                region: 0,
                first_page: 0,
                pages: 0,
            },
            Message::Zero {
                region: 0,
                first_page: u64::MAX,
                pages: 1,
            },
            Message::Abort {
                reason: "x".repeat(1025),
            },
            Message::Remote {
                region: 0,
                runs: vec![],
            },
            Message::Remote {
                region: 0,
                runs: vec![(4, 2), (5, 1)],
            },
            Message::Remote {
                region: 0,
                runs: vec![(4, 0)],
            },
            Message::Remote {
                region: 0,
                runs: vec![(u64::MAX, 1)],
            },
            Message::Remote {
                region: 0,
                runs: (0..=MAX_REMOTE_RUNS as u64).map(|i| (2 * i, 1)).collect(),
            },
            Message::Want {
                region: 0,
                pages: vec![],
            },
            Message::Want {
                region: 0,
                pages: vec![1; MAX_WANT_PAGES + 1],
            },
            Message::Begin {
                migration: 1,
                regions: vec![
                    RegionInfo {
                        name: "r".into(),
                        bytes: 0,
                        page_size: 4096
                    };
                    65
                ],
            },
        ];
        for message in invalid {
            let error = message.validate().unwrap_err().to_string();
            assert!(error.starts_with("cannot send"), "{error}");
            assert!(
                decode_payload(message.kind().to_byte(), &encode_payload(&message)).is_err(),
                "{message:?}"
            );
        }
    }

    #[test]
    fn largest_pages_fit() {
        let four_k = Message::pages(0, 0, 4096, vec![1; 4 << 20]);
        four_k.validate().unwrap();
        assert!(encode_payload(&four_k).len() <= MAX_PAYLOAD);
        let huge = Message::pages(0, 0, 2 << 20, vec![1; 4 << 20]);
        huge.validate().unwrap();
    }

    #[test]
    fn debug_does_not_dump_page_data() {
        let shown = format!("{:?}", Message::pages(0, 0, 4096, vec![0; 4096]));
        assert_eq!(
            shown,
            "Pages { region: 0, page_size: 4096, runs: [(0, 1)], crcs: <1 checksums>, data: <4096 bytes> }"
        );
    }
}
