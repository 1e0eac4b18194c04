//! [`parse_reply`]: one line from a QMP server, decoded into a [`QmpReply`] (greeting, command
//! return, command error, or event), or refused with [`QmpError::Malformed`]. Pure, used by the
//! client and fuzzed.

use serde_json::{Map, Value};

use crate::qmp_error::QmpError;
use crate::qmp_event::QmpEvent;

/// The longest line accepted from QEMU, without its newline: 1 MiB. The client refuses longer
/// lines without buffering them whole.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// How much of a refused line an error shows.
const EXCERPT_BYTES: usize = 80;

/// One decoded QMP server message.
#[derive(Debug, Clone, PartialEq)]
pub enum QmpReply {
    /// The greeting's `QMP` member (`{"version": ..., "capabilities": [...]}`).
    Greeting(Value),
    /// A command succeeded.
    Return {
        /// The command's `id`, echoed (absent if the command had none).
        id: Option<Value>,
        /// The `return` member.
        value: Value,
    },
    /// A command failed.
    Error {
        /// The command's `id`, echoed (absent if the command had none or could not be parsed).
        id: Option<Value>,
        /// QEMU's error class (`CommandNotFound`, `GenericError`, ...).
        class: String,
        /// QEMU's description.
        desc: String,
    },
    /// An asynchronous event.
    Event(QmpEvent),
}

/// Decodes one line (one JSON object; surrounding whitespace and a trailing newline are
/// allowed). Anything else, including a line over [`MAX_LINE_BYTES`], JSON that is not an
/// object, or an object that is none of the four messages, is [`QmpError::Malformed`].
/// Never panics.
pub fn parse_reply(line: &[u8]) -> Result<QmpReply, QmpError> {
    let malformed = |reason: String| QmpError::Malformed {
        reason,
        excerpt: excerpt(line),
    };
    let content = line.strip_suffix(b"\n").unwrap_or(line);
    let content = content.strip_suffix(b"\r").unwrap_or(content);
    if content.len() > MAX_LINE_BYTES {
        return Err(malformed(format!(
            "{} bytes, over the {MAX_LINE_BYTES}-byte limit",
            content.len()
        )));
    }
    if line.iter().all(u8::is_ascii_whitespace) {
        return Err(malformed("empty line".to_string()));
    }
    let value: Value =
        serde_json::from_slice(line).map_err(|e| malformed(format!("not JSON: {e}")))?;
    let Value::Object(mut object) = value else {
        return Err(malformed(format!(
            "JSON {} where an object was expected",
            kind(&value)
        )));
    };
    if let Some(greeting) = object.remove("QMP") {
        return Ok(QmpReply::Greeting(greeting));
    }
    let id = object.remove("id");
    if let Some(value) = object.remove("return") {
        return Ok(QmpReply::Return { id, value });
    }
    if let Some(error) = object.remove("error") {
        let (class, desc) = error_fields(&error).map_err(malformed)?;
        return Ok(QmpReply::Error { id, class, desc });
    }
    if let Some(name) = object.remove("event") {
        let Value::String(name) = name else {
            return Err(malformed(format!(
                "event name is a JSON {}, not a string",
                kind(&name)
            )));
        };
        let data = object.remove("data").unwrap_or(Value::Null);
        return Ok(QmpReply::Event(QmpEvent { name, data }));
    }
    Err(malformed(format!(
        "no QMP, return, error or event member (members: {})",
        member_names(&object)
    )))
}

/// `class` and `desc` of an `error` member.
fn error_fields(error: &Value) -> Result<(String, String), String> {
    let field = |name: &str| match error.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("error {name} is a JSON {}", kind(other))),
        None => Err(format!("error without {name}")),
    };
    if !error.is_object() {
        return Err(format!("error member is a JSON {}", kind(error)));
    }
    Ok((field("class")?, field("desc")?))
}

/// The JSON type of `value`, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Up to five member names of `object`, quoted, for messages.
fn member_names(object: &Map<String, Value>) -> String {
    if object.is_empty() {
        return "none".to_string();
    }
    let mut names: Vec<String> = object
        .keys()
        .take(5)
        .map(|k| {
            format!(
                "'{}'",
                k.chars().take(40).collect::<String>().escape_debug()
            )
        })
        .collect();
    if object.len() > 5 {
        names.push("...".to_string());
    }
    names.join(", ")
}

/// The start of `line`, lossily decoded and escaped so that it stays on one line.
fn excerpt(line: &[u8]) -> String {
    let cut = line.len().min(EXCERPT_BYTES);
    let mut text = String::from_utf8_lossy(&line[..cut])
        .trim_end_matches(['\n', '\r'])
        .escape_debug()
        .to_string();
    if cut < line.len() {
        text.push_str("...");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn malformed(line: &[u8]) -> String {
        match parse_reply(line) {
            Err(e @ QmpError::Malformed { .. }) => {
                let text = e.to_string();
                assert!(!text.contains('\n'), "{text}");
                text
            }
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(line)),
        }
    }

    #[test]
    fn greeting() {
        let line = br#"{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": "Debian"}, "capabilities": ["oob"]}}"#;
        let QmpReply::Greeting(g) = parse_reply(line).unwrap() else {
            panic!()
        };
        assert_eq!(g["version"]["qemu"]["major"], 7);
        assert_eq!(g["capabilities"], json!(["oob"]));
    }

    #[test]
    fn return_with_and_without_id() {
        assert_eq!(
            parse_reply(
                b"{\"return\": {\"status\": \"prelaunch\", \"running\": false}, \"id\": 3}\r\n"
            )
            .unwrap(),
            QmpReply::Return {
                id: Some(json!(3)),
                value: json!({"status": "prelaunch", "running": false})
            }
        );
        assert_eq!(
            parse_reply(br#"{"return": {}}"#).unwrap(),
            QmpReply::Return {
                id: None,
                value: json!({})
            }
        );
    }

    #[test]
    fn error() {
        assert_eq!(
            parse_reply(br#"{"id": "x", "error": {"class": "CommandNotFound", "desc": "The command nope has not been found"}}"#).unwrap(),
            QmpReply::Error {
                id: Some(json!("x")),
                class: "CommandNotFound".into(),
                desc: "The command nope has not been found".into()
            }
        );
        assert!(malformed(br#"{"error": {"class": 1, "desc": "d"}}"#)
            .contains("error class is a JSON number"));
        assert!(malformed(br#"{"error": {"class": "C"}}"#).contains("error without desc"));
        assert!(malformed(br#"{"error": "boom"}"#).contains("error member is a JSON string"));
    }

    #[test]
    fn event() {
        assert_eq!(
            parse_reply(br#"{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "MIGRATION", "data": {"status": "setup"}}"#).unwrap(),
            QmpReply::Event(QmpEvent {
                name: "MIGRATION".into(),
                data: json!({"status": "setup"})
            })
        );
        assert_eq!(
            parse_reply(br#"{"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 2}}"#)
                .unwrap(),
            QmpReply::Event(QmpEvent {
                name: "STOP".into(),
                data: Value::Null
            })
        );
        assert!(malformed(br#"{"event": 5}"#).contains("event name is a JSON number"));
    }

    #[test]
    fn garbage_and_non_objects_are_refused_with_an_excerpt() {
        let e = malformed(b"hello world\n");
        assert!(e.contains("not JSON") && e.contains("'hello world'"), "{e}");
        assert!(malformed(b"").contains("empty line"));
        assert!(malformed(b"  \r\n").contains("empty line"));
        assert!(malformed(b"[1,2]").contains("JSON array where an object"));
        assert!(malformed(b"42").contains("JSON number"));
        assert!(malformed(b"\"s\"").contains("JSON string"));
        assert!(malformed(b"null").contains("JSON null"));
        let e = malformed(br#"{"a": 1, "b\n": 2}"#);
        assert!(e.contains("members: 'a', 'b\\n'"), "{e}");
        assert!(malformed(b"{}").contains("members: none"));
        assert!(malformed(b"{\"return\": 1} {\"return\": 2}").contains("not JSON"));
        let e = malformed(b"\xff\xfe{\n\x01");
        assert!(e.contains("not JSON"), "{e}");
        let long = vec![b'x'; 1000];
        let e = malformed(&long);
        assert!(e.contains(&format!("{}...", "x".repeat(80))), "{e}");
        let mut deep = vec![b'['; 100_000];
        deep.extend(vec![b']'; 100_000]);
        assert!(malformed(&deep).contains("recursion limit"));
    }

    #[test]
    fn lines_over_the_limit_are_refused() {
        let mut line = br#"{"return": ""#.to_vec();
        line.resize(MAX_LINE_BYTES + 10, b'a');
        line.extend(br#""}"#);
        assert!(malformed(&line).contains("over the 1048576-byte limit"));
    }
}
