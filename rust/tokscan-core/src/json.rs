//! The report's JSON on disk: pretty-printed by the core, streaming (no intermediate tree, key order kept),
//! so a CLI run never re-encodes a large report in Python.

use std::io::{BufWriter, Write};
use std::path::Path;

use crate::error::{Error, Result};

/// Re-indents the JSON document `text` (two spaces, keys in their original order) into `out`.
pub fn pretty_to(text: &str, out: impl Write) -> std::result::Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut ser = serde_json::Serializer::pretty(out);
    serde_transcode::transcode(&mut de, &mut ser)?;
    de.end()
}

/// `text` pretty-printed.
pub fn pretty(text: &str) -> Result<String> {
    let mut out = Vec::with_capacity(text.len() + text.len() / 2);
    pretty_to(text, &mut out).map_err(|e| Error::Usage(format!("not a JSON document: {e}")))?;
    Ok(String::from_utf8(out).expect("serde_json writes UTF-8"))
}

/// A writer that remembers its first I/O error: serde_transcode reports a failed write as a serialization
/// error, which must not read as "not a JSON document".
struct Tracked<W> {
    inner: W,
    err: Option<std::io::Error>,
}

impl<W: Write> Write for Tracked<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf).inspect_err(|e| {
            self.err
                .get_or_insert_with(|| std::io::Error::new(e.kind(), e.to_string()));
        })
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes `text` pretty-printed to `path` (with a final newline). A failed write (a full disk) is an error
/// naming the file, and a regular file left half-written is removed.
pub fn write_pretty(path: &Path, text: &str) -> Result<()> {
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = Tracked {
        inner: BufWriter::new(file),
        err: None,
    };
    let done = match pretty_to(text, &mut w) {
        Ok(()) => w.write_all(b"\n").and_then(|()| w.flush()),
        Err(e) => match w.err.take() {
            Some(io) => Err(io),
            None if e.is_io() => Err(std::io::Error::other(e.to_string())),
            None => {
                remove_partial(path);
                return Err(Error::Usage(format!("not a JSON document: {e}")));
            }
        },
    };
    done.map_err(|e| {
        remove_partial(path);
        Error::io(path, e)
    })
}

/// Removes a half-written output when it is a regular file (never a device such as `/dev/full`).
fn remove_partial(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_key_order_and_values() {
        let text = r#"{"z":1,"a":[1,2,{"k":"é\n"}],"m":null,"f":0.5}"#;
        let p = pretty(text).unwrap();
        assert!(p.find("\"z\"").unwrap() < p.find("\"a\"").unwrap());
        let a: serde_json::Value = serde_json::from_str(text).unwrap();
        let b: serde_json::Value = serde_json::from_str(&p).unwrap();
        assert_eq!(a, b);
        assert!(p.contains("\n  \"a\": [\n"));
    }

    /// Floats survive the round trip bit for bit (serde_json's `float_roundtrip`): a report read back
    /// equals the one written.
    #[test]
    fn floats_round_trip_exactly() {
        for x in [
            56.650000000000006f64,
            0.1,
            1.0 / 3.0,
            1e-300,
            123456.789e10,
            2.2250738585072014e-308,
        ] {
            let text = serde_json::to_string(&x).unwrap();
            let back: f64 = serde_json::from_str(&pretty(&text).unwrap()).unwrap();
            assert_eq!(back.to_bits(), x.to_bits(), "{x}");
        }
    }

    #[test]
    fn rejects_trailing_garbage() {
        assert!(pretty("{} x").is_err());
        assert!(pretty("{").is_err());
    }
}
