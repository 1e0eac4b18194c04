//! Writers, `open_trace`, zstd detection and iterator behaviour, end to end through files.

use std::path::Path;
use std::process::Command;

use memvisor_trace::{
    open_trace, write_oracle_general, write_text, Request, TraceError, TraceFormat, TraceReader,
    WorkloadSpec,
};

fn read_all(path: &Path, format: &TraceFormat) -> Vec<Request> {
    open_trace(path, format)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Next-access indices computed naively.
fn naive_next(ids: &[u64]) -> Vec<Option<u64>> {
    (0..ids.len())
        .map(|i| {
            (i + 1..ids.len())
                .find(|&j| ids[j] == ids[i])
                .map(|j| j as u64)
        })
        .collect()
}

#[test]
fn oracle_general_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let spec: WorkloadSpec = "zipf:n=200:alpha=1:len=3000:seed=5".parse().unwrap();
    let ids: Vec<u64> = spec.requests().map(|r| r.unit).collect();
    for name in ["w.oracleGeneral", "w.oracleGeneral.zst"] {
        let path = dir.path().join(name);
        assert_eq!(
            write_oracle_general(&path, ids.iter().copied()).unwrap(),
            3000
        );
        let format = TraceFormat::detect(&path).unwrap();
        assert_eq!(format, TraceFormat::OracleGeneral);
        let got = read_all(&path, &format);
        assert_eq!(got.iter().map(|r| r.unit).collect::<Vec<_>>(), ids);
        assert_eq!(
            got.iter().map(|r| r.time).collect::<Vec<_>>(),
            (0..3000).collect::<Vec<u64>>()
        );
        assert_eq!(
            got.iter().map(|r| r.next_access).collect::<Vec<_>>(),
            naive_next(&ids)
        );
    }
    // The compressed file really is compressed.
    let raw = std::fs::metadata(dir.path().join("w.oracleGeneral"))
        .unwrap()
        .len();
    let zst = std::fs::metadata(dir.path().join("w.oracleGeneral.zst"))
        .unwrap()
        .len();
    assert_eq!(raw, 3000 * 24);
    assert!(zst < raw / 2, "{zst} vs {raw}");
}

#[test]
fn zstd_is_detected_by_magic_not_name() {
    let dir = tempfile::tempdir().unwrap();
    let ids = [1u64, 2, 3, 1, 0xdead_beef];
    let plain = dir.path().join("ids.txt");
    write_text(&plain, ids).unwrap();

    // Compressed with the zstd CLI if present, else with the crate; named without `.zst`.
    let disguised = dir.path().join("ids-compressed.txt");
    let cli = Command::new("zstd")
        .arg("-q")
        .arg("-f")
        .arg(&plain)
        .arg("-o")
        .arg(&disguised)
        .status();
    match cli {
        Ok(s) if s.success() => {}
        _ => {
            eprintln!("zstd CLI unavailable; compressing with the zstd crate");
            let data = std::fs::read(&plain).unwrap();
            std::fs::write(&disguised, zstd::encode_all(&data[..], 19).unwrap()).unwrap();
        }
    }
    let head = std::fs::read(&disguised).unwrap();
    assert_eq!(head[..4], [0x28, 0xb5, 0x2f, 0xfd]);
    let got = read_all(&disguised, &TraceFormat::Text);
    assert_eq!(got.iter().map(|r| r.unit).collect::<Vec<_>>(), ids);

    // A `.zst` name does not force decompression either.
    let misnamed = dir.path().join("plain.txt.zst");
    std::fs::copy(&plain, &misnamed).unwrap();
    assert_eq!(read_all(&misnamed, &TraceFormat::Text).len(), ids.len());

    // Concatenated frames decode as one stream.
    let mut two = zstd::encode_all(&b"1\n2\n"[..], 3).unwrap();
    two.extend(zstd::encode_all(&b"3\n"[..], 3).unwrap());
    let r = TraceReader::from_reader(
        Box::new(std::io::Cursor::new(two)),
        "two",
        &TraceFormat::Text,
    );
    let got: Vec<u64> = r.map(|r| r.unwrap().unit).collect();
    assert_eq!(got, [1, 2, 3]);
}

#[test]
fn corrupt_zstd_is_an_error_naming_the_position() {
    let mut data = zstd::encode_all(&b"1\n2\n3\n"[..], 3).unwrap();
    let n = data.len();
    data.truncate(n - 3);
    let mut r = TraceReader::from_reader(
        Box::new(std::io::Cursor::new(data)),
        "cut.txt.zst",
        &TraceFormat::Text,
    );
    let err = r.find_map(|x| x.err()).expect("an error");
    let msg = err.to_string();
    let at = format!(
        "cut.txt.zst: the zstd-compressed stream is truncated: it ends at compressed byte {}, after ",
        n - 3
    );
    assert!(msg.starts_with(&at), "{msg}");
    assert!(matches!(err, TraceError::TruncatedCompressed { .. }));
    assert!(r.next().is_none(), "fused after an error");

    let mut garbage = vec![0x28, 0xb5, 0x2f, 0xfd];
    garbage.extend_from_slice(&[0xff; 40]);
    let mut r = TraceReader::from_reader(
        Box::new(std::io::Cursor::new(garbage)),
        "bad.oracleGeneral.zst",
        &TraceFormat::OracleGeneral,
    );
    let msg = r.next().unwrap().unwrap_err().to_string();
    assert!(msg.starts_with("bad.oracleGeneral.zst: "), "{msg}");
    assert!(msg.contains("record 0"), "{msg}");
    assert!(r.next().is_none());
}

#[test]
fn huge_zstd_windows_are_refused_not_allocated() {
    // Found by cargo-fuzz: a frame header declaring a 2 GiB window. The decoder keeps zstd's
    // default 128 MiB limit, so this is an error, not a 2 GiB allocation.
    let frame = [
        0x28, 0xb5, 0x2f, 0xfd, 0x00, 0xa8, 0x00, 0xb9, 0x00, 0x00, 0xe0,
    ];
    let mut r = TraceReader::from_reader(
        Box::new(std::io::Cursor::new(frame.to_vec())),
        "big-window",
        &TraceFormat::LACKEY,
    );
    let e = r.next().unwrap().unwrap_err().to_string();
    assert!(e.starts_with("big-window: line 1: read error"), "{e}");

    // A legitimately compressed trace with a 2^28 window (zstd --long=28) is refused too.
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
    enc.long_distance_matching(true).unwrap();
    enc.window_log(28).unwrap();
    std::io::Write::write_all(&mut enc, b"1\n2\n").unwrap();
    let data = enc.finish().unwrap();
    let r = TraceReader::from_reader(
        Box::new(std::io::Cursor::new(data)),
        "long",
        &TraceFormat::Text,
    );
    let errors: Vec<String> = r.filter_map(|x| x.err().map(|e| e.to_string())).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("long: line 1: read error"),
        "{errors:?}"
    );
}

#[test]
fn errors_stop_the_iterator_and_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.txt");
    std::fs::write(&path, "1\n2\nthree\n4\n").unwrap();
    let mut r = open_trace(&path, &TraceFormat::Text).unwrap();
    assert_eq!(r.next().unwrap().unwrap().unit, 1);
    assert_eq!(r.next().unwrap().unwrap().unit, 2);
    let e = r.next().unwrap().unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}:3: ", path.display())), "{e}");
    assert!(r.next().is_none());
    assert!(r.next().is_none());
    assert_eq!(r.requests_read(), 2);

    let missing = dir.path().join("missing.txt");
    let e = open_trace(&missing, &TraceFormat::Text)
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.txt: cannot open"), "{e}");

    let e = write_oracle_general(&dir.path().join("nope/x.oracleGeneral"), [1]).unwrap_err();
    assert!(
        e.to_string()
            .contains("nope/x.oracleGeneral: cannot open its directory"),
        "{e}"
    );
}

#[test]
fn csv_and_lackey_through_files() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("t.csv");
    std::fs::write(&csv, "ts,key\n5,a\n6,b\n9,a\n").unwrap();
    let f: TraceFormat = "csv:column=2:time-column=1:header=true".parse().unwrap();
    let got = read_all(&csv, &f);
    assert_eq!(got.iter().map(|r| r.time).collect::<Vec<_>>(), [5, 6, 9]);
    assert_eq!(got[0].unit, got[2].unit);
    assert_ne!(got[0].unit, got[1].unit);
    assert_eq!(got[0].unit, memvisor_trace::hash_unit_id("a"));

    let lk = dir.path().join("t.lackey");
    std::fs::write(&lk, "==1== hi\nI  1000,4\n L 1ffe,4\n").unwrap();
    let f = TraceFormat::detect(&lk).unwrap();
    let got = read_all(&lk, &f);
    assert_eq!(
        got.iter().map(|r| (r.time, r.unit)).collect::<Vec<_>>(),
        [(0, 1), (1, 1), (2, 2)]
    );
}

#[test]
fn readers_are_send() {
    fn is_send<T: Send>(_: &T) {}
    let r = TraceReader::from_reader(Box::new(std::io::empty()), "e", &TraceFormat::Text);
    is_send(&r);
    let spec: WorkloadSpec = "zipf:n=10".parse().unwrap();
    is_send(&spec.requests());
    let r = std::thread::spawn(move || r.count()).join().unwrap();
    assert_eq!(r, 0);
}
