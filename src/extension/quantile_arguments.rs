//! The arguments of dp_quantile and dp_quantiles as a call gives them, and their
//! validation into the parameters a state keeps: the alphas, ε, and the public grid
//! (fractional for float8 and numeric values, whole numbers for integer values).

use super::forms::ValueType;
use super::guc;
use super::items::array_elements;
use crate::error::Error;
use crate::mechanisms::quantile::{Grid, IntegerGrid, Reader};
use crate::parameters;
use pgrx::pg_sys::{self, Datum};
use serde::{Deserialize, Serialize};

/// The public grid of a quantile aggregate: fractional for float8 values, whole numbers
/// for integer values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum ValueGrid {
    Float(Grid),
    Integer(IntegerGrid),
}

impl ValueGrid {
    /// K: grid points 0..=K.
    pub(super) fn size(&self) -> u32 {
        match self {
            ValueGrid::Float(grid) => grid.size,
            ValueGrid::Integer(grid) => grid.size,
        }
    }
}

/// The parameters of one quantile aggregate, fixed by its first row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuantileParameters {
    pub(super) grid: ValueGrid,
    pub(super) value_type: ValueType,
    /// One alpha for dp_quantile, several for dp_quantiles.
    pub(super) alphas: QuantileAlphas,
    pub(super) epsilon: f64,
}

/// The value types in the order of their byte in a state's bytes (a match, so that a new
/// type cannot compile without its byte).
fn value_type_byte(value_type: ValueType) -> u8 {
    match value_type {
        ValueType::Float => 0,
        ValueType::Smallint => 1,
        ValueType::Integer => 2,
        ValueType::Bigint => 3,
        ValueType::Numeric => 4,
    }
}

const VALUE_TYPES: [ValueType; 5] = [
    ValueType::Float,
    ValueType::Smallint,
    ValueType::Integer,
    ValueType::Bigint,
    ValueType::Numeric,
];

impl QuantileParameters {
    /// The parameters as dp_quantile_serialize writes them, little-endian: the grid (0
    /// and lo, hi, K for a float grid; 1 and lo, hi, step, K for an integer one), the
    /// value type's byte, the number of alphas and each, epsilon. By hand, not CBOR: a
    /// parallel plan's leader reads one state per group and process, and decoding CBOR
    /// took a third of the deserialize function's time and a malloc for the alphas.
    pub(super) fn write_bytes(&self, bytes: &mut Vec<u8>) {
        match self.grid {
            ValueGrid::Float(grid) => {
                bytes.push(0);
                bytes.extend_from_slice(&grid.lo.to_le_bytes());
                bytes.extend_from_slice(&grid.hi.to_le_bytes());
                bytes.extend_from_slice(&grid.size.to_le_bytes());
            }
            ValueGrid::Integer(grid) => {
                bytes.push(1);
                bytes.extend_from_slice(&grid.lo.to_le_bytes());
                bytes.extend_from_slice(&grid.hi.to_le_bytes());
                bytes.extend_from_slice(&grid.step.to_le_bytes());
                bytes.extend_from_slice(&grid.size.to_le_bytes());
            }
        }
        bytes.push(value_type_byte(self.value_type));
        bytes.extend_from_slice(&(self.alphas.len() as u32).to_le_bytes());
        for alpha in self.alphas.iter() {
            bytes.extend_from_slice(&alpha.to_le_bytes());
        }
        bytes.extend_from_slice(&self.epsilon.to_le_bytes());
    }

    /// Parameters that [`QuantileParameters::write_bytes`] wrote. Panics on other bytes.
    pub(super) fn read_bytes(reader: &mut Reader) -> Self {
        let grid = match reader.u8() {
            0 => ValueGrid::Float(Grid {
                lo: reader.f64(),
                hi: reader.f64(),
                size: reader.u32(),
            }),
            1 => ValueGrid::Integer(IntegerGrid {
                lo: reader.u64() as i64,
                hi: reader.u64() as i64,
                step: reader.u64(),
                size: reader.u32(),
            }),
            tag => panic!("not the bytes of a quantile grid (tag {tag})"),
        };
        let value_type = match VALUE_TYPES.get(reader.u8() as usize) {
            Some(&value_type) => value_type,
            None => panic!("not the bytes of a quantile value type"),
        };
        let alphas = match reader.count(8) {
            1 => QuantileAlphas::One([reader.f64()]),
            n => (0..n).map(|_| reader.f64()).collect::<Vec<f64>>().into(),
        };
        QuantileParameters {
            grid,
            value_type,
            alphas,
            epsilon: reader.f64(),
        }
    }
}

/// The alphas of a state, kept in it when there is one (as in every dp_quantile), so that
/// a group's state allocates nothing outside the aggregate's memory context: a `Vec` took
/// a malloc a group that PostgreSQL did not see. In CBOR (the states of earlier versions,
/// still read) as a `Vec`. One alpha is always `One`, any other number `Many` (as
/// `From<Vec<f64>>` makes them), so that equal alphas are equal values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "Vec<f64>", into = "Vec<f64>")]
pub(super) enum QuantileAlphas {
    One([f64; 1]),
    Many(Vec<f64>),
}

impl From<Vec<f64>> for QuantileAlphas {
    fn from(alphas: Vec<f64>) -> Self {
        match alphas[..] {
            [alpha] => QuantileAlphas::One([alpha]),
            _ => QuantileAlphas::Many(alphas),
        }
    }
}

impl From<QuantileAlphas> for Vec<f64> {
    fn from(alphas: QuantileAlphas) -> Self {
        alphas.to_vec()
    }
}

impl std::ops::Deref for QuantileAlphas {
    type Target = [f64];

    fn deref(&self) -> &[f64] {
        match self {
            QuantileAlphas::One(alpha) => alpha,
            QuantileAlphas::Many(alphas) => alphas,
        }
    }
}

/// The alpha argument(s) of a call.
#[derive(Debug, Clone, Copy)]
pub(super) enum Alphas {
    One(Option<f64>),
    /// A float8[] (None: SQL NULL).
    Many(Option<Datum>),
}

/// lo and hi as the call gives them: double precision, or bigint for integer values.
#[derive(Debug, Clone, Copy)]
pub(super) enum Bounds {
    Float(Option<f64>, Option<f64>),
    Integer(Option<i64>, Option<i64>),
}

/// The parameters as one row (or the call) gives them, before validation.
#[derive(Debug, Clone, Copy)]
pub struct QuantileArguments {
    pub(super) value_type: ValueType,
    pub(super) alphas: Alphas,
    pub(super) bounds: Bounds,
    pub(super) epsilon: Option<f64>,
}

/// The elements of a float8[] (NULL elements as None).
///
/// # Safety
/// `array` must be a valid, non-NULL float8[] datum.
unsafe fn float_array(array: Datum) -> Vec<Option<f64>> {
    let alignment = pg_sys::TYPALIGN_DOUBLE as std::ffi::c_char;
    // SAFETY: a float8[] has 8-byte, by-value, double-aligned elements.
    unsafe { array_elements(array, pg_sys::FLOAT8OID, 8, true, alignment) }
        .into_iter()
        .map(|element| element.map(|d| f64::from_bits(d.value() as u64)))
        .collect()
}

impl QuantileArguments {
    pub(super) fn validate(&self) -> Result<QuantileParameters, Error> {
        let alphas = match self.alphas {
            Alphas::One(alpha) => QuantileAlphas::One([parameters::alpha(alpha)?]),
            Alphas::Many(array) => {
                // SAFETY: a non-NULL float8[] argument of the call (the aggregate's
                // signature says double precision[]).
                let values = array.map(|a| unsafe { float_array(a) });
                parameters::alphas(values.as_deref())?.into()
            }
        };
        let size = guc::quantile_grid_size();
        let grid = match (self.bounds, self.value_type.range()) {
            (Bounds::Integer(lo, hi), Some(range)) => {
                let type_name = self.value_type.sql_type();
                let (lo, hi) = parameters::integer_bounds(lo, hi, type_name, range)?;
                ValueGrid::Integer(IntegerGrid::new(lo, hi, size))
            }
            (Bounds::Float(lo, hi), _) => {
                let (lo, hi) = parameters::bounds(lo, hi)?;
                ValueGrid::Float(Grid { lo, hi, size })
            }
            (Bounds::Integer(..), None) => unreachable!("float values have float bounds"),
        };
        let epsilon = parameters::epsilon(self.epsilon)?;
        Ok(QuantileParameters {
            grid,
            value_type: self.value_type,
            alphas,
            epsilon,
        })
    }
}

#[cfg(test)]
mod alphas_tests {
    use super::QuantileAlphas;
    use crate::extension::serialization::to_cbor;

    /// One alpha is kept in the state; the serialized bytes are those of a `Vec`, both ways.
    #[test]
    fn alphas_serialize_as_a_vec_and_one_is_kept_inline() {
        for alphas in [vec![0.5], vec![0.1, 0.9], vec![0.25, 0.25, 0.75]] {
            let kept = QuantileAlphas::from(alphas.clone());
            assert_eq!(matches!(kept, QuantileAlphas::One(_)), alphas.len() == 1);
            assert_eq!(&kept[..], &alphas[..]);
            assert_eq!(to_cbor(&kept), to_cbor(&alphas));
            let read: QuantileAlphas = serde_cbor::from_slice(&to_cbor(&alphas)).unwrap();
            assert_eq!(read, kept);
        }
    }
}

#[cfg(test)]
mod bytes_tests {
    use super::*;

    /// Every grid, value type and number of alphas reads back from its bytes, which end
    /// where the counts begin; one alpha is kept inline again.
    #[test]
    fn parameters_read_back_from_their_bytes() {
        let grids = [
            ValueGrid::Float(Grid {
                lo: -3.5,
                hi: 1e6,
                size: 1 << 20,
            }),
            ValueGrid::Integer(IntegerGrid::new(i64::MIN, i64::MAX, 1 << 24)),
            ValueGrid::Integer(IntegerGrid::new(-40_000, 40_000, 1 << 10)),
        ];
        for grid in grids {
            for value_type in VALUE_TYPES {
                for alphas in [vec![0.5], vec![0.1, 0.9], vec![0.25, 0.25, 0.75]] {
                    let parameters = QuantileParameters {
                        grid,
                        value_type,
                        alphas: alphas.clone().into(),
                        epsilon: 0.3,
                    };
                    let mut bytes = Vec::new();
                    parameters.write_bytes(&mut bytes);
                    bytes.extend_from_slice(b"counts");
                    let mut reader = Reader(&bytes);
                    let read = QuantileParameters::read_bytes(&mut reader);
                    assert_eq!(read, parameters);
                    assert_eq!(reader.rest(), b"counts");
                    let inline = matches!(read.alphas, QuantileAlphas::One(_));
                    assert_eq!(inline, alphas.len() == 1);
                }
            }
        }
    }

    /// The bytes of one state's parameters, as a coordinator reads them from a worker of
    /// another build: a change to the format fails here, not only in a round trip.
    #[test]
    fn the_format_is_fixed() {
        let parameters = QuantileParameters {
            grid: ValueGrid::Float(Grid {
                lo: 0.0,
                hi: 1e6,
                size: 1 << 20,
            }),
            value_type: ValueType::Integer,
            alphas: vec![0.5].into(),
            epsilon: 1.0,
        };
        let mut bytes = Vec::new();
        parameters.write_bytes(&mut bytes);
        let expected: &[u8] = &[
            0, // a float grid: lo, hi, K
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x84, 0x2e, 0x41, 0, 0, 0x10, 0,
            2, // integer values
            1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xe0, 0x3f, // one alpha, 0.5
            0, 0, 0, 0, 0, 0, 0xf0, 0x3f, // epsilon 1
        ];
        assert_eq!(bytes, expected);
    }

    #[test]
    #[should_panic(expected = "not the bytes of a quantile grid (tag 7)")]
    fn other_bytes_are_refused() {
        QuantileParameters::read_bytes(&mut Reader(&[7, 0, 0, 0]));
    }

    #[test]
    #[should_panic(expected = "not the bytes of a quantile value type")]
    fn an_unknown_value_type_is_refused() {
        let bytes = [&[0][..], &[0; 20], &[5]].concat();
        QuantileParameters::read_bytes(&mut Reader(&bytes));
    }

    /// 2^32 − 1 alphas (32 GiB) are refused before a vector is made for them.
    #[test]
    #[should_panic(expected = "a count past the end of the bytes")]
    fn an_alpha_count_past_the_end_is_refused() {
        let bytes = [&[0][..], &[0; 20], &[0], &u32::MAX.to_le_bytes(), &[0; 16]].concat();
        QuantileParameters::read_bytes(&mut Reader(&bytes));
    }
}
