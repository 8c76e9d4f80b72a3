//! The arguments of dp_quantile and dp_quantiles as a call gives them, and their
//! validation into the parameters a state keeps: the alphas, ε, and the public grid
//! (fractional for float8 and numeric values, whole numbers for integer values).

use super::forms::ValueType;
use super::guc;
use super::items::array_elements;
use crate::error::Error;
use crate::mechanisms::quantile::{Grid, IntegerGrid};
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

/// The alphas of a state, kept in it when there is one (as in every dp_quantile), so that
/// a group's state allocates nothing outside the aggregate's memory context: a `Vec` took
/// a malloc a group that PostgreSQL did not see. Serialized as a `Vec` is (the bytes of
/// dp_quantile_serialize are unchanged), and made only through `From<Vec<f64>>`, so that
/// equal alphas are equal values.
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
