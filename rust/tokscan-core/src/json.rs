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

/// Writes `text` pretty-printed to `path` (with a final newline).
pub fn write_pretty(path: &Path, text: &str) -> Result<()> {
    let file = std::fs::File::create(path).map_err(|e| Error::io(path, e))?;
    let mut w = BufWriter::new(file);
    pretty_to(text, &mut w).map_err(|e| {
        if e.is_io() {
            Error::io(path, std::io::Error::other(e.to_string()))
        } else {
            Error::Usage(format!("not a JSON document: {e}"))
        }
    })?;
    w.write_all(b"\n")
        .and_then(|()| w.flush())
        .map_err(|e| Error::io(path, e))
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
