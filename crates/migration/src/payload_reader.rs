//! A bounds-checked cursor over a message payload.

use crate::migration_error::MigrationError;

/// Reads little-endian fields from a payload, failing with [`MigrationError::Malformed`] that
/// names the message, the field, the byte offset and the lengths instead of running past the end.
pub(crate) struct PayloadReader<'a> {
    message: &'static str,
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> PayloadReader<'a> {
    /// A reader at the start of `bytes`, the payload of a `message` message.
    pub(crate) fn new(message: &'static str, bytes: &'a [u8]) -> Self {
        PayloadReader {
            message,
            bytes,
            offset: 0,
        }
    }

    /// The byte offset of the next field.
    pub(crate) fn offset(&self) -> usize {
        self.offset
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.offset
    }

    /// A [`MigrationError::Malformed`] for this message.
    pub(crate) fn malformed(&self, problem: String) -> MigrationError {
        MigrationError::Malformed {
            message: self.message,
            problem,
        }
    }

    /// The next `len` bytes, the field `field`.
    pub(crate) fn take(&mut self, len: usize, field: &str) -> Result<&'a [u8], MigrationError> {
        if len > self.remaining() {
            return Err(self.malformed(format!(
                "{field} needs {len} bytes at byte offset {}, but the {}-byte payload has only {} \
                 left",
                self.offset,
                self.bytes.len(),
                self.remaining()
            )));
        }
        let field_bytes = &self.bytes[self.offset..self.offset + len];
        self.offset += len;
        Ok(field_bytes)
    }

    /// The next `N` bytes as an array.
    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N], MigrationError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N, field)?);
        Ok(array)
    }

    /// A little-endian u16.
    pub(crate) fn u16(&mut self, field: &str) -> Result<u16, MigrationError> {
        self.array(field).map(u16::from_le_bytes)
    }

    /// A little-endian u32.
    pub(crate) fn u32(&mut self, field: &str) -> Result<u32, MigrationError> {
        self.array(field).map(u32::from_le_bytes)
    }

    /// A little-endian u64.
    pub(crate) fn u64(&mut self, field: &str) -> Result<u64, MigrationError> {
        self.array(field).map(u64::from_le_bytes)
    }

    /// A string: a u16 byte length of at most `max`, then that many bytes of UTF-8.
    pub(crate) fn string(&mut self, max: usize, field: &str) -> Result<String, MigrationError> {
        let length_offset = self.offset;
        let len = usize::from(self.u16(&format!("{field} length"))?);
        if len > max {
            return Err(self.malformed(format!(
                "{field} is {len} bytes long (length at byte offset {length_offset}), over the \
                 {max}-byte limit"
            )));
        }
        let start = self.offset;
        let bytes = self.take(len, field)?;
        match std::str::from_utf8(bytes) {
            Ok(text) => Ok(text.to_string()),
            Err(error) => Err(self.malformed(format!(
                "{field} is not valid UTF-8 (bad byte at byte offset {})",
                start + error.valid_up_to()
            ))),
        }
    }

    /// Checks that the whole payload was read.
    pub(crate) fn finish(self) -> Result<(), MigrationError> {
        if self.remaining() != 0 {
            return Err(self.malformed(format!(
                "{} trailing bytes after the message's fields (at byte offset {} of a {}-byte \
                 payload)",
                self.remaining(),
                self.offset,
                self.bytes.len()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fields_and_names_offsets_on_failure() {
        let bytes = [1, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 9];
        let mut reader = PayloadReader::new("Test", &bytes);
        assert_eq!(reader.u16("a").unwrap(), 1);
        assert_eq!(reader.u32("b").unwrap(), 2);
        assert_eq!(reader.u64("c").unwrap(), 3);
        assert_eq!(reader.offset(), 14);
        let error = reader.u32("d").unwrap_err().to_string();
        assert_eq!(
            error,
            "malformed Test message: d needs 4 bytes at byte offset 14, but the 15-byte payload \
             has only 1 left"
        );
        let error = reader.finish().unwrap_err().to_string();
        assert!(error.contains("1 trailing bytes"), "{error}");
    }

    #[test]
    fn strings_are_bounded_and_utf8() {
        let mut reader = PayloadReader::new("Test", &[3, 0, b'a', b'b', b'c']);
        assert_eq!(reader.string(3, "name").unwrap(), "abc");
        reader.finish().unwrap();
        let mut reader = PayloadReader::new("Test", &[3, 0, b'a', b'b', b'c']);
        let error = reader.string(2, "name").unwrap_err().to_string();
        assert!(error.contains("name is 3 bytes long"), "{error}");
        let mut reader = PayloadReader::new("Test", &[2, 0, b'a', 0xff]);
        let error = reader.string(8, "name").unwrap_err().to_string();
        assert!(
            error.contains("not valid UTF-8 (bad byte at byte offset 3)"),
            "{error}"
        );
        let mut reader = PayloadReader::new("Test", &[0xff, 0xff, b'a']);
        assert!(reader.string(usize::MAX, "name").is_err());
    }
}
