//! A sample's id as its column stores it: an integer column's ids stay integers (in the JSON report, in
//! `Corpus.sample`, in the exclusion list), every other column's are text. Looking an id up accepts either
//! spelling of an integer id, so `show --sample-id 100017` finds the row of an `int64` column.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// In JSON a number or a string; in the binary partials (postcard, which cannot guess a type) a tagged enum.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SampleId {
    Int(i64),
    Text(Box<str>),
}

impl SampleId {
    pub fn text(s: impl Into<Box<str>>) -> SampleId {
        SampleId::Text(s.into())
    }

    /// Whether `query` names this id: the same value, or an integer id and its decimal text.
    pub fn matches(&self, query: &SampleId) -> bool {
        match (self, query) {
            (SampleId::Int(a), SampleId::Int(b)) => a == b,
            (SampleId::Text(a), SampleId::Text(b)) => a == b,
            (SampleId::Int(n), SampleId::Text(t)) | (SampleId::Text(t), SampleId::Int(n)) => {
                t.trim().parse::<i64>() == Ok(*n)
            }
        }
    }

    /// The id as text (an integer in decimal), for keys shared with text ids such as a prompts file's.
    pub fn key(&self) -> Cow<'_, str> {
        match self {
            SampleId::Int(n) => Cow::Owned(n.to_string()),
            SampleId::Text(t) => Cow::Borrowed(t),
        }
    }

    /// A 64-bit hash that equal ids share (for routing ids to buckets), without formatting an integer.
    pub fn hash64(&self) -> u64 {
        match self {
            SampleId::Int(n) => xxhash_rust::xxh3::xxh3_64(&n.to_le_bytes()),
            SampleId::Text(t) => xxhash_rust::xxh3::xxh3_64(t.as_bytes()),
        }
    }

    /// Bytes held on the heap (for memory budgets).
    pub fn heap_size(&self) -> usize {
        match self {
            SampleId::Int(_) => 0,
            SampleId::Text(t) => t.len(),
        }
    }
}

#[derive(Serialize, Deserialize)]
enum Tagged<'a> {
    Int(i64),
    Text(std::borrow::Cow<'a, str>),
}

impl Serialize for SampleId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match (self, s.is_human_readable()) {
            (SampleId::Int(n), true) => s.serialize_i64(*n),
            (SampleId::Text(t), true) => s.serialize_str(t),
            (SampleId::Int(n), false) => Tagged::Int(*n).serialize(s),
            (SampleId::Text(t), false) => Tagged::Text(Cow::Borrowed(t)).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for SampleId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SampleId, D::Error> {
        if !d.is_human_readable() {
            return Ok(match Tagged::deserialize(d)? {
                Tagged::Int(n) => SampleId::Int(n),
                Tagged::Text(t) => SampleId::Text(t.into()),
            });
        }
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = SampleId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sample id (an integer or a string)")
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<SampleId, E> {
                Ok(SampleId::Int(n))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<SampleId, E> {
                Ok(i64::try_from(n).map_or_else(|_| SampleId::text(n.to_string()), SampleId::Int))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<SampleId, E> {
                Ok(SampleId::from(s))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl fmt::Display for SampleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SampleId::Int(n) => write!(f, "{n}"),
            SampleId::Text(t) => f.write_str(t),
        }
    }
}

impl From<&str> for SampleId {
    fn from(s: &str) -> SampleId {
        SampleId::Text(s.into())
    }
}

impl From<String> for SampleId {
    fn from(s: String) -> SampleId {
        SampleId::Text(s.into())
    }
}

impl From<i64> for SampleId {
    fn from(n: i64) -> SampleId {
        SampleId::Int(n)
    }
}

#[cfg(test)]
mod tests {
    use super::SampleId;

    #[test]
    fn json_keeps_the_type() {
        let ids = vec![
            Some(SampleId::Int(100017)),
            Some(SampleId::text("a-1")),
            None,
        ];
        let json = serde_json::to_string(&ids).unwrap();
        assert_eq!(json, r#"[100017,"a-1",null]"#);
        let back: Vec<Option<SampleId>> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, ids);
        // A report written before ids kept their type reads as text.
        let old: SampleId = serde_json::from_str(r#""100017""#).unwrap();
        assert_eq!(old, SampleId::text("100017"));
    }

    #[test]
    fn the_binary_partials_keep_the_type() {
        let ids = vec![Some(SampleId::Int(-3)), Some(SampleId::text("7")), None];
        let bytes = postcard::to_allocvec(&ids).unwrap();
        let back: Vec<Option<SampleId>> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, ids);
    }

    #[test]
    fn an_integer_id_is_found_by_either_spelling() {
        let id = SampleId::Int(100017);
        assert!(id.matches(&SampleId::Int(100017)));
        assert!(id.matches(&SampleId::text("100017")));
        assert!(SampleId::text("100017").matches(&id));
        assert!(!id.matches(&SampleId::text("100018")));
        assert!(!SampleId::text("x").matches(&SampleId::text("y")));
        assert_eq!(id.to_string(), "100017");
    }
}
