//! Byte strings in serialized aggregate states.
//!
//! serde serializes a Vec<u8> as a sequence of numbers, one call per byte; a CBOR byte
//! string is one copy. Partial aggregations ship megabytes of these (a dense quantile
//! histogram, the items of a large selection state).

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// A serialized state's CBOR, packed, with enums as [variant, value]: fields and variants
/// by index, not by name (a parallel plan's leader decodes one state per group and
/// worker; names made every decode match strings; serde_cbor's packed form alone still
/// names newtype variants). serde_cbor reads every form.
pub fn to_cbor<T: Serialize>(state: &T) -> Vec<u8> {
    let mut bytes = Vec::new();
    let writer = serde_cbor::ser::IoWrite::new(&mut bytes);
    let mut serializer = serde_cbor::Serializer::new(writer)
        .packed_format()
        .legacy_enums();
    state
        .serialize(&mut serializer)
        .expect("the state serializes");
    bytes
}

/// Bytes that serialize as one byte string.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bytes(pub Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BytesVisitor;

        impl<'de> Visitor<'de> for BytesVisitor {
            type Value = Bytes;

            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a byte string")
            }

            fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Bytes, E> {
                Ok(Bytes(bytes.to_vec()))
            }

            fn visit_byte_buf<E: de::Error>(self, bytes: Vec<u8>) -> Result<Bytes, E> {
                Ok(Bytes(bytes))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut sequence: A) -> Result<Bytes, A::Error> {
                let mut bytes = Vec::new();
                while let Some(byte) = sequence.next_element()? {
                    bytes.push(byte);
                }
                Ok(Bytes(bytes))
            }
        }

        deserializer.deserialize_byte_buf(BytesVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_states_name_no_field() {
        // The shapes the states hold: a newtype variant (ValueGrid::Float(Grid)), a
        // struct variant, unit variants (ValueType), options and lists.
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Bounds {
            lo: i64,
            hi: f64,
        }
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        enum Grid {
            Floating(Bounds),
            Whole { step: u64 },
        }
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        enum Kind {
            Real,
            Integral,
        }
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct State {
            parameters: Grid,
            kind: Kind,
            delta: Option<f64>,
            alphas: Vec<f64>,
            counts: Bytes,
        }
        let states = [
            State {
                parameters: Grid::Floating(Bounds { lo: -3, hi: 1.5 }),
                kind: Kind::Integral,
                delta: None,
                alphas: vec![0.5, 0.9],
                counts: Bytes(vec![1, 2, 3]),
            },
            State {
                parameters: Grid::Whole { step: 7 },
                kind: Kind::Real,
                delta: Some(1e-6),
                alphas: vec![],
                counts: Bytes(vec![]),
            },
        ];
        for state in states {
            let packed = to_cbor(&state);
            let named = serde_cbor::to_vec(&state).unwrap();
            assert!(packed.len() < named.len());
            let names = [
                "parameters",
                "kind",
                "delta",
                "alphas",
                "counts",
                "lo",
                "step",
            ];
            let variants = ["Floating", "Whole", "Real", "Integral"];
            for name in names.iter().chain(&variants) {
                let found = |bytes: &[u8]| bytes.windows(name.len()).any(|w| w == name.as_bytes());
                assert!(!found(&packed), "{name} in {packed:?}");
            }
            assert_eq!(serde_cbor::from_slice::<State>(&packed).unwrap(), state);
        }
    }

    #[test]
    fn bytes_round_trip_as_one_byte_string() {
        let bytes = Bytes((0..=255).collect());
        let encoded = serde_cbor::to_vec(&bytes).unwrap();
        assert_eq!(
            encoded.len(),
            256 + 3,
            "a byte string: header and the bytes"
        );
        assert_eq!(serde_cbor::from_slice::<Bytes>(&encoded).unwrap(), bytes);
    }
}
