//! The shared secret both pagers hold, and its key file.

use std::fmt;
use std::fs::{File, OpenOptions, Permissions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::migration_error::MigrationError;

/// The shortest key accepted, in bytes.
pub const MIN_KEY_LEN: usize = 32;
/// The longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 4096;
/// Random bytes in a key made by [`MigrationKey::generate`].
const GENERATED_KEY_BYTES: usize = 32;

/// The secret shared by the source and destination pagers. Both ends must hold the same bytes;
/// the handshake proves that without sending them. `Debug` shows only the length, and the
/// bytes are overwritten with zeros when the key is dropped.
#[derive(Clone)]
pub struct MigrationKey {
    bytes: Vec<u8>,
}

impl MigrationKey {
    /// Reads a key file. The file's raw bytes are the key, all of them: a trailing newline is
    /// part of the key, so a copy that gains or loses one (an editor, `echo` vs `printf`) is a
    /// different key and the handshake fails with [`MigrationError::KeyMismatch`]. Copy key
    /// files byte for byte (`scp`, `install -m 600`).
    ///
    /// The file is opened with `O_NOFOLLOW` (a symbolic link as the last path component is
    /// refused; directories on the way are trusted) and must be a regular file owned by the
    /// effective uid of the caller or by root, with no group or other permission bits
    /// (`mode & 0o077 == 0`), and [`MIN_KEY_LEN`] to [`MAX_KEY_LEN`] bytes long.
    pub fn load(path: &Path) -> Result<Self, MigrationError> {
        let problem = |problem: String| MigrationError::KeyFile {
            path: path.to_path_buf(),
            problem,
        };
        let io_error = |action: &'static str, source: std::io::Error| MigrationError::KeyFileIo {
            path: path.to_path_buf(),
            action,
            source,
        };
        // O_NONBLOCK: opening a FIFO planted at the path must not hang; it is refused below.
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(|source| {
                if source.raw_os_error() == Some(libc::ELOOP) {
                    problem("is a symbolic link; refusing to follow it (name the real file)".into())
                } else {
                    io_error("open it", source)
                }
            })?;
        let metadata = file
            .metadata()
            .map_err(|source| io_error("stat it", source))?;
        let file_type = metadata.file_type();
        if !file_type.is_file() {
            let kind = if file_type.is_dir() {
                "a directory"
            } else if file_type.is_fifo() {
                "a FIFO"
            } else if file_type.is_socket() {
                "a socket"
            } else if file_type.is_block_device() || file_type.is_char_device() {
                "a device"
            } else {
                "not a file"
            };
            return Err(problem(format!("is not a regular file (it is {kind})")));
        }
        let owner = metadata.uid();
        let us = effective_uid();
        if owner != us && owner != 0 {
            return Err(problem(format!(
                "is owned by uid {owner}, not by us (uid {us}) or root; refusing a key another \
                 user controls"
            )));
        }
        let mode = metadata.mode() & 0o7777;
        if mode & 0o044 != 0 {
            return Err(problem(format!(
                "is readable by group or others (mode {mode:04o}); chmod 600 it"
            )));
        }
        if mode & 0o077 != 0 {
            return Err(problem(format!(
                "is writable or executable by group or others (mode {mode:04o}); chmod 600 it"
            )));
        }
        check_file_len(metadata.len()).map_err(problem)?;
        let mut bytes = Vec::with_capacity(metadata.len() as usize);
        (&file)
            .take(MAX_KEY_LEN as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| io_error("read it", source))?;
        // The file may have changed between fstat and read.
        if let Err(text) = check_file_len(bytes.len() as u64) {
            wipe(&mut bytes);
            return Err(problem(text));
        }
        Ok(MigrationKey { bytes })
    }

    /// A key from bytes held elsewhere; [`MIN_KEY_LEN`] to [`MAX_KEY_LEN`] bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, MigrationError> {
        if !(MIN_KEY_LEN..=MAX_KEY_LEN).contains(&bytes.len()) {
            return Err(MigrationError::KeyLength {
                len: bytes.len(),
                min: MIN_KEY_LEN,
                max: MAX_KEY_LEN,
            });
        }
        Ok(MigrationKey {
            bytes: bytes.to_vec(),
        })
    }

    /// Creates a new key file from 32 random bytes, written as 64 lowercase hex digits and a
    /// newline (65 bytes; all of them, newline included, are the key, as [`MigrationKey::load`]
    /// reads them). The file is created with `O_CREAT | O_EXCL | O_NOFOLLOW` and mode 0600: an
    /// existing path, including a symbolic link, is refused. Returns the key as written.
    pub fn generate(path: &Path) -> Result<Self, MigrationError> {
        let mut random = [0u8; GENERATED_KEY_BYTES];
        getrandom::fill(&mut random).map_err(|error| MigrationError::Random(error.to_string()))?;
        let mut text = Vec::with_capacity(GENERATED_KEY_BYTES * 2 + 1);
        for byte in random {
            text.extend_from_slice(format!("{byte:02x}").as_bytes());
        }
        text.push(b'\n');
        wipe(&mut random);
        let result = write_new_key_file(path, &text).and_then(|()| Self::from_bytes(&text));
        wipe(&mut text);
        result
    }

    /// The key's length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: a key has at least [`MIN_KEY_LEN`] bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The secret bytes, for the handshake's key derivation.
    pub(crate) fn secret(&self) -> &[u8] {
        &self.bytes
    }
}

impl fmt::Debug for MigrationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MigrationKey(<{} secret bytes>)", self.bytes.len())
    }
}

impl Drop for MigrationKey {
    fn drop(&mut self) {
        wipe(&mut self.bytes);
    }
}

/// Creates `path` exclusively with mode 0600 and writes `text` to it; removes it again if the
/// write fails.
fn write_new_key_file(path: &Path, text: &[u8]) -> Result<(), MigrationError> {
    let io_error = |action: &'static str, source: std::io::Error| MigrationError::KeyFileIo {
        path: path.to_path_buf(),
        action,
        source,
    };
    let mut file: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| {
            if source.kind() == ErrorKind::AlreadyExists {
                MigrationError::KeyFile {
                    path: path.to_path_buf(),
                    problem: "already exists; refusing to overwrite it".into(),
                }
            } else {
                io_error("create it", source)
            }
        })?;
    let written = file
        .set_permissions(Permissions::from_mode(0o600))
        .map_err(|source| io_error("chmod it to 0600", source))
        .and_then(|()| {
            file.write_all(text)
                .and_then(|()| file.sync_all())
                .map_err(|source| io_error("write it", source))
        });
    if written.is_err() {
        let _ = std::fs::remove_file(path);
    }
    written
}

/// `Ok` if a key file of `len` bytes has an acceptable size, else the problem.
fn check_file_len(len: u64) -> Result<(), String> {
    if len < MIN_KEY_LEN as u64 || len > MAX_KEY_LEN as u64 {
        return Err(format!(
            "is {len} bytes long; a migration key file must hold {MIN_KEY_LEN} to {MAX_KEY_LEN} \
             bytes (create one with 32 random bytes, e.g. memvisor's key generation)"
        ));
    }
    Ok(())
}

/// The caller's effective uid.
fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions, touches no memory of ours and cannot fail.
    unsafe { libc::geteuid() }
}

/// Overwrites secret bytes with zeros (best effort: `black_box` keeps the stores).
fn wipe(bytes: &mut [u8]) {
    for byte in bytes.iter_mut() {
        *byte = 0;
    }
    std::hint::black_box(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn write_key(path: &Path, bytes: &[u8], mode: u32) {
        std::fs::write(path, bytes).unwrap();
        std::fs::set_permissions(path, Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn loads_a_private_key_file_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        let bytes = b"0123456789abcdef0123456789abcdef\n";
        write_key(&path, bytes, 0o600);
        let key = MigrationKey::load(&path).unwrap();
        assert_eq!(
            key.secret(),
            bytes,
            "the trailing newline is part of the key"
        );
        assert_eq!(key.len(), 33);
    }

    #[test]
    fn refuses_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        write_key(&real, &[7; 40], 0o600);
        let link = dir.path().join("link");
        symlink(&real, &link).unwrap();
        let error = MigrationKey::load(&link).unwrap_err().to_string();
        assert!(error.contains("is a symbolic link"), "{error}");
        assert!(error.contains(&link.display().to_string()), "{error}");
    }

    #[test]
    fn refuses_group_or_other_bits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        write_key(&path, &[7; 40], 0o644);
        let error = MigrationKey::load(&path).unwrap_err().to_string();
        assert_eq!(
            error,
            format!(
                "key file {} is readable by group or others (mode 0644); chmod 600 it",
                path.display()
            )
        );
        write_key(&path, &[7; 40], 0o620);
        let error = MigrationKey::load(&path).unwrap_err().to_string();
        assert!(error.contains("writable or executable by group or others (mode 0620)"));
    }

    #[test]
    fn refuses_a_file_owned_by_another_user() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        write_key(&path, &[7; 40], 0o600);
        if effective_uid() != 0 {
            // Only root can give a file away; owned by us it loads.
            assert!(MigrationKey::load(&path).is_ok());
            return;
        }
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let error = MigrationKey::load(&path).unwrap_err().to_string();
        assert!(
            error.contains("is owned by uid 65534, not by us (uid 0) or root"),
            "{error}"
        );
    }

    #[test]
    fn refuses_short_long_and_non_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        write_key(&path, &[7; 31], 0o600);
        let error = MigrationKey::load(&path).unwrap_err().to_string();
        assert!(error.contains("is 31 bytes long"), "{error}");
        write_key(&path, &vec![7; MAX_KEY_LEN + 1], 0o600);
        let error = MigrationKey::load(&path).unwrap_err().to_string();
        assert!(error.contains("is 4097 bytes long"), "{error}");
        write_key(&path, &vec![7; MAX_KEY_LEN], 0o600);
        assert_eq!(MigrationKey::load(&path).unwrap().len(), MAX_KEY_LEN);

        let error = MigrationKey::load(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("is not a regular file (it is a directory)"),
            "{error}"
        );
        let missing = dir.path().join("missing");
        let error = MigrationKey::load(&missing).unwrap_err().to_string();
        assert!(error.contains("cannot open it"), "{error}");
    }

    #[test]
    fn from_bytes_checks_length() {
        assert!(MigrationKey::from_bytes(&[1; 32]).is_ok());
        let error = MigrationKey::from_bytes(&[1; 5]).unwrap_err().to_string();
        assert_eq!(
            error,
            "a migration key must be 32 to 4096 bytes long, got 5 bytes"
        );
        assert!(MigrationKey::from_bytes(&vec![1; 4097]).is_err());
    }

    #[test]
    fn debug_hides_the_secret() {
        let key = MigrationKey::from_bytes(b"supersecretsupersecretsupersecret").unwrap();
        let shown = format!("{key:?}");
        assert_eq!(shown, "MigrationKey(<33 secret bytes>)");
    }

    #[test]
    fn generate_makes_a_private_file_and_refuses_existing_paths() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.key");
        let key = MigrationKey::generate(&path).unwrap();
        let metadata = std::fs::metadata(&path).unwrap();
        assert_eq!(metadata.mode() & 0o7777, 0o600);
        assert_eq!(metadata.len(), 65);
        let loaded = MigrationKey::load(&path).unwrap();
        assert_eq!(loaded.secret(), key.secret());
        let text = std::str::from_utf8(key.secret()).unwrap();
        assert!(text.ends_with('\n'));
        assert!(text.trim_end().chars().all(|c| c.is_ascii_hexdigit()));

        let other = MigrationKey::generate(&dir.path().join("other.key")).unwrap();
        assert_ne!(other.secret(), key.secret());

        let error = MigrationKey::generate(&path).unwrap_err().to_string();
        assert!(
            error.contains("already exists; refusing to overwrite it"),
            "{error}"
        );
        assert_eq!(std::fs::read(&path).unwrap(), key.secret(), "untouched");

        let link = dir.path().join("dangling");
        symlink(dir.path().join("target"), &link).unwrap();
        assert!(MigrationKey::generate(&link).is_err());
        assert!(!dir.path().join("target").exists());
    }
}
