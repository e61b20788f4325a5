//! Files tokscan reads whole (a prompts file, a benchmark, a profile, a tokenizer's JSON, a Megatron index):
//! each is checked to be a regular file before a byte is read — a FIFO would block the read forever and
//! `/dev/zero` would fill memory — and its size is bounded (`TOKSCAN_MAX_FILE_BYTES`, default 4 GiB).
//! A file that is not one is an input error naming it.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

/// The environment variable that sets the largest file read whole, in bytes.
pub const MAX_FILE_BYTES_VAR: &str = "TOKSCAN_MAX_FILE_BYTES";
/// Default largest file read whole: 4 GiB (a tokenizer's JSON is ~10 MB, a prompts file of a million
/// conversations a few GB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 4 << 30;

/// The largest file read whole, from [`MAX_FILE_BYTES_VAR`] or the default.
pub fn max_bytes() -> Result<u64> {
    Ok(crate::settings::bytes(MAX_FILE_BYTES_VAR)?.unwrap_or(DEFAULT_MAX_FILE_BYTES))
}

/// What a file that is not a regular file is, for the error.
fn kind(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// `path` opened for reading once it is known to be a regular file, with its size. The open does not block
/// (`O_NONBLOCK`: opening a FIFO for reading would wait for a writer forever); the check is on the opened
/// file, so nothing can be swapped in between.
pub fn open(path: &Path) -> Result<(File, u64)> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let f = options.open(path).map_err(|e| Error::io(path, e))?;
    let meta = f.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(Error::invalid(
            path,
            format!("{}, not a regular file", kind(meta.file_type())),
        ));
    }
    Ok((f, meta.len()))
}

/// The bytes of the regular file `path`, at most [`max_bytes`] of them (a larger file is an input error
/// naming it and the variable).
pub fn read(path: &Path) -> Result<Vec<u8>> {
    read_within(path, max_bytes()?)
}

/// [`read`] with the limit given.
fn read_within(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let (f, len) = open(path)?;
    let too_large = |size: String| {
        Error::invalid(
            path,
            format!(
                "{size}, larger than the {limit} bytes tokscan reads whole ({MAX_FILE_BYTES_VAR}=N raises the limit)"
            ),
        )
    };
    if len > limit {
        return Err(too_large(format!("{len} bytes")));
    }
    // The size said is no bound (a file of /proc says 0, a file may grow): at most one byte past the limit.
    let mut bytes = Vec::with_capacity(len as usize);
    f.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(too_large(format!(
            "more than {limit} bytes read (its size said {len})"
        )));
    }
    Ok(bytes)
}

/// The text of the regular file `path` (see [`read`]); bytes that are not UTF-8 are an input error naming the
/// offset.
pub fn read_to_string(path: &Path) -> Result<String> {
    String::from_utf8(read(path)?).map_err(|e| {
        Error::invalid(
            path,
            format!("not UTF-8 text (at byte {})", e.utf8_error().valid_up_to()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_read_and_anything_else_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "text").unwrap();
        assert_eq!(read_to_string(&file).unwrap(), "text");

        let err = read(dir.path()).expect_err("a directory").to_string();
        assert!(err.contains("a directory, not a regular file"), "{err}");
        let missing = dir.path().join("missing");
        assert!(matches!(read(&missing), Err(Error::NotFound { .. })));

        let bad = dir.path().join("bad.txt");
        std::fs::write(&bad, b"ok\xff").unwrap();
        let err = read_to_string(&bad).expect_err("not UTF-8").to_string();
        assert!(
            err.contains("bad.txt") && err.contains("not UTF-8 text (at byte 2)"),
            "{err}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_and_dev_zero_are_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.jsonl");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer ever opens it: a blocking open or read would hang the test.
        let err = read(&fifo).expect_err("a FIFO").to_string();
        assert!(
            err.contains("pipe.jsonl") && err.contains("a FIFO (named pipe), not a regular file"),
            "{err}"
        );
        let err = read(Path::new("/dev/zero"))
            .expect_err("a device")
            .to_string();
        assert!(
            err.contains("/dev/zero: a character device, not a regular file"),
            "{err}"
        );
    }

    #[test]
    fn a_file_past_the_limit_is_refused_naming_the_variable() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.json");
        std::fs::write(&file, vec![b' '; 64]).unwrap();
        assert_eq!(read_within(&file, 64).unwrap().len(), 64);
        let err = read_within(&file, 63).expect_err("too large").to_string();
        assert!(
            err.contains("big.json: 64 bytes, larger than the 63 bytes tokscan reads whole (TOKSCAN_MAX_FILE_BYTES=N"),
            "{err}"
        );
        // A file whose size says nothing (a file of /proc says 0) is still read only to the limit.
        let err = read_within(Path::new("/proc/self/maps"), 8)
            .expect_err("past the limit")
            .to_string();
        assert!(
            err.contains("more than 8 bytes read (its size said 0)"),
            "{err}"
        );
    }
}
